// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench block`: gmblockd's direct and via-RAM data paths against Debian's
//! `nbd-server`, gmblock's NBD export (nbdkit with the `gmblock-nbdkit` plugin, built
//! here in release first) against `nbdkit memory` and `nbdkit file`, and a volume striped
//! over 1, 2 and 4 gmblockd servers with modelled disks (`stripe_scaling`): sequential
//! reads in interleaved rounds; and 4 KiB writes and a flush through a GMS-cached volume
//! (write-through, write-back) against gmblock's client on the same modelled disk
//! (`cached`); and a memory-bound job's slowdown beside the direct path, the path via RAM
//! and nbd-server (`corunner_slowdown`) (`gmblock/benches/block.rs`, release build). Then,
//! in a QEMU guest, gmblock's striped NBD export against md RAID-0 over NBD exports of the
//! same four modelled servers (`stripe_md`, `block_md.rs`; `--no-md` leaves it out). Run it
//! on a quiet machine: the figures are MB/s and CPU time, which other jobs on the cores
//! change.

#[derive(clap::Args)]
pub struct BlockArgs {
    /// One JSON object per side and round, then a summary object with the ratios.
    #[arg(long)]
    json: bool,
    /// The file's size in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    mib: u64,
    /// Interleaved rounds (each reads the file once per side).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Directory on a disk file system for the file (default ~/.cache/trapeze/bench).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Bytes each striping side reads, in MiB.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    stripe_mib: u64,
    /// The striping sides' modelled disks: MB/s and µs per request.
    #[arg(long, default_value = "100")]
    model_mbps: String,
    #[arg(long, default_value = "200")]
    model_latency_us: String,
    /// Only the striping sides.
    #[arg(long)]
    stripe_only: bool,
    /// Only the GMS-cached sides (writes through gmblock's client, and a GMS-cached volume
    /// in write-through and write-back, to a modelled disk).
    #[arg(long)]
    cached_only: bool,
    /// Leave out the co-location experiment (`corunner_slowdown`: a memory-bound job on
    /// CPU 1 beside each server path on CPU 0; it needs both CPUs).
    #[arg(long)]
    no_corunner: bool,
    #[command(flatten)]
    md: super::block_md::MdArgs,
}

pub fn run(a: BlockArgs) -> anyhow::Result<()> {
    let md = a.md.wanted() && !a.cached_only;
    crate::prereq::ensure_block_bench_deps()?;
    if md {
        crate::prereq::ensure_md_bench_deps()?;
        a.md.check()?;
    }
    crate::cargo(&["build", "--release", "--locked", "-p", "trapeze-gmblock-nbdkit"])?;
    if a.md.only() {
        return super::block_md::run(&a.md, a.rounds, a.json);
    }
    let plugin = crate::build::target_dir()?.join("release/libgmblock_nbdkit.so");
    let plugin = plugin.display().to_string();
    let (mib, rounds, stripe_mib) = (a.mib.to_string(), a.rounds.to_string(), a.stripe_mib.to_string());
    let dir = a.dir.map(|d| d.display().to_string());
    let mut args = vec![
        "bench",
        "--quiet",
        "--locked",
        "-p",
        "trapeze-gmblock",
        "--bench",
        "block",
        "--",
        "--mib",
        &mib,
        "--rounds",
        &rounds,
        "--plugin",
        &plugin,
        "--stripe-mib",
        &stripe_mib,
        "--model-mbps",
        &a.model_mbps,
        "--model-latency-us",
        &a.model_latency_us,
    ];
    if a.stripe_only {
        args.push("--stripe-only");
    }
    if a.cached_only {
        args.push("--cached-only");
    }
    if a.no_corunner {
        args.push("--no-corunner");
    }
    if let Some(d) = &dir {
        args.extend(["--dir", d.as_str()]);
    }
    if a.json {
        args.push("--json");
    }
    crate::cargo(&args)?;
    if md {
        super::block_md::run(&a.md, a.rounds, a.json)?;
    }
    Ok(())
}
