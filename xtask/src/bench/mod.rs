// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench <what>`: benchmarks that print figures and ratios against a
//! baseline measured in the same run.

mod block;
mod block_md;
mod dma;
mod gms;
mod nic;
mod plot;
mod rpc;
mod vm;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The firmware's DMA policies in the timing model: one-way latency of a 128 B + 8 KB
    /// message and streaming bandwidth, store-and-forward vs fixed pulses vs eager DMA,
    /// beside the papers' figures.
    Dma(dma::DmaArgs),
    /// The virtual NIC, native firmware vs the flashed riscv32 image: messages/s, 8 KB
    /// streaming and one-way 8 KB latency (p50/p99) over the in-process link.
    Nic(nic::NicArgs),
    /// NetRPC over virtual NICs: 2-way and 3-way × wait / cont / defer × 0 / 4 / 8 KB ×
    /// solicited / unsolicited / unsolicited+copy, with raw-NIC, UDP and TCP baselines.
    Rpc(rpc::RpcArgs),
    /// GMS on a 3-node in-process cluster: sequential read MB/s with read-ahead 0 / 4 /
    /// 16 and random 8 KB getpage p50/p99, against O_DIRECT reads of a local disk file.
    Gms(gms::GmsArgs),
    /// Block sharing: a sequential read of one file through gmblockd's direct path
    /// (disk to NIC-local memory) and its via-RAM path against Debian's nbd-server read
    /// with nbdcopy, interleaved rounds: MB/s, server CPU-seconds per GiB, host-RAM bytes
    /// per byte, `direct_over_via_ram`, `direct_over_nbd_server`; and the NBD export
    /// (nbdkit with gmblock's plugin) against nbdkit memory and nbdkit file, all read by
    /// nbdcopy: `export_over_nbdkit` (over nbdkit file), `export_over_nbdkit_memory`, `export_over_direct`.
    Block(block::BlockArgs),
    /// QEMU guests: 4 KiB random read p50/p99 and sequential MB/s of the GMS block device
    /// /dev/gms0 in guest A against Linux's NBD client reading nbd-server in guest B over
    /// virtio-net, in the same run, with the gms/nbd ratios.
    Vm(vm::VmBenchArgs),
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.what {
        What::Dma(d) => dma::run(d),
        What::Nic(n) => nic::run(n),
        What::Rpc(r) => rpc::run(r),
        What::Gms(g) => gms::run(g),
        What::Block(b) => block::run(b),
        What::Vm(v) => vm::run(v),
    }
}

/// Run `cargo ARGS` (a bench example given `--json`) with its stdout captured; when `plot`
/// names a directory, draw the figure there with `figure` from the JSON lines and keep the
/// lines beside it (`NAME.json`). The lines are printed to stdout either way.
fn cargo_json(
    args: &[&str],
    plot: Option<&std::path::Path>,
    name: &str,
    figure: fn(&std::path::Path, &[serde_json::Value]) -> anyhow::Result<std::path::PathBuf>,
) -> anyhow::Result<()> {
    cargo_json_all(&[args], plot, name, figure)
}

/// Run each `cargo` command in turn, printing the JSON lines they print; with `plot`,
/// keep all of them in DIR/NAME.json and draw the figure from them.
fn cargo_json_all(
    commands: &[&[&str]],
    plot: Option<&std::path::Path>,
    name: &str,
    figure: fn(&std::path::Path, &[serde_json::Value]) -> anyhow::Result<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut all = String::new();
    for args in commands {
        eprintln!("$ cargo {}", args.join(" "));
        let out = std::process::Command::new(&cargo)
            .args(*args)
            .current_dir(crate::workspace_root())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        anyhow::ensure!(out.status.success(), "`cargo {}` failed ({})", args.join(" "), out.status);
        all.push_str(&text);
    }
    if let Some(dir) = plot {
        let lines = plot::parse_lines(&all)?;
        plot::write_json(dir, name, &lines)?;
        figure(dir, &lines)?;
    }
    Ok(())
}

/// The DMA-policy tables, as printed by `cargo xtask bench dma`.
pub fn dma_table() -> anyhow::Result<()> {
    dma::run(dma::DmaArgs::default())
}
