// SPDX-License-Identifier: GPL-2.0-only
//! The kernel's CPU time from `/proc/stat`: what a phase of a benchmark cost the machine's
//! kernel (system, hard and soft interrupt time of every CPU), apart from the tool's own
//! user-space work, such as checking the pages it read.
//!
//! `/proc/stat` counts in `USER_HZ` ticks, which is 100 on every Linux ABI the guests
//! run; the figure is the kernel's sampled accounting, so a phase should last at least
//! some tenths of a second.

use std::time::Duration;

/// `USER_HZ`: ticks per second in `/proc/stat`.
const USER_HZ: u64 = 100;

/// Kernel time so far (system + irq + softirq over all CPUs), or `None` where there is no
/// readable `/proc/stat`.
pub fn kernel_time() -> Option<Duration> {
    parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The kernel time in a `/proc/stat` text: its first (`cpu`) line's fields 3, 6 and 7
/// (`user nice system idle iowait irq softirq …`).
fn parse(stat: &str) -> Option<Duration> {
    let line = stat.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(7).map(str::parse).collect::<Result<_, _>>().ok()?;
    let ticks = v.get(2)? + v.get(5)? + v.get(6)?;
    Some(Duration::from_micros(ticks * 1_000_000 / USER_HZ))
}

/// Microseconds of kernel time per page between `before` and `after`, over `pages`
/// pages (`None` if either reading is missing or there were no pages).
pub fn us_per_page(before: Option<Duration>, after: Option<Duration>, pages: u64) -> Option<f64> {
    let d = after?.checked_sub(before?)?;
    (pages > 0).then(|| d.as_secs_f64() * 1e6 / pages as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_irq_and_softirq_ticks_count() {
        let stat = "cpu  10 1 200 5000 3 40 60 0 0 0\ncpu0 10 1 200 5000 3 40 60 0 0 0\n";
        assert_eq!(parse(stat), Some(Duration::from_millis(3000)));
        assert_eq!(parse("intr 1 2\n"), None);
        assert_eq!(parse("cpu 1 2\n"), None);
    }

    #[test]
    fn per_page_needs_both_readings_and_pages() {
        let (a, b) = (Some(Duration::from_millis(100)), Some(Duration::from_millis(300)));
        assert_eq!(us_per_page(a, b, 1000), Some(200.0));
        assert_eq!(us_per_page(None, b, 1000), None);
        assert_eq!(us_per_page(a, b, 0), None);
        assert!(kernel_time().is_some(), "this test runs on Linux");
    }
}
