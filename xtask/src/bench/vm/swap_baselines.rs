// SPDX-License-Identifier: GPL-2.0-only
//! The swap workload's baselines in `cargo xtask bench vm` (issue 33): beside `/dev/gms0`,
//! the fair disk and NBD, guest 0 runs the same `trapeze-memhog` workload
//!
//! - **zram**: swap on `/dev/zram0` (lzo-rle, the kernel's default), the same memory cgroup
//!   limit: what a user of one machine would pick. Its compressed pages live in guest RAM
//!   outside the cgroup's limit, as they do for any zram user.
//! - **gms_compressible**, **zram_compressible**: the same two devices with
//!   `trapeze-memhog --compressible` (each page's second half zeroes: about 2:1), so the
//!   ratio against zram is also taken where zram's compression pays.
//! - **ram**: no swap device and no `memory.max`: the workload all in RAM, the floor.
//! - **gms_half**: `/dev/gms0` with `memory.max` half the workload (50 % local memory).
//!
//! Every run is in every swap round, the order reversed every other round (A-B-B-A), and
//! ratios are taken per round: `gms_over_zram` (`swap_time`, `swap_time_compressible`),
//! `gms_over_ram.swap_time` and `swap_half_over_ram` (target ≤ 2), each {median, p10,
//! p90}. A missing run, or a zram run whose pattern did not compress as its name says,
//! fails the bench.

use super::fair::spread;
use super::workloads::Workloads;
use serde_json::{json, Value};

/// The baseline runs, in the guest script's order (after gms, fair and nbd).
pub(super) const RUNS: [&str; 5] = ["zram", "gms_compressible", "zram_compressible", "ram", "gms_half"];

/// The data/compressed ratio zram's incompressible run may reach at most, and the one its
/// compressible run must reach at least (lzo-rle gives about 1.0 and 2.0).
const MAX_INCOMPRESSIBLE: f64 = 1.25;
const MIN_COMPRESSIBLE: f64 = 1.6;

/// zram's data/compressed ratio at its fullest in `name`'s runs (the smallest of them).
fn zram_ratio(w: &Workloads, name: &str) -> Option<f64> {
    w.swaps
        .iter()
        .filter(|s| s.device == name)
        .filter_map(|s| s.zram_kib.filter(|&(_, c)| c > 0).map(|(d, c)| d as f64 / c as f64))
        .min_by(f64::total_cmp)
}

/// Why the baselines are incomplete or do not measure what they say, if they are.
pub(super) fn missing(w: &Workloads) -> Vec<String> {
    let mut why = Vec::new();
    for name in RUNS {
        let runs: Vec<_> = w.swaps.iter().filter(|s| s.device == name).collect();
        if runs.is_empty() {
            why.push(format!("{name}: no swap result"));
        }
        let want = if name.ends_with("_compressible") { "compressible" } else { "incompressible" };
        if let Some(s) = runs.iter().find(|s| s.pattern != want) {
            why.push(format!("{name}: trapeze-memhog ran with the {} pattern, not {want}", s.pattern));
        }
    }
    for (name, ok, what) in [
        ("zram", zram_ratio(w, "zram").map(|r| r <= MAX_INCOMPRESSIBLE), format!("at most {MAX_INCOMPRESSIBLE}:1")),
        (
            "zram_compressible",
            zram_ratio(w, "zram_compressible").map(|r| r >= MIN_COMPRESSIBLE),
            format!("at least {MIN_COMPRESSIBLE}:1"),
        ),
    ] {
        match ok {
            None if w.swaps.iter().any(|s| s.device == name) => {
                why.push(format!("{name}: no zram data/compressed sizes sampled while it ran"))
            }
            Some(false) => why.push(format!(
                "{name}: zram held its pages at {:.2}:1, not {what}",
                zram_ratio(w, name).unwrap_or(f64::NAN)
            )),
            _ => {}
        }
    }
    why
}

/// `a`'s swap time over `b`'s, round by round (the k-th run of each), as {median, p10,
/// p90}; `None` without a pair.
fn per_round(w: &Workloads, a: &str, b: &str) -> Option<Value> {
    let secs = |d: &str| w.swaps.iter().filter(|s| s.device == d).map(|s| s.secs).collect::<Vec<_>>();
    let v: Vec<f64> = secs(a).iter().zip(secs(b)).map(|(x, y)| x / y).collect();
    (!v.is_empty()).then(|| spread(&v, 3))
}

/// The summary's keys: `gms_over_zram`, `gms_over_ram_swap` (merged into `gms_over_ram` as
/// `swap_time`), `swap_half_over_ram`, `zram_over_ram` (what swapping costs with no I/O at
/// all: the bound under `swap_half_over_ram`) and `zram_compression` (data/compressed at
/// its fullest, per pattern).
pub(super) fn ratios(w: &Workloads) -> Value {
    json!({
        "gms_over_zram": {
            "swap_time": per_round(w, "gms", "zram"),
            "swap_time_compressible": per_round(w, "gms_compressible", "zram_compressible"),
        },
        "gms_over_ram_swap": per_round(w, "gms", "ram"),
        "swap_half_over_ram": per_round(w, "gms_half", "ram"),
        "zram_over_ram": per_round(w, "zram", "ram"),
        "zram_compression": {
            "incompressible": zram_ratio(w, "zram").map(|r| super::report::round_to(r, 2)),
            "compressible": zram_ratio(w, "zram_compressible").map(|r| super::report::round_to(r, 2)),
        },
    })
}

/// The table's lines: each run (gms's first), then the ratios.
pub(super) fn print(w: &Workloads, r: &Value) {
    println!("swap baselines (the same trapeze-memhog workload; every run in every swap round, A-B-B-A):");
    println!(
        "{:<18} {:>11} {:>15} {:>10} {:>16} {:>12}",
        "run", "memory.max", "pattern", "time", "swapped out/in", "zram"
    );
    for name in ["gms"].into_iter().chain(RUNS) {
        let Some(s) = w.swap(name) else { continue };
        println!(
            "{:<18} {:>11} {:>15} {:>10} {:>16} {:>12}",
            name,
            s.avail_mb.map_or("none".into(), |m| format!("{m} MiB")),
            s.pattern,
            format!("{:.2} s", s.secs),
            format!("{:.1}/{:.1} MiB", s.swap_out_kib as f64 / 1024.0, s.swap_in_kib as f64 / 1024.0),
            zram_ratio(w, name).map_or("-".into(), |x| format!("{x:.2}:1")),
        );
    }
    let f = |v: &Value| v["median"].as_f64().map_or("-".into(), |m| format!("{m}x [{}-{}]", v["p10"], v["p90"]));
    println!(
        "gms / zram: swap_time {} (incompressible), swap_time_compressible {}; gms / all in RAM: swap_time {}; \
         gms at 50 % local memory / all in RAM: swap_half_over_ram {} (target <= 2); zram / all in RAM {}",
        f(&r["gms_over_zram"]["swap_time"]),
        f(&r["gms_over_zram"]["swap_time_compressible"]),
        f(&r["gms_over_ram_swap"]),
        f(&r["swap_half_over_ram"]),
        f(&r["zram_over_ram"])
    );
}

#[cfg(test)]
mod tests {
    use super::super::workloads::SwapRun;
    use super::*;

    fn run(name: &str, secs: f64, pattern: &str, zram: Option<(u64, u64)>) -> SwapRun {
        SwapRun {
            device: name.into(),
            secs,
            mib: 24,
            avail_mb: (name != "ram").then_some(16),
            pattern: pattern.into(),
            zram_kib: zram,
            pages_verified: 1,
            peak_swap_kib: 1,
            swap_in_kib: 1,
            swap_out_kib: 1,
            phases: Vec::new(),
        }
    }

    fn all(round: f64) -> Vec<SwapRun> {
        vec![
            run("gms", 8.0 * round, "incompressible", None),
            run("zram", 4.0, "incompressible", Some((8192, 8200))),
            run("gms_compressible", 8.0, "compressible", None),
            run("zram_compressible", 2.0, "compressible", Some((8192, 4200))),
            run("ram", 2.0, "incompressible", None),
            run("gms_half", 3.0 * round, "incompressible", None),
        ]
    }

    #[test]
    fn ratios_are_per_round() {
        let w = Workloads { swaps: [all(1.0), all(2.0)].concat(), ..Workloads::default() };
        assert!(missing(&w).is_empty(), "{:?}", missing(&w));
        let r = ratios(&w);
        assert_eq!(r["gms_over_zram"]["swap_time"]["per_round"], json!([2.0, 4.0]));
        assert_eq!(r["gms_over_zram"]["swap_time_compressible"]["median"].as_f64(), Some(4.0));
        assert_eq!(r["gms_over_ram_swap"]["median"].as_f64(), Some(6.0));
        assert_eq!(r["swap_half_over_ram"]["per_round"], json!([1.5, 3.0]));
        assert_eq!(r["zram_over_ram"]["median"].as_f64(), Some(2.0));
        assert_eq!(r["zram_compression"]["compressible"].as_f64(), Some(1.95));
    }

    #[test]
    fn a_missing_run_or_a_pattern_that_did_not_compress_as_named_fails() {
        let mut swaps = all(1.0);
        swaps.retain(|s| s.device != "gms_half");
        swaps[1].zram_kib = Some((8192, 4096));
        swaps[3].zram_kib = None;
        swaps[2].pattern = "incompressible".into();
        let w = Workloads { swaps, ..Workloads::default() };
        assert_eq!(
            missing(&w),
            [
                "gms_compressible: trapeze-memhog ran with the incompressible pattern, not compressible",
                "gms_half: no swap result",
                "zram: zram held its pages at 2.00:1, not at most 1.25:1",
                "zram_compressible: no zram data/compressed sizes sampled while it ran",
            ]
        );
        assert!(ratios(&w)["swap_half_over_ram"].is_null());
    }
}
