// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench gms`: sequential read bandwidth from network memory with read-ahead
//! depth 0 / 4 / 16 and random 8 KB getpage latency (p50/p99) on a 3-node in-process
//! cluster, against the same pages in a file on the local disk read with `O_DIRECT` in
//! the same run (`node/examples/bench_gms/`, release build), rounds measuring what two
//! cores allow read-ahead, then the sequential scans again with a modelled one-way wire
//! delay of 2 and 10 µs; last, random getpage p50 on a cluster holding 8 GiB against one
//! holding 32 MiB, in process (`scale_inproc_p50_ratio`) and on three `gmsd` over UDP
//! (`scale_p50_ratio`, `gmsd/benches/scale.rs`; each needs 8 GiB of memory, `--scale-pages`
//! sets the large clusters' size, 0 skips both); and what replication costs a writer:
//! rounds writing pages with one copy and with two in turn, `replication_cost` the median
//! over the pairs of rounds of the r = 2 write time over r = 1's (with each side's p50);
//! then `repair_mb_s` from four `gmsd` over UDP, one killed after a two-copy write
//! (`gmsd/benches/repair.rs`, `--repair-mib`, 0 skips it); last, a random 8 KiB read
//! through `gmsd` over UDP against the servers a user would pick instead, taking turns in
//! the same run from the same client thread: `nbdkit memory` read with libnbd
//! (`gmsd_over_nbdkit`) and memcached GET (`gmsd_over_memcached`)
//! (`gmsd/benches/baselines/`, `--baseline-reads`, 0 skips it). Run it on a quiet machine.

#[derive(clap::Args)]
pub struct GmsArgs {
    /// One JSON object per row (row, source, readahead, mb_s / p50_us, p99_us), then a
    /// summary object with the ratios.
    #[arg(long)]
    json: bool,
    /// Also draw the figure into DIR/gms.svg (and keep the JSON lines it was drawn from
    /// in DIR/gms.json); stdout then carries the JSON lines, as with --json.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Pages in the data set (8 KiB each).
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(64..=1_000_000))]
    pages: u64,
    /// Random reads per side.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    random: u64,
    /// Pages (8 KiB) of the large clusters in the scale comparisons, in process and on
    /// `gmsd` (default 1 Mi = 8 GiB); 0: none.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(0..=4 << 20))]
    scale_pages: u64,
    /// Pairs of write rounds (r = 1, r = 2) for `replication_cost`; 0: none.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
    replication_pairs: u32,
    /// MiB written with two copies to four `gmsd` before one is killed, for `repair_mb_s`
    /// (`gmsd/benches/repair.rs`: the copies it held made again, per second from its
    /// failure's declaration); 0: none.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(0..=2048))]
    repair_mib: u64,
    /// Random 8 KiB reads from each system in the baselines comparison (gmsd, nbdkit
    /// memory through libnbd, memcached GET); 0: none.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    baseline_reads: u64,
    /// Directory on a real disk for the baseline's file (default ~/.cache/trapeze/bench;
    /// tmpfs is refused).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

pub fn run(a: GmsArgs) -> anyhow::Result<()> {
    let (p, r, sp) = (a.pages.to_string(), a.random.to_string(), a.scale_pages.to_string());
    let rp = a.replication_pairs.to_string();
    let dir = a.dir.map(|d| d.display().to_string());
    let mut args = vec![
        "run",
        "--quiet",
        "--locked",
        "--release",
        "-p",
        "trapeze-node",
        "--example",
        "bench_gms",
        "--",
        "--pages",
        &p,
        "--random",
        &r,
        "--scale-pages",
        &sp,
        "--replication-pairs",
        &rp,
    ];
    if let Some(d) = &dir {
        args.extend(["--dir", d.as_str()]);
    }
    let mib = a.repair_mib.to_string();
    let mut repair =
        vec!["bench", "--quiet", "--locked", "-p", "trapeze-gmsd", "--bench", "repair", "--", "--mib", &mib];
    // The same large data set on three `gmsd` (its MiB from the in-process cluster's pages).
    let large_mib = ((a.scale_pages * 8192) >> 20).max(1).to_string();
    let mut scale =
        vec!["bench", "--quiet", "--locked", "-p", "trapeze-gmsd", "--bench", "scale", "--", "--large-mib", &large_mib];
    let reads = a.baseline_reads.to_string();
    let mut baselines =
        vec!["bench", "--quiet", "--locked", "-p", "trapeze-gmsd", "--bench", "baselines", "--", "--reads", &reads];
    if a.json || a.plot.is_some() {
        args.push("--json");
        repair.push("--json");
        scale.push("--json");
        baselines.push("--json");
    }
    let mut commands: Vec<&[&str]> = vec![&args];
    if a.scale_pages > 0 {
        commands.push(&scale);
    }
    if a.repair_mib > 0 {
        commands.push(&repair);
    }
    if a.baseline_reads > 0 {
        crate::prereq::ensure_gms_baseline_deps()?;
        commands.push(&baselines);
    }
    if a.plot.is_some() {
        return super::cargo_json_all(&commands, a.plot.as_deref(), "gms", super::plot::gms::write);
    }
    commands.iter().try_for_each(|c| crate::cargo(c))
}
