// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd_over_nbdkit` and `gmsd_over_memcached` of `cargo xtask bench gms`: a random 8 KiB
//! read from network memory through `gmsd`, against the two servers a user would reach
//! for instead, in the same run, from the same client thread.
//!
//! - **gmsd**: three daemons over UDP on 127.0.0.1 hold the data set with one copy
//!   (`support/cluster.rs`); each read is a network-only getpage through node 0's control
//!   socket, which node 0 sends on to the lender holding the page.
//! - **nbdkit**: `nbdkit memory` (a RAM disk) over NBD on TCP, read with libnbd's
//!   `nbd_pread` (8 KiB at the page's offset).
//! - **memcached**: one worker thread, an 8 KiB value per page, read with GET over TCP
//!   (`memcached.rs`: one write per request, why not the `memcache` crate).
//!
//! Every read's bytes are checked against the page's pattern outside the timed call; a
//! wrong byte or a miss fails the run. The systems take turns in rounds of `--round` reads
//! of the same random pages, the one going first rotating from round to round, so each
//! sees this VM's fast and slow phases alike; a gmsd cluster is stopped (SIGSTOP) while
//! another system is measured, so its daemons take no core from it.
//!
//! Placement and waiting, stated: the client thread and gmsd's node 0 run on CPU 0; the
//! lenders, nbdkit and memcached on CPU 1 (`--no-pin`: the scheduler's choice), so every
//! read crosses cores once each way. nbdkit and memcached block in `epoll` between
//! requests. gmsd runs twice, as two clusters: `gmsd` parks in `poll` at once after a
//! message (`--idle-spin-us 0`), the servers' own waiting policy, and is the headline;
//! `gmsd-spin` spins for gmsd's default `--idle-spin-us` after a client's message first,
//! as a user running it with defaults gets. CPU: nanoseconds each system's server
//! processes and the client thread ran per read (`/proc/…/schedstat`).
//!
//! The ratios are p50 over p50 of all reads (`gmsd_over_nbdkit`, `gmsd_over_memcached`,
//! and `gmsd_spin_over_*`), with the p10–p90 of the per-round ratios and the server CPU
//! per read over the baseline's (`server_cpu`).
//!
//! `cargo bench -p trapeze-gmsd --bench baselines -- [--mib N] [--reads N] [--json]`

#[path = "../support/cluster.rs"]
mod cluster;
#[path = "../../tests/support/daemons.rs"]
mod daemons;
#[allow(unsafe_code)] // the libnbd FFI: the bench's one documented unsafe module
mod libnbd;
mod memcached;
mod servers;

use anyhow::{bail, Context};
use clap::Parser;
use cluster::{content, Cluster, VOL};
use gms::prelude::PageId;
use gmsd::proto::{GetOutcome, PAGE_BYTES};
use serde_json::json;
use servers::{cpu_ns, thread_cpu_ns, Server};
use std::time::Instant;

const PAGE: usize = PAGE_BYTES;

#[derive(Parser)]
#[command(about = "gmsd getpage against nbdkit memory (libnbd) and memcached GET, 8 KiB, same run")]
struct Args {
    /// MiB in the data set (each system holds the same pages).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    mib: u64,
    /// Random reads from each system.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(30..=10_000_000))]
    reads: u64,
    /// Reads per system per round.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    round: u64,
    /// `gmsd-spin`'s `--idle-spin-us` (`gmsd` parks at once).
    #[arg(long, default_value_t = gmsd::daemon::IDLE_SPIN.as_micros() as u64)]
    idle_spin_us: u64,
    /// Leave the processes where the scheduler puts them.
    #[arg(long)]
    no_pin: bool,
    /// One JSON object (the row) on stdout.
    #[arg(long)]
    json: bool,
    /// Ignored: `cargo bench` passes it to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One system read from: how to read a page, and the processes that serve it.
enum Target {
    /// A gmsd cluster; whether its daemons spin after a client's message.
    Gmsd(Cluster, bool),
    Nbdkit(Server, libnbd::Nbd),
    Memcached(Server, memcached::Memcached),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Gmsd(_, false) => "gmsd",
            Target::Gmsd(_, true) => "gmsd-spin",
            Target::Nbdkit(..) => "nbdkit",
            Target::Memcached(..) => "memcached",
        }
    }

    /// Store every page of the data set.
    fn fill(&mut self, pages: u64) -> anyhow::Result<()> {
        match self {
            Target::Gmsd(c, _) => c.fill(),
            Target::Nbdkit(_, nbd) => (0..pages).try_for_each(|i| nbd.pwrite(&content(i), i * PAGE as u64)),
            Target::Memcached(_, m) => (0..pages).try_for_each(|i| m.set(&key(i), &content(i))),
        }
    }

    /// Read page `i` into `buf`; false on a miss.
    fn read(&mut self, i: u64, buf: &mut Vec<u8>) -> anyhow::Result<bool> {
        match self {
            Target::Gmsd(c, _) => match c.client.get_many(&[PageId::new(VOL, i)], true)?.pop() {
                Some(GetOutcome::Hit { data, .. }) => {
                    *buf = data;
                    Ok(true)
                }
                _ => Ok(false),
            },
            Target::Nbdkit(_, nbd) => {
                buf.resize(PAGE, 0);
                nbd.pread(buf, i * PAGE as u64).map(|()| true)
            }
            Target::Memcached(_, m) => m.get(&key(i), buf),
        }
    }

    /// The processes that serve this system's reads.
    fn pids(&self) -> Vec<u32> {
        match self {
            Target::Gmsd(c, _) => (0..cluster::NODES).filter_map(|n| c.daemons.pid(n)).collect(),
            Target::Nbdkit(s, _) | Target::Memcached(s, _) => vec![s.pid()],
        }
    }

    /// Stop (or continue) the system's processes while another is measured: only gmsd's
    /// daemons do anything when idle.
    fn pause(&self, stop: bool) -> anyhow::Result<()> {
        match self {
            Target::Gmsd(c, _) => c.daemons.pause(stop).context("stopping or continuing the gmsd cluster"),
            _ => Ok(()),
        }
    }
}

fn key(i: u64) -> String {
    format!("trapeze-page-{i}")
}

/// What one system's reads measured.
#[derive(Default)]
struct Tally {
    lat_us: Vec<f64>,
    round_p50: Vec<f64>,
    server_ns: u64,
    client_ns: u64,
}

fn pct(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// One round of `reads` timed reads of the pages `r` draws from `t`, into `tally`.
fn round(t: &mut Target, pages: u64, reads: u64, r: &mut fastrand::Rng, tally: &mut Tally) -> anyhow::Result<()> {
    let pids = t.pids();
    let server0: u64 = pids.iter().map(|&p| cpu_ns(p)).sum::<anyhow::Result<u64>>()?;
    let client0 = thread_cpu_ns()?;
    let mut lat = Vec::with_capacity(reads as usize);
    let mut buf = Vec::with_capacity(PAGE);
    for _ in 0..reads {
        let i = r.u64(..pages);
        let t0 = Instant::now();
        let hit = t.read(i, &mut buf)?;
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if !hit {
            bail!("{}: page {i} of {pages} missed", t.name());
        }
        if buf[..] != content(i)[..] {
            bail!("{}: page {i} of {pages}: wrong bytes", t.name());
        }
        lat.push(us);
    }
    tally.client_ns += thread_cpu_ns()? - client0;
    tally.server_ns += pids.iter().map(|&p| cpu_ns(p)).sum::<anyhow::Result<u64>>()? - server0;
    tally.round_p50.push(pct(&lat, 0.5));
    tally.lat_us.extend(lat);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let pin = !a.no_pin && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if pin {
        let mut set = rustix::thread::CpuSet::new();
        set.set(0);
        rustix::thread::sched_setaffinity(None, &set).context("pinning the client to CPU 0")?;
    }
    let served = pin.then_some(1);
    let bytes = a.mib << 20;
    let pages = bytes / PAGE as u64;
    let nbdkit = Server::nbdkit(bytes, served)?;
    let nbd = libnbd::Nbd::connect("127.0.0.1", nbdkit.port)?;
    let mc = Server::memcached(bytes, served)?;
    let mclient = memcached::Memcached::connect(mc.port)?;
    let park = Cluster::start("bench-baselines", a.mib, 0, pin)?;
    let spin = Cluster::start("bench-baselines-spin", a.mib, a.idle_spin_us, pin)?;
    let mut targets = [
        Target::Gmsd(park, false),
        Target::Gmsd(spin, true),
        Target::Nbdkit(nbdkit, nbd),
        Target::Memcached(mc, mclient),
    ];
    let systems = targets.len();
    let t = Instant::now();
    for tg in targets.iter_mut() {
        tg.fill(pages).with_context(|| format!("storing {pages} pages in {}", tg.name()))?;
    }
    eprintln!("baselines: {pages} pages of 8 KiB stored in each system in {:.1} s", t.elapsed().as_secs_f64());
    let mut tallies: [Tally; 4] = Default::default();
    // The same random pages from each system: one generator each, one seed.
    let mut rngs: [fastrand::Rng; 4] = std::array::from_fn(|_| fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15));
    let mut done = 0;
    let mut k = 0;
    while done < a.reads {
        let n = a.round.min(a.reads - done);
        for s in (0..systems).map(|j| (j + k) % systems) {
            for (o, tg) in targets.iter().enumerate() {
                tg.pause(o != s)?;
            }
            if let Err(e) = round(&mut targets[s], pages, n, &mut rngs[s], &mut tallies[s]) {
                if let Target::Gmsd(c, _) = &targets[s] {
                    c.daemons.print_logs();
                }
                return Err(e);
            }
        }
        targets.iter().try_for_each(|t| t.pause(false))?;
        done += n;
        k += 1;
    }
    report(&a, &targets, &tallies)
}

/// Print each system's figures and the ratios (and the JSON row with `--json`).
fn report(a: &Args, targets: &[Target; 4], tallies: &[Tally; 4]) -> anyhow::Result<()> {
    let mut row = json!({"row": "baselines", "mib": a.mib, "reads": a.reads, "round": a.round,
                         "idle_spin_us": a.idle_spin_us, "pinned": !a.no_pin});
    for (tg, t) in targets.iter().zip(tallies) {
        let n = t.lat_us.len() as f64;
        let (p50, p99) = (pct(&t.lat_us, 0.5), pct(&t.lat_us, 0.99));
        let (server, client) = (t.server_ns as f64 / n / 1e3, t.client_ns as f64 / n / 1e3);
        eprintln!(
            "baselines: {:<9} 8 KiB random read p50 {p50:6.1} µs p99 {p99:6.1} µs; CPU per read: servers {server:5.1} µs, client {client:5.1} µs",
            tg.name()
        );
        let key = tg.name().replace('-', "_");
        row[format!("{key}_p50_us")] = json!(p50);
        row[format!("{key}_p99_us")] = json!(p99);
        row[format!("{key}_server_cpu_us")] = json!(server);
        row[format!("{key}_client_cpu_us")] = json!(client);
    }
    for (x, o, name, target) in [
        (0, 2, "gmsd_over_nbdkit", 1.0),
        (0, 3, "gmsd_over_memcached", 0.6),
        (1, 2, "gmsd_spin_over_nbdkit", 1.0),
        (1, 3, "gmsd_spin_over_memcached", 0.6),
    ] {
        let (g, b) = (&tallies[x], &tallies[o]);
        let ratio = pct(&g.lat_us, 0.5) / pct(&b.lat_us, 0.5);
        let per_round: Vec<f64> = g.round_p50.iter().zip(&b.round_p50).map(|(x, y)| x / y).collect();
        let (p10, p90) = (pct(&per_round, 0.1), pct(&per_round, 0.9));
        let cpu = g.server_ns as f64 / b.server_ns.max(1) as f64;
        let verdict = if ratio <= target { "met" } else { "NOT met" };
        eprintln!(
            "baselines: {name} {ratio:.3} (rounds p10-p90 {p10:.3}-{p90:.3}; target <= {target}: {verdict}); server CPU per read {cpu:.2}x"
        );
        row[name] = json!({"p50": ratio, "p10": p10, "p90": p90, "target": target, "server_cpu": cpu});
    }
    if a.json {
        println!("{row}");
    }
    Ok(())
}
