// SPDX-License-Identifier: GPL-2.0-only
//! A modelled disk (`gmblockd --model-mbps --model-latency-us`), so that several servers
//! on one machine behave like several disks: each serves its requests one at a time, and
//! a request of `b` bytes occupies the disk for `latency + b / throughput`. The server
//! does the real I/O, then holds the reply until the modelled disk would have finished
//! (never earlier than the real one did).
//!
//! A request the server takes up before it next finds nothing to do ([`DiskModel::went_idle`])
//! was queued behind the previous one: the disk starts it when it finished that one, not
//! when the server woke up to take it — the server's lateness in waking (a loaded machine)
//! is not charged to the disk, so a busy disk runs at its modelled rate. A request that
//! arrives at an idle server starts when it is taken up.

use std::time::{Duration, Instant};
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
    /// Whether the server found nothing to do since the last request.
    idle_seen: bool,
    /// Time replies were held for the model, in all.
    pub held: Duration,
    /// Requests that found the disk idle (not queued behind another).
    pub started_idle: u64,
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
            idle_seen: true,
            held: Duration::ZERO,
            started_idle: 0,
        })
    }

    /// The server found nothing to do: the next request was not queued.
    pub fn went_idle(&mut self) {
        self.idle_seen = true;
    }

    /// A request of `bytes` the server took up at `arrived`: when the modelled disk is
    /// done with it.
    pub fn charge(&mut self, arrived: Instant, bytes: u64) -> Instant {
        let start = match self.idle_at {
            Some(idle) if !self.idle_seen => idle.min(arrived),
            Some(idle) => idle.max(arrived),
            None => arrived,
        };
        self.started_idle += u64::from(self.idle_seen);
        self.idle_seen = false;
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
        // Queued behind it, taken up on time or late: back to back.
        let two = d.charge(one, 32768);
        assert_eq!(two - one, Duration::from_nanos(527_680));
        let three = d.charge(two + Duration::from_millis(3), 32768);
        assert_eq!(three - two, Duration::from_nanos(527_680));
        // The server went idle in between: it starts when taken up.
        d.went_idle();
        let later = three + Duration::from_millis(1);
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
