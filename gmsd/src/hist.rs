// SPDX-License-Identifier: GPL-2.0-only
//! A fixed-size latency histogram: log-spaced buckets (4 per power of two, 1 µs to
//! ~67 s), constant memory however many samples arrive, percentiles to within a bucket.

use crate::proto::HistReport;

/// Sub-buckets per power of two.
const SUB: u32 = 4;
/// Powers of two covered above 1 µs (2^26 µs ≈ 67 s; slower samples share the last).
const OCTAVES: u32 = 26;
const BUCKETS: usize = (SUB * OCTAVES) as usize + 1;

/// Latencies in nanoseconds, bucketed.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BUCKETS], total: 0, max_ns: 0 }
    }
}

/// Upper bound of bucket `i` in µs: bucket 0 is ≤ 1 µs, then 2^(k + s/SUB) steps.
fn upper_us(i: usize) -> f64 {
    2f64.powf(i as f64 / SUB as f64)
}

fn bucket_of(ns: u64) -> usize {
    let us = ns as f64 / 1000.0;
    if us <= 1.0 {
        return 0;
    }
    let i = (us.log2() * SUB as f64).ceil() as usize;
    i.min(BUCKETS - 1)
}

impl Histogram {
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket_of(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The upper bound (µs) of the bucket holding quantile `q` (0..=1); 0 when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((self.total as f64 * q).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper_us(i).min(self.max_ns as f64 / 1000.0).max(if i == 0 { 0.0 } else { upper_us(i - 1) });
            }
        }
        self.max_ns as f64 / 1000.0
    }

    pub fn report(&self) -> HistReport {
        HistReport {
            count: self.total,
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            max_us: self.max_ns as f64 / 1000.0,
            buckets: self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (upper_us(i), c)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_fall_in_the_right_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), 0.0);
        for _ in 0..98 {
            h.record(10_000); // 10 µs
        }
        h.record(1_000_000); // 1 ms
        h.record(5_000_000); // 5 ms
        let r = h.report();
        assert_eq!(r.count, 100);
        // Bucket bounds are 2^(1/4) apart: within 19% of the sample.
        assert!((8.4..=11.9).contains(&r.p50_us), "{r:?}");
        assert!((840.0..=1190.0).contains(&r.p99_us), "{r:?}");
        assert_eq!(r.max_us, 5000.0);
        assert_eq!(r.buckets.iter().map(|b| b.1).sum::<u64>(), 100);
        assert_eq!(r.buckets.len(), 3);
    }

    #[test]
    fn extremes_do_not_overflow() {
        let mut h = Histogram::default();
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.count(), 2);
        assert_eq!(h.report().buckets.len(), 2);
    }
}
