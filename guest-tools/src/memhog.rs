// SPDX-License-Identifier: GPL-2.0-only
//! The memory-pressure workload behind `trapeze-memhog`: anonymous pages filled with a
//! pattern derived from each page's index, then every page re-read and checked in
//! sequential and random order, rewritten and checked again.
//!
//! Page `p` of generation `g` holds [`crate::blkbench::fill_page`]`(g, p)`, so a page read
//! back is checked without keeping a copy. Sized larger than the guest's free RAM, the
//! pages must go to swap and come back; a page that comes back wrong is counted, never
//! fatal in the middle of a pass, so the report says how many were wrong.
//!
//! [`Pattern::Compressible`] keeps the pattern in each page's first half and zeroes in the
//! second: about 2:1 for a compressing swap device (zram), the same work for any other.

use crate::blkbench::{check_page, fill_page, AlignedBuf, SplitMix, PAGE};
use std::fmt::Write as _;
use std::time::Instant;

/// The phases of a run, in order: (name, write?, random order?, generation).
const PHASES: [(&str, bool, bool, u64); 5] = [
    ("write", true, false, 1),
    ("verify-seq", false, false, 1),
    ("verify-random", false, true, 1),
    ("rewrite-random", true, true, 2),
    ("verify-seq-2", false, false, 2),
];

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// [`fill_page`] over the whole page: a compressor finds nothing to take out.
    Incompressible,
    /// [`fill_page`]'s first half, then zeroes: about 2:1.
    Compressible,
}

impl Pattern {
    /// The name in the report's JSON.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Incompressible => "incompressible",
            Pattern::Compressible => "compressible",
        }
    }

    /// Fill `page` (one page) with page `p`'s content of generation `g`.
    fn fill(self, g: u64, p: u64, page: &mut [u8]) {
        fill_page(g, p, page);
        if self == Pattern::Compressible {
            page[PAGE / 2..].fill(0);
        }
    }

    /// The first byte of `page` that differs from what [`Pattern::fill`] wrote, if any.
    fn check(self, g: u64, p: u64, page: &[u8]) -> Option<usize> {
        match self {
            Pattern::Incompressible => check_page(g, p, page),
            Pattern::Compressible => {
                let mut want = [0u8; PAGE];
                self.fill(g, p, &mut want);
                page.iter().zip(want).position(|(a, b)| *a != b)
            }
        }
    }
}

/// One phase's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    pub pages: u64,
    /// Pages checked (0 for a write phase).
    pub verified: u64,
    pub wrong: u64,
    pub secs: f64,
    /// What the guest's swap devices did during the phase (`None` without `/proc/swaps`).
    pub swapped: Option<SwapIo>,
}

/// A run's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub pages: u64,
    pub pattern: Pattern,
    pub phases: Vec<Phase>,
    /// The first wrong page: (phase, page, first differing byte).
    pub first_wrong: Option<(&'static str, u64, usize)>,
    /// Wall time of the whole run (allocation and every phase).
    pub secs: f64,
}

impl Report {
    pub fn verified(&self) -> u64 {
        self.phases.iter().map(|p| p.verified).sum()
    }
    pub fn wrong(&self) -> u64 {
        self.phases.iter().map(|p| p.wrong).sum()
    }
    /// One JSON object on one line (keys in a fixed order).
    pub fn json(&self) -> String {
        let mut s = format!(
            "{{\"tool\":\"trapeze-memhog\",\"pages\":{},\"mib\":{},\"pages_verified\":{},\"pages_wrong\":{},\"pattern\":\"{}\",\"secs\":{:.3},\"phases\":[",
            self.pages,
            (self.pages * PAGE as u64) >> 20,
            self.verified(),
            self.wrong(),
            self.pattern.name(),
            self.secs
        );
        for (i, p) in self.phases.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"name\":\"{}\",\"pages\":{},\"verified\":{},\"wrong\":{},\"secs\":{:.2}",
                if i == 0 { "" } else { "," },
                p.name,
                p.pages,
                p.verified,
                p.wrong,
                p.secs
            );
            if let Some(io) = p.swapped {
                let _ = write!(
                    s,
                    ",\"swap_in_pages\":{},\"swap_out_pages\":{},\"swap_reads\":{},\"swap_writes\":{}",
                    io.pages_in, io.pages_out, io.reads, io.writes
                );
            }
            s.push('}');
        }
        s.push_str("]}");
        s
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn mem_available(meminfo: &str) -> Result<u64, String> {
    let line =
        meminfo.lines().find(|l| l.starts_with("MemAvailable:")).ok_or("/proc/meminfo has no MemAvailable line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("unreadable /proc/meminfo line {line:?}"))?;
    Ok(kib * 1024)
}

/// Pages read and written, and read and write requests, of swap devices (summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapIo {
    pub pages_in: u64,
    pub pages_out: u64,
    pub reads: u64,
    pub writes: u64,
}

impl SwapIo {
    /// Add a block device's `/sys/block/*/stat` line (reads, read sectors, writes and
    /// written sectors are its fields 1, 3, 5 and 7).
    fn add_stat(&mut self, stat: &str) -> Option<()> {
        let f: Vec<u64> = stat.split_whitespace().take(7).map(|v| v.parse().ok()).collect::<Option<_>>()?;
        let &[reads, _, sectors_in, _, writes, _, sectors_out] = f.as_slice() else { return None };
        let page_sectors = PAGE as u64 / 512;
        self.reads += reads;
        self.pages_in += sectors_in / page_sectors;
        self.writes += writes;
        self.pages_out += sectors_out / page_sectors;
        Some(())
    }

    /// What happened between `self` (earlier) and `later`.
    fn until(self, later: SwapIo) -> SwapIo {
        SwapIo {
            pages_in: later.pages_in.saturating_sub(self.pages_in),
            pages_out: later.pages_out.saturating_sub(self.pages_out),
            reads: later.reads.saturating_sub(self.reads),
            writes: later.writes.saturating_sub(self.writes),
        }
    }
}

/// The whole-disk swap devices of a `/proc/swaps` text (`/dev/NAME` → `NAME`).
pub fn swap_devices(swaps: &str) -> Vec<&str> {
    swaps.lines().skip(1).filter_map(|l| l.split_whitespace().next()?.strip_prefix("/dev/")).collect()
}

/// The swap devices' counts now (`None` without `/proc/swaps` or a device's statistics).
fn swap_io_now() -> Option<SwapIo> {
    let swaps = std::fs::read_to_string("/proc/swaps").ok()?;
    let mut io = SwapIo::default();
    for dev in swap_devices(&swaps) {
        io.add_stat(&std::fs::read_to_string(format!("/sys/block/{dev}/stat")).ok()?)?;
    }
    Some(io)
}

/// A random permutation of `0..n` (Fisher–Yates).
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = SplitMix::new(seed);
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

/// Allocate `pages` pages of `pattern` and run every phase over them; `progress` gets each
/// phase's outcome as it ends.
pub fn run(pages: u64, seed: u64, pattern: Pattern, mut progress: impl FnMut(&Phase)) -> Result<Report, String> {
    if pages == 0 {
        return Err("no pages to use".into());
    }
    let bytes = usize::try_from(pages).ok().and_then(|p| p.checked_mul(PAGE)).ok_or("too many pages")?;
    let start = Instant::now();
    let mut mem = AlignedBuf::new(bytes);
    let order = permutation(pages, seed);
    let mut report = Report { pages, pattern, phases: Vec::new(), first_wrong: None, secs: 0.0 };
    for (name, write, random, generation) in PHASES {
        // The counters are read outside the phase's timed span.
        let swap0 = swap_io_now();
        let t = Instant::now();
        let mut phase = Phase { name, pages, verified: 0, wrong: 0, secs: 0.0, swapped: None };
        let buf = mem.as_mut_slice();
        for i in 0..pages {
            let p = if random { order[i as usize] } else { i };
            let page = &mut buf[p as usize * PAGE..(p as usize + 1) * PAGE];
            let g = seed.wrapping_add(generation);
            if write {
                pattern.fill(g, p, page);
            } else {
                phase.verified += 1;
                if let Some(at) = pattern.check(g, p, page) {
                    phase.wrong += 1;
                    report.first_wrong.get_or_insert((name, p, at));
                }
            }
        }
        phase.secs = t.elapsed().as_secs_f64();
        phase.swapped = swap0.zip(swap_io_now()).map(|(a, b)| a.until(b));
        progress(&phase);
        report.phases.push(phase);
    }
    report.secs = start.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_is_written_and_checked_in_every_phase() {
        let mut seen = Vec::new();
        let r = run(64, 7, Pattern::Incompressible, |p| seen.push(p.name)).unwrap();
        assert_eq!(seen, ["write", "verify-seq", "verify-random", "rewrite-random", "verify-seq-2"]);
        assert_eq!(r.verified(), 3 * 64);
        assert_eq!(r.wrong(), 0);
        assert!(r.first_wrong.is_none());
        assert!(r.json().starts_with("{\"tool\":\"trapeze-memhog\",\"pages\":64,"));
        assert!(!r.json().contains('\n'));
        assert!(r.secs >= r.phases.iter().map(|p| p.secs).sum::<f64>());
        assert!(r.json().contains(",\"secs\":"), "{}", r.json());
    }

    #[test]
    fn the_compressible_pattern_is_half_zeroes_and_checked_whole() {
        let r = run(16, 3, Pattern::Compressible, |_| {}).unwrap();
        assert_eq!((r.verified(), r.wrong()), (3 * 16, 0));
        assert!(r.json().contains("\"pattern\":\"compressible\""), "{}", r.json());
        let mut page = vec![0u8; PAGE];
        Pattern::Compressible.fill(5, 9, &mut page);
        assert!(page[PAGE / 2..].iter().all(|&b| b == 0));
        assert!(page[..PAGE / 2].iter().filter(|&&b| b == 0).count() < PAGE / 16);
        assert_eq!(Pattern::Compressible.check(5, 9, &page), None);
        // The zero half is checked too, and the pattern's half against the right page.
        page[PAGE - 1] = 1;
        assert_eq!(Pattern::Compressible.check(5, 9, &page), Some(PAGE - 1));
        assert!(Pattern::Compressible.check(5, 8, &page).is_some_and(|at| at < PAGE / 2));
        assert!(Pattern::Incompressible.check(5, 9, &page).is_some_and(|at| at >= PAGE / 2));
    }

    #[test]
    fn the_random_order_visits_each_page_once() {
        let mut p = permutation(1000, 3);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn mem_available_reads_kib() {
        let m = "MemTotal:   100 kB\nMemFree: 50 kB\nMemAvailable:   60 kB\n";
        assert_eq!(mem_available(m), Ok(60 * 1024));
        assert!(mem_available("MemTotal: 1 kB\n").is_err());
        assert!(mem_available("MemAvailable: x kB\n").is_err());
    }

    #[test]
    fn swap_io_reads_proc_swaps_and_block_stats() {
        let swaps = "Filename\tType\tSize\tUsed\tPriority\n/dev/gms0 partition 49148 0 -2\n/swapfile file 8 0 -3\n";
        assert_eq!(swap_devices(swaps), ["gms0"]);
        let mut io = SwapIo::default();
        io.add_stat("  100 5 1600 30 7 0 112 9 0 40 50").unwrap();
        assert_eq!(io, SwapIo { pages_in: 200, pages_out: 14, reads: 100, writes: 7 });
        assert!(io.add_stat("1 2 3").is_none());
        let later = SwapIo { pages_in: 260, pages_out: 14, reads: 130, writes: 8 };
        assert_eq!(io.until(later), SwapIo { pages_in: 60, pages_out: 0, reads: 30, writes: 1 });
    }

    #[test]
    fn zero_pages_is_an_error() {
        assert!(run(0, 1, Pattern::Compressible, |_| {}).is_err());
    }
}
