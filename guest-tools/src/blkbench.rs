// SPDX-License-Identifier: GPL-2.0-only
//! The block-device benchmark: pattern, seeded offsets, aligned buffers, the measuring
//! loops and the one-line JSON report.
//!
//! Every 4 KiB page `p` of the device holds the pattern of [`fill_page`]: 512 little-endian
//! words `mix(seed, p, i)`, so any page read back can be checked without keeping a copy.
//! Latencies are wall-clock times of single `pread` calls; verification happens outside
//! the timed calls.

use crate::cputime;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// The page size of the random reads and of the pattern.
pub const PAGE: usize = 4096;

/// `O_DIRECT` as `open(2)` takes it on this architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "riscv64", target_arch = "riscv32"))]
pub const O_DIRECT: i32 = 0o40000;
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub const O_DIRECT: i32 = 0o200000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Name in the report (e.g. `nbd`, `gms`).
    pub name: String,
    /// Bytes of the device to use from offset 0 (whole pages); `None` = all of it.
    pub limit_bytes: Option<u64>,
    /// Random 4 KiB reads to time.
    pub reads: u32,
    /// Seed of the random offsets and of the pattern.
    pub seed: u64,
    /// Sequential read size.
    pub seq_block_bytes: usize,
    /// Write the pattern over the range first (else the device must already hold it,
    /// unless `verify` is off).
    pub write: bool,
    /// Check every page read against the pattern.
    pub verify: bool,
    /// Random 4 KiB writes to time (each page rewritten with its own pattern, so the
    /// device stays checkable), after the pattern write and before the reads.
    pub writes: u32,
}

/// What was measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub name: String,
    pub device: String,
    pub bytes: u64,
    pub write_mb_s: Option<f64>,
    pub writes: u32,
    pub write4k_p50_us: f64,
    pub write4k_p99_us: f64,
    pub reads: u32,
    pub rand4k_p50_us: f64,
    pub rand4k_p99_us: f64,
    pub rand4k_mean_us: f64,
    pub seq_block_kib: usize,
    pub seq_mb_s: f64,
    /// Kernel CPU time per page of the pattern write and of the sequential reads (all
    /// CPUs' system and interrupt time, [`cputime`]; `None` without `/proc/stat`).
    pub write_kernel_us_per_page: Option<f64>,
    pub seq_kernel_us_per_page: Option<f64>,
    pub pages_verified: u64,
}

impl Report {
    /// One JSON object on one line (keys in a fixed order).
    pub fn json(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"tool\":\"trapeze-blkbench\",\"name\":{},\"device\":{},\"bytes\":{},",
            json_str(&self.name),
            json_str(&self.device),
            self.bytes
        );
        match self.write_mb_s {
            Some(w) => {
                let _ = write!(s, "\"write_mb_s\":{w:.1},");
            }
            None => s.push_str("\"write_mb_s\":null,"),
        }
        if self.writes > 0 {
            let _ = write!(
                s,
                "\"write4k_writes\":{},\"write4k_p50_us\":{:.1},\"write4k_p99_us\":{:.1},",
                self.writes, self.write4k_p50_us, self.write4k_p99_us
            );
        }
        let _ = write!(
            s,
            "\"rand4k_reads\":{},\"rand4k_p50_us\":{:.1},\"rand4k_p99_us\":{:.1},\"rand4k_mean_us\":{:.1},\
             \"seq_block_kib\":{},\"seq_mb_s\":{:.1},",
            self.reads, self.rand4k_p50_us, self.rand4k_p99_us, self.rand4k_mean_us, self.seq_block_kib, self.seq_mb_s,
        );
        for (k, v) in [
            ("write_kernel_us_per_page", self.write_kernel_us_per_page),
            ("seq_kernel_us_per_page", self.seq_kernel_us_per_page),
        ] {
            match v {
                Some(v) => {
                    let _ = write!(s, "\"{k}\":{v:.2},");
                }
                None => {
                    let _ = write!(s, "\"{k}\":null,");
                }
            }
        }
        let _ = write!(s, "\"pages_verified\":{}}}", self.pages_verified);
        s
    }
}

/// `v` as a JSON string literal (quotes, backslashes and control characters escaped).
pub(crate) fn json_str(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// splitmix64: the seeded generator of offsets and pattern words.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`; the modulo bias is below 2^-40 for device-sized `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Word `i` of page `page` under `seed`.
fn word(seed: u64, page: u64, i: usize) -> u64 {
    let base = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ page.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    base ^ (i as u64).wrapping_mul(0x1656_67b1_9e37_79f9) ^ page
}

/// Fill one 4 KiB page with its pattern.
pub fn fill_page(seed: u64, page: u64, buf: &mut [u8]) {
    debug_assert_eq!(buf.len(), PAGE);
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(seed, page, i).to_le_bytes());
    }
}

/// The first byte of page `page` that differs from its pattern, if any.
pub fn check_page(seed: u64, page: u64, buf: &[u8]) -> Option<usize> {
    buf.chunks_exact(8).enumerate().find_map(|(i, w)| {
        let want = word(seed, page, i).to_le_bytes();
        (w != want).then(|| i * 8 + w.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0))
    })
}

/// A page-aligned buffer for `O_DIRECT`: an aligned window into an over-allocated vector.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> Self {
        let raw = vec![0u8; len + PAGE];
        let start = raw.as_ptr().align_offset(PAGE);
        assert!(start <= PAGE, "align_offset on a u8 pointer is at most the alignment");
        AlignedBuf { raw, start, len }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// The p-th percentile (0..=100, nearest rank) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn mb_s(bytes: u64, d: Duration) -> f64 {
    if d.is_zero() {
        return 0.0;
    }
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Read exactly `buf.len()` bytes at `off`, timing the `pread` calls.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> Result<Duration, String> {
    let mut done = 0;
    let mut took = Duration::ZERO;
    while done < buf.len() {
        let t = Instant::now();
        let n = f.read_at(&mut buf[done..], off + done as u64);
        took += t.elapsed();
        match n {
            Ok(0) => return Err(format!("read at byte {}: end of device", off + done as u64)),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read of {} bytes at byte {}: {e}", buf.len() - done, off + done as u64)),
        }
    }
    Ok(took)
}

/// Write all of `buf` at `off`; the time the `pwrite` calls took.
fn write_full(f: &File, buf: &[u8], off: u64) -> Result<Duration, String> {
    let mut done = 0;
    let mut took = Duration::ZERO;
    while done < buf.len() {
        let t = Instant::now();
        let n = f.write_at(&buf[done..], off + done as u64);
        took += t.elapsed();
        match n {
            Ok(0) => return Err(format!("write at byte {}: end of device", off + done as u64)),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write of {} bytes at byte {}: {e}", buf.len() - done, off + done as u64)),
        }
    }
    Ok(took)
}

/// Bytes of the device or file (seek to its end: block devices report length 0 in metadata).
pub fn device_bytes(f: &mut File) -> Result<u64, String> {
    f.seek(SeekFrom::End(0)).map_err(|e| format!("finding the size: {e}"))
}

/// Run the benchmark on an open device. `device` only names it in the report.
pub fn run(f: &mut File, device: &str, c: &Config) -> Result<Report, String> {
    if c.seq_block_bytes == 0 || !c.seq_block_bytes.is_multiple_of(PAGE) {
        return Err(format!("sequential block of {} bytes: must be a positive multiple of {PAGE}", c.seq_block_bytes));
    }
    if c.reads == 0 {
        return Err("--reads must be at least 1".into());
    }
    let size = device_bytes(f)?;
    let bytes = c.limit_bytes.map_or(size, |l| l.min(size)) / PAGE as u64 * PAGE as u64;
    if let Some(l) = c.limit_bytes {
        if l > size {
            return Err(format!("{device} has {size} bytes, fewer than the {l} asked for"));
        }
    }
    if bytes < c.seq_block_bytes as u64 {
        return Err(format!("{device}: {bytes} usable bytes, less than one {} KiB block", c.seq_block_bytes / 1024));
    }
    let pages = bytes / PAGE as u64;
    let mut block = AlignedBuf::new(c.seq_block_bytes);
    let pages_per_block = (c.seq_block_bytes / PAGE) as u64;

    // Write the pattern (timed as a whole, then synced).
    let mut write_kernel_us_per_page = None;
    let write_mb_s = if c.write {
        let k0 = cputime::kernel_time();
        let t = Instant::now();
        let mut off = 0u64;
        while off < bytes {
            let len = (bytes - off).min(c.seq_block_bytes as u64) as usize;
            let first = off / PAGE as u64;
            for (k, p) in block.as_mut_slice()[..len].chunks_exact_mut(PAGE).enumerate() {
                fill_page(c.seed, first + k as u64, p);
            }
            write_full(f, &block.as_slice()[..len], off)?;
            off += len as u64;
        }
        f.sync_all().map_err(|e| format!("fsync after writing the pattern: {e}"))?;
        let elapsed = t.elapsed();
        write_kernel_us_per_page = cputime::us_per_page(k0, cputime::kernel_time(), pages);
        Some(mb_s(bytes, elapsed))
    } else {
        None
    };

    // Random 4 KiB writes, each page its own pattern.
    let mut page_buf = AlignedBuf::new(PAGE);
    let mut rng = SplitMix::new(c.seed ^ 0x3717e);
    let mut wlat = Vec::with_capacity(c.writes as usize);
    for _ in 0..c.writes {
        let p = rng.below(pages);
        fill_page(c.seed, p, page_buf.as_mut_slice());
        wlat.push(write_full(f, page_buf.as_slice(), p * PAGE as u64)?);
    }
    wlat.sort_unstable();

    let mut verified = 0u64;
    let mut check = |page: u64, buf: &[u8]| -> Result<(), String> {
        if c.verify {
            if let Some(at) = check_page(c.seed, page, buf) {
                return Err(format!("{device}: page {page} differs from the pattern at byte {at} (seed {})", c.seed));
            }
            verified += 1;
        }
        Ok(())
    };

    // Random 4 KiB reads.
    let mut rng = SplitMix::new(c.seed ^ 0x5eed);
    let mut lat = Vec::with_capacity(c.reads as usize);
    for _ in 0..c.reads {
        let p = rng.below(pages);
        lat.push(read_full(f, page_buf.as_mut_slice(), p * PAGE as u64)?);
        check(p, page_buf.as_slice())?;
    }
    let mean = lat.iter().sum::<Duration>() / c.reads;
    lat.sort_unstable();

    // Sequential reads of whole blocks.
    let mut seq_time = Duration::ZERO;
    let mut seq_bytes = 0u64;
    let mut b = 0u64;
    let k0 = cputime::kernel_time();
    while (b + 1) * pages_per_block <= pages {
        seq_time += read_full(f, block.as_mut_slice(), b * c.seq_block_bytes as u64)?;
        for (k, p) in block.as_slice().chunks_exact(PAGE).enumerate() {
            check(b * pages_per_block + k as u64, p)?;
        }
        seq_bytes += c.seq_block_bytes as u64;
        b += 1;
    }
    let seq_kernel_us_per_page = cputime::us_per_page(k0, cputime::kernel_time(), seq_bytes / PAGE as u64);

    Ok(Report {
        name: c.name.clone(),
        device: device.to_string(),
        bytes,
        write_mb_s,
        writes: c.writes,
        write4k_p50_us: us(percentile(&wlat, 50.0)),
        write4k_p99_us: us(percentile(&wlat, 99.0)),
        reads: c.reads,
        rand4k_p50_us: us(percentile(&lat, 50.0)),
        rand4k_p99_us: us(percentile(&lat, 99.0)),
        rand4k_mean_us: us(mean),
        seq_block_kib: c.seq_block_bytes / 1024,
        seq_mb_s: mb_s(seq_bytes, seq_time),
        write_kernel_us_per_page,
        seq_kernel_us_per_page,
        pages_verified: verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn cfg(write: bool) -> Config {
        Config {
            name: "file".into(),
            limit_bytes: None,
            reads: 200,
            seed: 7,
            seq_block_bytes: 64 * 1024,
            write,
            verify: true,
            writes: 0,
        }
    }

    fn temp(name: &str, len: u64) -> (std::path::PathBuf, File) {
        let p = std::env::temp_dir().join(format!("blkbench-{}-{name}", std::process::id()));
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        f.set_len(len).unwrap();
        (p, f)
    }

    #[test]
    fn pages_differ_by_page_and_seed_and_check_finds_the_byte() {
        let (mut a, mut b) = (vec![0u8; PAGE], vec![0u8; PAGE]);
        fill_page(1, 5, &mut a);
        fill_page(1, 6, &mut b);
        assert_ne!(a, b);
        fill_page(2, 5, &mut b);
        assert_ne!(a, b);
        assert_eq!(check_page(1, 5, &a), None);
        a[1234] ^= 0x10;
        assert_eq!(check_page(1, 5, &a), Some(1234));
        assert!(check_page(1, 5, &vec![0u8; PAGE]).is_some(), "a zero page is not the pattern");
    }

    #[test]
    fn aligned_buffers_are_page_aligned() {
        for len in [PAGE, 3 * PAGE, 256 * 1024] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            assert_eq!(b.as_mut_slice().len(), len);
        }
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&v[..1], 99.0), Duration::from_micros(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn writes_then_reads_back_every_page_of_a_file() {
        let (p, mut f) = temp("rw", 1 << 20);
        let r = run(&mut f, "file", &cfg(true)).unwrap();
        assert_eq!(r.bytes, 1 << 20);
        assert!(r.write_mb_s.is_some_and(|w| w > 0.0));
        // 200 random pages + all 256 pages sequentially.
        assert_eq!(r.pages_verified, 200 + 256);
        assert!(r.rand4k_p50_us > 0.0 && r.rand4k_p50_us <= r.rand4k_p99_us && r.seq_mb_s > 0.0);
        assert!(!r.json().contains("write4k"), "no write latencies without --writes: {}", r.json());
        // A second run without writing finds the same pattern; timed random writes keep it.
        let again = run(&mut f, "file", &Config { write: false, writes: 50, ..cfg(true) }).unwrap();
        assert_eq!(again.pages_verified, 456);
        assert!(again.write4k_p50_us > 0.0 && again.write4k_p50_us <= again.write4k_p99_us);
        assert!(again.json().contains("\"write4k_writes\":50,"), "{}", again.json());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_corrupted_page_is_reported_not_measured() {
        let (p, mut f) = temp("bad", 256 * 1024);
        run(&mut f, "file", &cfg(true)).unwrap();
        f.write_at(b"X", 3 * PAGE as u64 + 17).unwrap();
        let err = run(&mut f, "file", &Config { write: false, reads: 1, ..cfg(true) }).unwrap_err();
        assert!(err.contains("page 3 differs") && err.contains("byte 17"), "{err}");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn bad_sizes_are_errors() {
        let (p, mut f) = temp("small", 8 * 1024);
        let err = run(&mut f, "file", &cfg(true)).unwrap_err();
        assert!(err.contains("less than one 64 KiB block"), "{err}");
        let err = run(&mut f, "file", &Config { limit_bytes: Some(1 << 30), ..cfg(true) }).unwrap_err();
        assert!(err.contains("fewer than"), "{err}");
        let err = run(&mut f, "file", &Config { seq_block_bytes: 1000, ..cfg(true) }).unwrap_err();
        assert!(err.contains("multiple of 4096"), "{err}");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn report_is_one_json_line() {
        let r = Report {
            name: "n\"bd".into(),
            device: "/dev/nbd0".into(),
            bytes: 4096,
            write_mb_s: None,
            writes: 0,
            write4k_p50_us: 0.0,
            write4k_p99_us: 0.0,
            reads: 3,
            rand4k_p50_us: 1.25,
            rand4k_p99_us: 2.0,
            rand4k_mean_us: 1.5,
            seq_block_kib: 256,
            seq_mb_s: 100.0,
            write_kernel_us_per_page: None,
            seq_kernel_us_per_page: Some(12.345),
            pages_verified: 9,
        };
        let j = r.json();
        assert!(!j.contains('\n'));
        assert!(j.starts_with("{\"tool\":\"trapeze-blkbench\",\"name\":\"n\\\"bd\""), "{j}");
        assert!(
            j.contains("\"write_mb_s\":null,")
                && j.contains("\"rand4k_p50_us\":1.2")
                && j.contains("\"write_kernel_us_per_page\":null,\"seq_kernel_us_per_page\":12.35,")
                && j.ends_with("\"pages_verified\":9}")
        );
    }
}
