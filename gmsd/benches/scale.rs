// SPDX-License-Identifier: GPL-2.0-only
//! `scale_p50_ratio` of `cargo xtask bench gms`: does a getpage from `gmsd` cost more when
//! the cluster holds more?
//!
//! Two clusters of three daemons over UDP on 127.0.0.1 run side by side: one holding
//! `--small-mib` (32 MiB) and one holding `--large-mib` (8 GiB). In each, a client writes
//! the data set with one copy through node 0 (`--budget-mb 1`, so it lends nothing),
//! whose puts spread it over nodes 1 and 2 (each lending half the set and an eighth
//! more). Then random network-only gets through node 0 (no page cache, no read-ahead)
//! alternate between the clusters in rounds of [`ROUND`], one page per request, so both
//! see the same phases of this VM; which cluster goes first alternates too, and the
//! cluster not measured is stopped (SIGSTOP) so that its idle daemons take no core. The
//! client and each cluster's node 0 run on CPU 0 and the lenders on CPU 1 (`--no-pin`
//! leaves them to the scheduler): unpinned, four spinning processes on two cores took
//! turns by the scheduler's history of each (the large fill is a long one), and the same
//! clusters measured 0.96–1.20 from run to run; pinned, 1.04–1.11 (2026-11-27). Each get
//! is timed around the request on the control socket; its bytes are checked against the
//! page's pattern outside the timed call, and a miss or a wrong byte fails the run.
//! `scale_p50_ratio` is the large cluster's p50 over the small one's.
//!
//! `cargo bench -p trapeze-gmsd --bench scale -- [--small-mib N] [--large-mib N] [--reads N] [--json]`

#[path = "support/cluster.rs"]
mod cluster;
#[path = "../tests/support/daemons.rs"]
mod daemons;

use anyhow::Context;
use clap::Parser;
use cluster::{Cluster, NODES};
use gmsd::proto::PAGE_BYTES;
use serde_json::json;
use std::time::Instant;

/// Random gets per round on each cluster (the cluster measured first alternates).
const ROUND: u64 = 500;

#[derive(Parser)]
#[command(about = "gmsd getpage p50 on an 8 GiB cluster over a 32 MiB one (scale_p50_ratio)")]
struct Args {
    /// MiB held by the small cluster.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    small_mib: u64,
    /// MiB held by the large cluster (its two lenders need that much memory between them).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=32_768))]
    large_mib: u64,
    /// Random gets on each cluster.
    #[arg(long, default_value_t = 40_000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    reads: u64,
    /// Every daemon's `--idle-spin-us`.
    #[arg(long, default_value_t = gmsd::daemon::IDLE_SPIN.as_micros() as u64)]
    idle_spin_us: u64,
    /// Leave the processes where the scheduler puts them (by default the client and each
    /// node 0 run on CPU 0, the lenders on CPU 1).
    #[arg(long)]
    no_pin: bool,
    /// One JSON object (the row) on stdout.
    #[arg(long)]
    json: bool,
    /// Ignored: `cargo bench` passes it to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let pin = !a.no_pin && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if pin {
        let mut set = rustix::thread::CpuSet::new();
        set.set(0);
        rustix::thread::sched_setaffinity(None, &set).context("pinning the client to CPU 0")?;
    } else if !a.no_pin {
        eprintln!("scale: fewer than two CPUs: the processes are not pinned");
    }
    let t = Instant::now();
    let mut small = Cluster::start("bench-scale-small", a.small_mib, a.idle_spin_us, pin)?;
    let mut large = Cluster::start("bench-scale-large", a.large_mib, a.idle_spin_us, pin)?;
    for c in [&mut small, &mut large] {
        if let Err(e) = c.fill() {
            c.daemons.print_logs();
            return Err(e.context(format!("filling the {} MiB cluster", (c.pages * PAGE_BYTES as u64) >> 20)));
        }
    }
    let (hs, hl) = (small.held(), large.held());
    eprintln!(
        "scale: {} and {} pages stored in {:.1} s (lenders hold {hs:?} and {hl:?})",
        small.pages,
        large.pages,
        t.elapsed().as_secs_f64()
    );
    let (mut ls, mut ll) = (Vec::new(), Vec::new());
    let mut r = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let mut done = 0;
    while done < a.reads {
        let n = ROUND.min(a.reads - done);
        // Which cluster goes first alternates from round to round.
        for k in [0, 1].map(|k| (k + done / ROUND) % 2) {
            let (c, other, lat) = if k == 0 { (&mut small, &large, &mut ls) } else { (&mut large, &small, &mut ll) };
            // The other cluster is stopped while this one is measured, so its idle
            // daemons take no core from it.
            other.daemons.pause(true).context("stopping the other cluster")?;
            for _ in 0..n {
                match c.get(&mut r) {
                    Ok(us) => lat.push(us),
                    Err(e) => {
                        c.daemons.print_logs();
                        return Err(e);
                    }
                }
            }
            other.daemons.pause(false).context("continuing the other cluster")?;
        }
        done += n;
    }
    // Node 0's own view: each getpage from its issue to its completion, without the
    // control socket.
    let (ds, dl) = (small.client.stat()?.get_latency, large.client.stat()?.get_latency);
    let (s50, s99, l50, l99) = (pct(&mut ls, 0.5), pct(&mut ls, 0.99), pct(&mut ll, 0.5), pct(&mut ll, 0.99));
    let ratio = l50 / s50;
    eprintln!(
        "scale: random network-only gets through gmsd node 0 of {NODES}, {} each, in rounds of {ROUND}: \
         {} MiB p50 {s50:.1} µs p99 {s99:.1} µs; {} MiB p50 {l50:.1} µs p99 {l99:.1} µs; \
         scale_p50_ratio {ratio:.3} (target ≤ 1.2); as node 0 saw them: p50 {:.1} and {:.1} µs",
        a.reads, a.small_mib, a.large_mib, ds.p50_us, dl.p50_us
    );
    if a.json {
        println!(
            "{}",
            json!({"row": "scale", "source": "gmsd", "nodes": NODES, "reads": a.reads,
                   "small_mib": a.small_mib, "small_p50_us": s50, "small_p99_us": s99,
                   "large_mib": a.large_mib, "large_p50_us": l50, "large_p99_us": l99,
                   "small_node_p50_us": ds.p50_us, "large_node_p50_us": dl.p50_us,
                   "scale_p50_ratio": ratio})
        );
    }
    Ok(())
}
