// SPDX-License-Identifier: GPL-2.0-only
//! The memory-pressure workload behind `trapeze-memhog`: anonymous pages filled with a
//! pattern derived from each page's index, then every page re-read and checked in
//! sequential and random order, rewritten and checked again.
//!
//! Page `p` of generation `g` holds [`crate::blkbench::fill_page`]`(g, p)`, so a page read
//! back is checked without keeping a copy. Sized larger than the guest's free RAM, the
//! pages must go to swap and come back; a page that comes back wrong is counted, never
//! fatal in the middle of a pass, so the report says how many were wrong.

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

/// One phase's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    pub pages: u64,
    /// Pages checked (0 for a write phase).
    pub verified: u64,
    pub wrong: u64,
    pub secs: f64,
}

/// A run's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub pages: u64,
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
            "{{\"tool\":\"trapeze-memhog\",\"pages\":{},\"mib\":{},\"pages_verified\":{},\"pages_wrong\":{},\"secs\":{:.2},\"phases\":[",
            self.pages,
            (self.pages * PAGE as u64) >> 20,
            self.verified(),
            self.wrong(),
            self.secs
        );
        for (i, p) in self.phases.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"name\":\"{}\",\"pages\":{},\"verified\":{},\"wrong\":{},\"secs\":{:.2}}}",
                if i == 0 { "" } else { "," },
                p.name,
                p.pages,
                p.verified,
                p.wrong,
                p.secs
            );
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

/// Allocate `pages` pages and run every phase over them; `progress` gets each phase's
/// outcome as it ends.
pub fn run(pages: u64, seed: u64, mut progress: impl FnMut(&Phase)) -> Result<Report, String> {
    if pages == 0 {
        return Err("no pages to use".into());
    }
    let bytes = usize::try_from(pages).ok().and_then(|p| p.checked_mul(PAGE)).ok_or("too many pages")?;
    let start = Instant::now();
    let mut mem = AlignedBuf::new(bytes);
    let order = permutation(pages, seed);
    let mut report = Report { pages, phases: Vec::new(), first_wrong: None, secs: 0.0 };
    for (name, write, random, generation) in PHASES {
        let t = Instant::now();
        let mut phase = Phase { name, pages, verified: 0, wrong: 0, secs: 0.0 };
        let buf = mem.as_mut_slice();
        for i in 0..pages {
            let p = if random { order[i as usize] } else { i };
            let page = &mut buf[p as usize * PAGE..(p as usize + 1) * PAGE];
            let g = seed.wrapping_add(generation);
            if write {
                fill_page(g, p, page);
            } else {
                phase.verified += 1;
                if let Some(at) = check_page(g, p, page) {
                    phase.wrong += 1;
                    report.first_wrong.get_or_insert((name, p, at));
                }
            }
        }
        phase.secs = t.elapsed().as_secs_f64();
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
        let r = run(64, 7, |p| seen.push(p.name)).unwrap();
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
    fn zero_pages_is_an_error() {
        assert!(run(0, 1, |_| {}).is_err());
    }
}
