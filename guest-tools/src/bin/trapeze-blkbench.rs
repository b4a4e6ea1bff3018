// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-blkbench`: 4 KiB random read latency (p50/p99) and sequential read bandwidth of
//! a block device with `O_DIRECT`, optionally writing a seeded pattern first (timed) and
//! timing random 4 KiB writes (p50/p99); every page read is checked against the pattern. Prints one JSON line on stdout.

use clap::Parser;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;
use trapeze_guest_tools::blkbench::{self, Config, O_DIRECT};

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// The block device (or file) to measure, e.g. /dev/nbd0 or /dev/gms0.
    device: String,
    /// Name of the device in the report.
    #[arg(long, default_value = "dev")]
    name: String,
    /// Use only the first MiB of the device (default: all of it).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    size_mb: Option<u64>,
    /// Random 4 KiB reads to time.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    reads: u32,
    /// Seed of the random offsets and of the pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sequential read size in KiB (a multiple of 4).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(4..=65536))]
    seq_kib: u32,
    /// Write the pattern over the range first (destroys the device's contents).
    #[arg(long)]
    write: bool,
    /// Random 4 KiB writes to time (p50/p99), each rewriting a page with its own pattern,
    /// after the pattern write and before the reads.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000_000))]
    writes: u32,
    /// Do not check the pages read against the pattern.
    #[arg(long)]
    no_verify: bool,
    /// Open without O_DIRECT (through the page cache).
    #[arg(long)]
    buffered: bool,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mut open = OpenOptions::new();
    open.read(true).write(a.write || a.writes > 0);
    if !a.buffered {
        open.custom_flags(O_DIRECT);
    }
    let mut f = match open.open(&a.device) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("trapeze-blkbench: opening {}{}: {e}", a.device, if a.buffered { "" } else { " with O_DIRECT" });
            return ExitCode::FAILURE;
        }
    };
    let c = Config {
        name: a.name,
        limit_bytes: a.size_mb.map(|m| m << 20),
        reads: a.reads,
        seed: a.seed,
        seq_block_bytes: a.seq_kib as usize * 1024,
        write: a.write,
        verify: !a.no_verify,
        writes: a.writes,
    };
    match blkbench::run(&mut f, &a.device, &c) {
        Ok(r) => {
            println!("{}", r.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("trapeze-blkbench: {e}");
            ExitCode::FAILURE
        }
    }
}
