// SPDX-License-Identifier: GPL-2.0-only
//! The file-access benchmark behind `trapeze-filebench`: a file of pattern pages written
//! and synced, then read back whole with streaming `read()` calls or through a shared
//! `mmap`, every page checked against the pattern.
//!
//! Page `p` of the file holds [`crate::blkbench::fill_page`]`(seed, p)`. Only the reading
//! is timed: the `read()` calls, or the page faults of touching one byte per page of the
//! mapping (the mapping's creation included); the check of each page runs outside the
//! timed part, as `trapeze-blkbench` does.

use crate::blkbench::{check_page, fill_page, json_str, mb_s, PAGE};
use crate::mapped::Mapped;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// How the file is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Create the file and write the pattern (then `fsync`).
    Write,
    /// Streaming `read()` calls of `block` bytes.
    Stream,
    /// A shared read-only mapping, touched page after page.
    Mmap,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Stream => "stream",
            Mode::Mmap => "mmap",
        }
    }
}

/// What was measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub name: String,
    pub path: String,
    pub mode: Mode,
    pub bytes: u64,
    pub secs: f64,
    pub mb_s: f64,
    pub pages_verified: u64,
}

impl Report {
    /// One JSON object on one line (keys in a fixed order).
    pub fn json(&self) -> String {
        let mut s = String::from("{\"tool\":\"trapeze-filebench\",\"name\":");
        s.push_str(&json_str(&self.name));
        s.push_str(",\"path\":");
        s.push_str(&json_str(&self.path));
        let _ = write!(
            s,
            ",\"mode\":\"{}\",\"bytes\":{},\"secs\":{:.4},\"mb_s\":{:.1},\"pages_verified\":{}}}",
            self.mode.name(),
            self.bytes,
            self.secs,
            self.mb_s,
            self.pages_verified
        );
        s
    }
}

/// Check every page of `data` (page `first + k` at offset `k * PAGE`).
fn check_pages(path: &str, seed: u64, first: u64, data: &[u8]) -> Result<u64, String> {
    let mut n = 0;
    for (k, page) in data.chunks_exact(PAGE).enumerate() {
        let p = first + k as u64;
        if let Some(at) = check_page(seed, p, page) {
            return Err(format!("{path}: page {p} differs from the pattern at byte {at} (seed {seed})"));
        }
        n += 1;
    }
    Ok(n)
}

/// Create `path` with `bytes` (whole pages) of the pattern, written in `block`-byte
/// `write()` calls, then `fsync`: timed as a whole.
fn write_file(path: &Path, bytes: u64, seed: u64, block: usize) -> Result<Duration, String> {
    let shown = path.display();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| format!("creating {shown}: {e}"))?;
    let mut buf = vec![0u8; block];
    let t = Instant::now();
    let mut off = 0u64;
    while off < bytes {
        let len = (bytes - off).min(block as u64) as usize;
        let first = off / PAGE as u64;
        for (k, p) in buf[..len].chunks_exact_mut(PAGE).enumerate() {
            fill_page(seed, first + k as u64, p);
        }
        f.write_all(&buf[..len]).map_err(|e| format!("writing {shown} at byte {off}: {e}"))?;
        off += len as u64;
    }
    f.sync_all().map_err(|e| format!("fsync of {shown}: {e}"))?;
    Ok(t.elapsed())
}

/// Read all of `f` with `block`-byte `read()` calls; only the calls are timed.
fn read_stream(f: &mut File, shown: &str, bytes: u64, seed: u64, block: usize) -> Result<(Duration, u64), String> {
    let mut buf = vec![0u8; block];
    let mut took = Duration::ZERO;
    let mut verified = 0;
    let mut off = 0u64;
    while off < bytes {
        let len = (bytes - off).min(block as u64) as usize;
        let mut done = 0;
        while done < len {
            let t = Instant::now();
            let n = f.read(&mut buf[done..len]);
            took += t.elapsed();
            match n {
                Ok(0) => return Err(format!("{shown}: end of file at byte {}, {bytes} expected", off + done as u64)),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading {shown} at byte {}: {e}", off + done as u64)),
            }
        }
        verified += check_pages(shown, seed, off / PAGE as u64, &buf[..len])?;
        off += len as u64;
    }
    Ok((took, verified))
}

/// Map all of `f` and touch one byte of every page in order (timed, the mapping's
/// creation included), then check every page.
fn read_mmap(f: &File, shown: &str, seed: u64) -> Result<(Duration, u64), String> {
    let t = Instant::now();
    let m = Mapped::new(f).map_err(|e| format!("mmap of {shown}: {e}"))?;
    let data = m.as_slice();
    let mut sum = 0u8;
    for page in data.chunks(PAGE) {
        sum = sum.wrapping_add(page[0]);
    }
    std::hint::black_box(sum);
    let took = t.elapsed();
    Ok((took, check_pages(shown, seed, 0, data)?))
}

/// Run one mode on `path`: `Write` creates it with `bytes` bytes; the read modes read
/// the whole file (its size a multiple of the page) and check every page.
pub fn run(name: &str, path: &Path, mode: Mode, bytes: u64, seed: u64, block: usize) -> Result<Report, String> {
    if block == 0 || !block.is_multiple_of(PAGE) {
        return Err(format!("block of {block} bytes: must be a positive multiple of {PAGE}"));
    }
    let shown = path.display().to_string();
    let (took, bytes, verified) = match mode {
        Mode::Write => {
            if bytes == 0 || !bytes.is_multiple_of(PAGE as u64) {
                return Err(format!("a file of {bytes} bytes: must be a positive multiple of {PAGE}"));
            }
            (write_file(path, bytes, seed, block)?, bytes, 0)
        }
        Mode::Stream | Mode::Mmap => {
            let mut f = File::open(path).map_err(|e| format!("opening {shown}: {e}"))?;
            let len = f.metadata().map_err(|e| format!("stat of {shown}: {e}"))?.len();
            if len == 0 || !len.is_multiple_of(PAGE as u64) {
                return Err(format!("{shown} has {len} bytes: not a positive multiple of {PAGE} (write it first)"));
            }
            let (took, verified) = if mode == Mode::Stream {
                read_stream(&mut f, &shown, len, seed, block)?
            } else {
                read_mmap(&f, &shown, seed)?
            };
            (took, len, verified)
        }
    };
    Ok(Report {
        name: name.to_string(),
        path: shown,
        mode,
        bytes,
        secs: took.as_secs_f64(),
        mb_s: mb_s(bytes, took),
        pages_verified: verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("filebench-{}-{name}", std::process::id()))
    }

    #[test]
    fn written_file_reads_back_by_stream_and_mmap() {
        let p = temp("rw");
        let w = run("file", &p, Mode::Write, 1 << 20, 5, 64 * 1024).unwrap();
        assert_eq!((w.bytes, w.pages_verified, w.mode), (1 << 20, 0, Mode::Write));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 << 20);
        for mode in [Mode::Stream, Mode::Mmap] {
            let r = run("file", &p, mode, 0, 5, 12 * 1024).unwrap();
            assert_eq!((r.bytes, r.pages_verified), (1 << 20, 256), "{mode:?}");
            assert!(r.mb_s > 0.0 && r.secs > 0.0);
            let j = r.json();
            assert!(j.starts_with("{\"tool\":\"trapeze-filebench\",\"name\":\"file\""), "{j}");
            assert!(j.contains(&format!("\"mode\":\"{}\"", mode.name())) && j.ends_with("\"pages_verified\":256}"));
        }
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_changed_byte_or_a_wrong_seed_is_an_error() {
        let p = temp("bad");
        run("file", &p, Mode::Write, 64 * 1024, 5, 64 * 1024).unwrap();
        for mode in [Mode::Stream, Mode::Mmap] {
            let err = run("file", &p, mode, 0, 6, 4096).unwrap_err();
            assert!(err.contains("page 0 differs") && err.contains("seed 6"), "{err}");
        }
        OpenOptions::new().write(true).open(&p).unwrap().write_at(b"X", 5 * PAGE as u64 + 9).unwrap();
        for mode in [Mode::Stream, Mode::Mmap] {
            let err = run("file", &p, mode, 0, 5, 8192).unwrap_err();
            assert!(err.contains("page 5 differs") && err.contains("byte 9"), "{err}");
        }
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn bad_sizes_and_missing_files_are_errors() {
        let p = temp("sizes");
        assert!(run("f", &p, Mode::Write, 1000, 1, 4096).unwrap_err().contains("multiple of 4096"));
        assert!(run("f", &p, Mode::Write, 4096, 1, 1000).unwrap_err().contains("block of 1000"));
        assert!(run("f", &p, Mode::Stream, 0, 1, 4096).unwrap_err().contains("opening"));
        std::fs::write(&p, b"short").unwrap();
        assert!(run("f", &p, Mode::Mmap, 0, 1, 4096).unwrap_err().contains("write it first"));
        std::fs::remove_file(p).unwrap();
    }
}
