// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-filebench`: write a file of pattern pages (synced), or read one back whole with
//! streaming `read()` calls or through `mmap`, every page checked against the pattern.
//! Prints one JSON line on stdout (MB/s of the timed part); exits 1 on any error.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use trapeze_guest_tools::filebench::{self, Mode};

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// Create the file with --size-mb MiB of the pattern, then fsync.
    Write,
    /// Read the whole file with read() calls of --block-kib KiB.
    Stream,
    /// Map the whole file (shared, read-only) and touch every page in order.
    Mmap,
}

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// The file, e.g. /mnt/data on a file system on /dev/gms0.
    file: PathBuf,
    /// What to do.
    #[arg(long, value_enum)]
    mode: ModeArg,
    /// Name of the device in the report.
    #[arg(long, default_value = "dev")]
    name: String,
    /// Size of the file to write in MiB (write mode).
    #[arg(long, value_name = "MIB", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    size_mb: u64,
    /// Size of each write() / read() call in KiB (a multiple of 4).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(4..=65536))]
    block_kib: u32,
    /// Seed of the pattern (the same for write and read).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mode = match a.mode {
        ModeArg::Write => Mode::Write,
        ModeArg::Stream => Mode::Stream,
        ModeArg::Mmap => Mode::Mmap,
    };
    match filebench::run(&a.name, &a.file, mode, a.size_mb << 20, a.seed, a.block_kib as usize * 1024) {
        Ok(r) => {
            println!("{}", r.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("trapeze-filebench: {e}");
            ExitCode::FAILURE
        }
    }
}
