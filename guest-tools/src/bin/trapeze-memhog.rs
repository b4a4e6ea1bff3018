// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-memhog`: a memory-pressure workload for swap tests. Allocates a multiple of
//! the guest's available RAM (`MemAvailable`) in anonymous pages, writes a pattern derived
//! from each page's index, re-reads and checks every page (sequential, then random order),
//! rewrites them in random order and checks again. Prints a line per phase and one JSON
//! line; exits 1 if any page came back wrong. `--compressible`: each page's second half
//! zeroes (about 2:1 for a compressing swap device such as zram).

use clap::Parser;
use std::process::ExitCode;
use trapeze_guest_tools::blkbench::PAGE;
use trapeze_guest_tools::memhog;

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Use this many MiB (default: --ratio × MemAvailable).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    mib: Option<u64>,
    /// Use this multiple of /proc/meminfo's MemAvailable (without --mib).
    #[arg(long, default_value_t = 1.5, value_parser = ratio)]
    ratio: f64,
    /// Seed of the pattern and of the random order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pages compress about 2:1 (the pattern in each page's first half, zeroes in the
    /// second) instead of not at all.
    #[arg(long)]
    compressible: bool,
}

fn ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.01..=16.0).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is out of range (0.01..=16)")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let bytes = match a.mib {
        Some(m) => m << 20,
        None => {
            let avail = std::fs::read_to_string("/proc/meminfo")
                .map_err(|e| format!("reading /proc/meminfo: {e}"))
                .and_then(|m| memhog::mem_available(&m));
            match avail {
                Ok(b) => {
                    let want = (b as f64 * a.ratio) as u64;
                    println!(
                        "trapeze-memhog: MemAvailable {} MiB, using {:.2}x = {} MiB",
                        b >> 20,
                        a.ratio,
                        want >> 20
                    );
                    want
                }
                Err(e) => {
                    eprintln!("trapeze-memhog: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let pages = bytes / PAGE as u64;
    let pattern = if a.compressible { memhog::Pattern::Compressible } else { memhog::Pattern::Incompressible };
    println!("trapeze-memhog: {pages} pages ({} MiB), seed {}, {}", bytes >> 20, a.seed, pattern.name());
    let r = memhog::run(pages, a.seed, pattern, |p| {
        println!(
            "trapeze-memhog: {} {} pages in {:.1} s{}",
            p.name,
            p.pages,
            p.secs,
            if p.verified > 0 { format!(", {} verified, {} wrong", p.verified, p.wrong) } else { String::new() }
        );
    });
    match r {
        Ok(r) => {
            println!("{}", r.json());
            if let Some((phase, page, at)) = r.first_wrong {
                eprintln!("trapeze-memhog: {} pages wrong; first: page {page} byte {at} in {phase}", r.wrong());
                return ExitCode::FAILURE;
            }
            println!("trapeze-memhog: {} pages verified, 0 wrong", r.verified());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("trapeze-memhog: {e}");
            ExitCode::FAILURE
        }
    }
}
