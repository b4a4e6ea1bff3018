// SPDX-License-Identifier: GPL-2.0-only
//! A modelled disk (`gmblockd --model-mbps --model-latency-us`), so that several servers
//! on one machine behave like several disks: each serves its requests one at a time, and
//! a request of `b` bytes occupies the disk for `latency + b / throughput`. The server
//! does the real I/O, then holds the reply until the modelled disk would have finished
//! (never earlier than the real one did).
//!
//! A request the server takes up within [`QUEUED_WITHIN`] of the disk going idle counts
//! as queued behind the previous one: the server's own lateness in waking up is not
//! charged to the disk, so a busy disk runs at its modelled rate.

use std::time::{Duration, Instant};

/// How soon after the disk went idle a request still counts as queued behind it.
pub const QUEUED_WITHIN: Duration = Duration::from_micros(500);
/// The fastest throughput accepted: 100 GB/s.
pub const MAX_MBPS: f64 = 100_000.0;
/// The longest latency accepted: 10 s.
pub const MAX_LATENCY_US: u64 = 10_000_000;

/// A disk's modelled throughput and latency, and when it is next idle.
#[derive(Clone, Debug)]
pub struct DiskModel {
    bytes_per_s: f64,
    latency: Duration,
    idle_at: Option<Instant>,
    /// Time replies were held for the model, in all.
    pub held: Duration,
}

impl DiskModel {
    /// A disk of `mbps` MB/s (10^6 bytes; `None`: no limit) and `latency_us` µs per request.
    pub fn new(mbps: Option<f64>, latency_us: u64) -> Result<DiskModel, String> {
        if let Some(m) = mbps {
            if !(m.is_finite() && m > 0.0 && m <= MAX_MBPS) {
                return Err(format!("--model-mbps {m}: must be a number above 0 and at most {MAX_MBPS}"));
            }
        }
        if latency_us > MAX_LATENCY_US {
            return Err(format!("--model-latency-us {latency_us}: at most {MAX_LATENCY_US} (10 s)"));
        }
        Ok(DiskModel {
            bytes_per_s: mbps.map_or(f64::INFINITY, |m| m * 1e6),
            latency: Duration::from_micros(latency_us),
            idle_at: None,
            held: Duration::ZERO,
        })
    }

    /// A request of `bytes` the server took up at `arrived`: when the modelled disk is
    /// done with it.
    pub fn charge(&mut self, arrived: Instant, bytes: u64) -> Instant {
        let start = match self.idle_at {
            Some(idle) if arrived <= idle + QUEUED_WITHIN => idle,
            _ => arrived,
        };
        let transfer = Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
        let done = start + self.latency + transfer;
        self.idle_at = Some(done);
        done
    }

    /// Charge a request and sleep until the modelled disk is done with it.
    pub fn serve(&mut self, arrived: Instant, bytes: u64) {
        let done = self.charge(arrived, bytes);
        let now = Instant::now();
        if done > now {
            self.held += done - now;
            std::thread::sleep(done - now);
        }
    }
}

/// `--model-mbps`: a positive number of MB/s.
pub fn parse_mbps(s: &str) -> Result<f64, String> {
    let m: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of MB/s"))?;
    DiskModel::new(Some(m), 0).map(|_| m)
}

/// `--model-latency-us`: microseconds, at most [`MAX_LATENCY_US`].
pub fn parse_latency_us(s: &str) -> Result<u64, String> {
    let us: u64 = s.parse().map_err(|_| format!("{s:?} is not a whole number of microseconds"))?;
    DiskModel::new(None, us).map(|_| us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_disk_runs_at_its_rate_and_an_idle_one_starts_at_once() {
        let mut d = DiskModel::new(Some(100.0), 200).unwrap();
        let t0 = Instant::now();
        // 32 KiB at 100 MB/s is 327.68 µs, plus 200 µs.
        let one = d.charge(t0, 32768);
        assert_eq!(one - t0, Duration::from_nanos(527_680));
        // Queued behind it (arrived before, or taken up a little late): back to back.
        let two = d.charge(t0 + Duration::from_micros(10), 32768);
        assert_eq!(two - one, Duration::from_nanos(527_680));
        let three = d.charge(two + Duration::from_micros(300), 32768);
        assert_eq!(three - two, Duration::from_nanos(527_680));
        // Idle for long: starts when taken up.
        let later = three + Duration::from_secs(1);
        assert_eq!(d.charge(later, 0) - later, Duration::from_micros(200));
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for bad in ["0", "-5", "nan", "inf", "1e9", "fast"] {
            let e = parse_mbps(bad).unwrap_err();
            assert!(e.contains("MB/s") || e.contains("--model-mbps"), "{bad}: {e}");
        }
        assert_eq!(parse_mbps("100"), Ok(100.0));
        assert!(parse_latency_us("20000000").unwrap_err().contains("--model-latency-us"));
        assert!(parse_latency_us("-1").unwrap_err().contains("microseconds"));
        assert_eq!(parse_latency_us("200"), Ok(200));
    }
}
