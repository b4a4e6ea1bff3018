// SPDX-License-Identifier: GPL-2.0-only
//! The GMS benchmark run by `cargo xtask bench gms`: reading 8 KB pages from network
//! memory on a 3-node in-process cluster (virtual NICs, native firmware; the client node
//! on one thread, the two lending nodes on another) against the disk GMS exists to avoid,
//! measured in the same run.
//!
//! Rows: sequential read bandwidth through the client's cache with read-ahead depth 0 / 4
//! / 16 (the cache emptied before each scan), and random 8 KB getpages one at a time
//! (p50/p99). Baseline: the same data in a file on the local disk, read with `O_DIRECT`
//! (no page cache): sequential 8 KB reads one at a time and random 8 KB reads, p50/p99.
//! The two take turns in the same run: each of `--repeat` rounds scans network memory at
//! every depth, then the disk, and the figures are the medians over the rounds; the
//! random reads alternate in blocks of [`RANDOM_BLOCK`], the same pages on both sides.
//! The file lives under `--dir` (default `~/.cache/trapeze/bench`); the benchmark refuses
//! a directory on tmpfs or ramfs (that would be memory, not disk) and names the disk: its
//! file system, device and driver. On a VM's virtio-blk disk the host's page cache may
//! hold the file (it was just written), so that baseline is the host's memory behind an
//! emulated disk, not a platter or flash.
//!
//! Then `--bound-rounds` rounds (5) measure what two cores allow read-ahead with no wire
//! delay: depth 0 and 16 on two threads, then depth 16 with every node on one thread, each
//! round within ~0.1 s; 2 × (depth-0 time per page) / (one-thread depth-16 CPU per page)
//! bounds depth 16 / depth 0 here, since a depth-0 round trip is all of a page's work
//! plus cross-core handoffs and two cores can at best halve the depth-16 work.
//!
//! Then the sequential scans again on a fresh cluster per `--wire-delays-us` value (2 and
//! 10 µs by default) with that one-way delay modelled on every link: with no delay a
//! depth-0 round trip is all CPU work on two cores, so read-ahead can only spread it; a
//! wire delay is latency for it to hide, as on a real network.
//!
//! Then what replication costs a writer ([`replication`]): `--replication-pairs` pairs of
//! rounds writing `--replication-pages` pages with one copy and with two, interleaved;
//! `replication_cost` is the median over the pairs of the r = 2 write time over r = 1's.
//!
//! Last, whether a getpage costs more when the cluster holds more ([`scale`]): random
//! getpages on a cluster holding `--scale-pages` (8 GiB) against one holding
//! `--scale-small-pages` (32 MiB), interleaved; `scale_inproc_p50_ratio` is large p50 / small
//! p50 (`scale_p50_ratio` is the same comparison on three `gmsd`: `gmsd/benches/scale.rs`).

mod replication;
mod scale;

use anyhow::{bail, Context};
use clap::Parser;
use gms::prelude::*;
use rustix::fs::{Mode, OFlags};
use serde_json::json;
use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Instant;
use trapeze_node::gms::{page_pattern, Cluster, Got, ReadInto};
use trapeze_node::rpc::FRAME_BYTES;

#[derive(Parser, Clone)]
#[command(about = "GMS read bandwidth and getpage latency vs O_DIRECT disk reads")]
struct Args {
    /// Pages in the data set (8 KiB each).
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(64..=1_000_000))]
    pages: u64,
    /// Memory budget of each lending node, in pages.
    #[arg(long, default_value_t = 4096)]
    budget: usize,
    /// Random reads (each side).
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    random: u64,
    /// Rounds of sequential scans (each depth, then the disk); medians are reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Directory of the disk baseline's file (default: ~/.cache/trapeze/bench).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// One JSON object per row, then one with the ratios.
    #[arg(long)]
    json: bool,
    /// Drive all three nodes from one thread (default: the client on one thread, the two
    /// lending nodes on another).
    #[arg(long)]
    one_thread: bool,
    /// The lenders' thread also runs the client's NIC firmware (as the NIC's own
    /// processor would), so the client thread does host work only.
    #[arg(long)]
    nic_thread: bool,
    /// Only the network-memory side (no disk baseline), e.g. for profiling.
    #[arg(long)]
    no_disk: bool,
    /// After the main rows (no wire delay: the in-process switch delivers as fast as the
    /// receiver polls), the sequential scans again on a fresh cluster whose links model
    /// each of these one-way wire delays, in µs (the option with no value: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [2.0f64, 10.0])]
    wire_delays_us: Vec<f64>,
    /// Rounds measuring what two cores allow read-ahead (depth 0 and 16 on two threads,
    /// then depth 16 with every node on one thread), after the main scans; 0: none.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=100))]
    bound_rounds: u32,
    /// Pages (8 KiB) the large cluster of the scale comparison holds; 0: no scale
    /// comparison. The default, 1 Mi pages, is 8 GiB: the process needs that much memory.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(0..=4 << 20))]
    scale_pages: u64,
    /// Pages the small cluster of the scale comparison holds (32 MiB).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..=1 << 20))]
    scale_small_pages: u64,
    /// Random getpages on each cluster of the scale comparison (cheap beside the fill,
    /// and each p50 steadier the more there are).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    scale_reads: u64,
    /// Pairs of write rounds (one with r = 1, one with r = 2) measuring what replication
    /// costs a writer; 0: none.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
    replication_pairs: u32,
    /// Pages each write round of the replication comparison writes (8 KiB each).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(16..=100_000))]
    replication_pages: u64,
    /// Read-ahead depths of the sequential scans.
    #[arg(long, value_delimiter = ',', default_values_t = [0u32, 4, 16])]
    depths: Vec<u32>,
}

const SPACE: u64 = 5;
const PAGE: usize = FRAME_BYTES as usize;
/// Random reads per turn when network memory and the disk take turns.
const RANDOM_BLOCK: u64 = 250;

/// Page `n`'s contents (version 0 of the shared pattern).
fn content(n: u64) -> Vec<u8> {
    page_pattern(PageId::new(SPACE, n), Version(0))
}

/// A fingerprint of a page: Fletcher-style sums over its 64-bit words in four lanes (a
/// running sum and a sum of running sums each), so a wrong, stale, torn or reordered page
/// changes it. The timed scans check each page the reader got against the fingerprint of
/// the bytes it should be (computed beforehand): the check reads only the reader's
/// buffer, still hot from the copy, not the reference data set that lies in DRAM (the
/// disk side checks nothing while timed).
fn fingerprint(b: &[u8]) -> [u64; 8] {
    let (mut sum, mut sum2) = ([0u64; 4], [0u64; 4]);
    for chunk in b.chunks_exact(32) {
        for j in 0..4 {
            let w = u64::from_le_bytes(chunk[j * 8..j * 8 + 8].try_into().unwrap_or_default());
            sum[j] = sum[j].wrapping_add(w);
            sum2[j] = sum2[j].wrapping_add(sum[j]);
        }
    }
    let tail = b.chunks_exact(32).remainder();
    sum[0] ^= tail.iter().fold(b.len() as u64, |h, &x| h.rotate_left(8) ^ x as u64);
    [sum[0], sum[1], sum[2], sum[3], sum2[0], sum2[1], sum2[2], sum2[3]]
}

pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn mb_s(pages: u64, secs: f64) -> f64 {
    pages as f64 * PAGE as f64 / secs / 1e6
}

pub(crate) struct Rand(u64);
impl Rand {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// CPU time of this thread (s): with `--one-thread` the work per page, whatever else
/// the machine runs.
fn thread_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// One round of the two-core bound (see `bench_gms`).
struct Round {
    /// Read-ahead 16 / 0 measured in the round.
    ratio: f64,
    /// Depth-0 time per page (µs), two threads.
    t0: f64,
    /// Depth-16 CPU per page (µs) with every node on one thread.
    c16: f64,
}

impl Round {
    /// 2 × t0 / c16: what two cores allow read-ahead 16 / 0 with no wire delay.
    fn bound(&self) -> f64 {
        2.0 * self.t0 / self.c16
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    pct(&mut v, 0.5)
}

/// One sequential scan of pages `0..pages` from node 0 through its cache with read-ahead
/// `depth` (the cache emptied first), every page checked against `expected`: time per
/// page and this thread's CPU per page, in µs.
fn scan(c: &mut Cluster, depth: u32, pages: u64, expected: &[[u64; 8]]) -> anyhow::Result<(f64, f64)> {
    let p0 = &mut c.ports[0];
    p0.set_cache_pages(0);
    p0.set_cache_pages(256);
    p0.set_readahead(depth);
    // The reader's own buffer: each page is copied into it and checked there (by
    // fingerprint; the bytes themselves are compared in the random reads).
    let mut buf = vec![0u8; PAGE];
    let t = Instant::now();
    let cpu0 = thread_cpu();
    for n in 0..pages {
        match c.read_into(0, PageId::new(SPACE, n), &mut buf)? {
            ReadInto::Hit { len, .. } if len == PAGE && fingerprint(&buf) == expected[n as usize] => {}
            g => bail!("page {n}: {}", if matches!(g, ReadInto::Miss(_)) { "missed" } else { "wrong bytes" }),
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / pages as f64;
    let cpu = (thread_cpu() - cpu0) * 1e6 / pages as f64;
    c.settle(0)?;
    Ok((us, cpu))
}

/// Put pages `pages` of [`SPACE`] at version 1 from node 0 (`bytes(n)`: page `n`'s
/// contents), at most 32 in flight, and wait for every answer: the puts that did not end
/// `Stored`.
pub(crate) fn put_round<'a>(
    c: &mut Cluster,
    pages: &[u64],
    bytes: impl Fn(u64) -> Cow<'a, [u8]>,
) -> anyhow::Result<Vec<(PageId, Version, PutResult)>> {
    let log0 = c.ports[0].put_log.len();
    for &n in pages {
        while c.ports[0].in_flight() >= 32 {
            c.poll();
        }
        c.ports[0].put(PageId::new(SPACE, n), Version(1), &bytes(n), None)?;
    }
    c.settle(0)?;
    let failed = c.ports[0].put_log[log0..].iter().filter(|l| !matches!(l.2, PutResult::Stored { .. })).copied();
    Ok(failed.collect())
}

/// Figures of one side (network memory or disk).
struct Side {
    /// Rounds of the two-core bound (main network-memory side only).
    bound: Vec<Round>,
    seq: Vec<(u32, f64)>,
    /// Sequential scans: CPU µs per page of the thread that ran them (median of the rounds).
    cpu_us: Vec<(u32, f64)>,
    p50: f64,
    p99: f64,
}

/// The network-memory side with `wire_delay_us` modelled on every link (`expected`: each
/// page's fingerprint); the random reads only with `random`; all three nodes on the
/// calling thread with `one_thread`. With a `disk`, the disk's scans and random reads
/// take turns with the network memory's, and its side is returned too.
fn bench_gms(
    a: &Args,
    data: &[Vec<u8>],
    expected: &[[u64; 8]],
    wire_delay_us: f64,
    random: bool,
    one_thread: bool,
    mut disk: Option<&mut Disk>,
) -> anyhow::Result<(Side, Option<Side>)> {
    let link = trapeze_vnic::link::FaultConfig { delay_ns: (wire_delay_us * 1e3).round() as u64, ..Default::default() };
    let gms_cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::with_firmware(3, a.budget, gms_cfg, None, link)?;
    c.ports[0].node.set_budget(0); // the client lends no memory
    let servers = if one_thread { None } else { Some(c.spawn_servers_with(1, a.nic_thread)?) };
    // Load, putting again what a busy target refused (its update table was full).
    let mut todo: Vec<u64> = (0..a.pages).collect();
    for _round in 0..5 {
        todo = put_round(&mut c, &todo, |n| Cow::Borrowed(data[n as usize].as_slice()))?
            .iter()
            .map(|l| l.0.page)
            .collect();
        if todo.is_empty() {
            break;
        }
    }
    if !todo.is_empty() {
        bail!("{} of {} pages could not be stored (raise --budget)", todo.len(), a.pages);
    }
    // Rounds: every depth, then the disk; medians over the rounds.
    let (mut bw_runs, mut cpu_runs) = (vec![Vec::new(); a.depths.len()], vec![Vec::new(); a.depths.len()]);
    let mut disk_runs = Vec::new();
    for _ in 0..a.repeat {
        for (i, &depth) in a.depths.iter().enumerate() {
            let (us, cpu) = scan(&mut c, depth, a.pages, expected)?;
            bw_runs[i].push(PAGE as f64 / us);
            cpu_runs[i].push(cpu);
        }
        if let Some(d) = disk.as_deref_mut() {
            disk_runs.push(d.scan(data)?);
        }
    }
    let seq = a.depths.iter().copied().zip(bw_runs.into_iter().map(median)).collect();
    let cpu_us = a.depths.iter().copied().zip(cpu_runs.into_iter().map(median)).collect();
    // What two cores allow: rounds of (depth 0 and 16 as above, then depth 16 with all
    // three nodes on this thread), each round within ~0.1 s so one phase of this VM
    // covers it. The one-thread scan's CPU per page is all the work of a page; with no
    // wire delay a depth-0 round trip is that work plus cross-core handoffs, never idle,
    // and two cores can at best halve the depth-16 work: 2 × (depth-0 time per page) /
    // (one-thread depth-16 CPU per page) bounds read-ahead 16 / 0.
    let mut bound = Vec::new();
    let mut servers = servers;
    if servers.is_some() && a.bound_rounds > 0 && wire_delay_us == 0.0 {
        for _ in 0..a.bound_rounds {
            let (t0, _) = scan(&mut c, 0, a.pages, expected)?;
            let (t16, _) = scan(&mut c, 16, a.pages, expected)?;
            if let Some(s) = servers.take() {
                c.rejoin(s)?;
            }
            let (_, c16) = scan(&mut c, 16, a.pages, expected)?;
            servers = Some(c.spawn_servers_with(1, a.nic_thread)?);
            bound.push(Round { ratio: t0 / t16, t0, c16 });
        }
    }
    // The same random pages on both sides, in turns of RANDOM_BLOCK reads.
    let (mut r, mut rd) = (Rand(0x2545_f491_4f6c_dd1d), Rand(0x2545_f491_4f6c_dd1d));
    let (mut lat, mut disk_lat) = (Vec::new(), Vec::new());
    let mut left = if random { a.random } else { 0 };
    while left > 0 {
        let block = RANDOM_BLOCK.min(left);
        for _ in 0..block {
            let n = r.next() % a.pages;
            let t = Instant::now();
            let g = c.get_wait(0, PageId::new(SPACE, n))?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            match g {
                Got::Hit { data: d, .. } if d == data[n as usize] => {}
                _ => bail!("random getpage of page {n} failed"),
            }
        }
        if let Some(d) = disk.as_deref_mut() {
            for _ in 0..block {
                disk_lat.push(d.random(rd.next() % a.pages, data)?);
            }
        }
        left -= block;
    }
    if let Some(s) = servers {
        c.rejoin(s)?;
    }
    let side = Side { bound, seq, cpu_us, p50: pct(&mut lat, 0.5), p99: pct(&mut lat, 0.99) };
    let disk_side = disk.map(|_| Side {
        bound: Vec::new(),
        seq: vec![(0, median(disk_runs))],
        cpu_us: Vec::new(),
        p50: pct(&mut disk_lat, 0.5),
        p99: pct(&mut disk_lat, 0.99),
    });
    Ok((side, disk_side))
}

/// The file system type of `dir` (refusing memory-backed ones).
fn disk_kind(dir: &std::path::Path) -> anyhow::Result<String> {
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    const EXT4: i64 = 0xef53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683e;
    let s = rustix::fs::statfs(dir).with_context(|| format!("statfs {}", dir.display()))?;
    let t = s.f_type as i64;
    Ok(match t {
        TMPFS | RAMFS => bail!("{} is on tmpfs/ramfs (memory, not disk): pass --dir on a disk", dir.display()),
        EXT4 => "ext4".into(),
        XFS => "xfs".into(),
        BTRFS => "btrfs".into(),
        other => format!("fs type {other:#x}"),
    })
}

/// The disk baseline: the data set in a file, read with `O_DIRECT` (no page cache).
struct Disk {
    fd: rustix::fd::OwnedFd,
    path: PathBuf,
    /// O_DIRECT wants an aligned buffer: an anonymous mapping is page-aligned.
    buf: memmap2::MmapMut,
    pages: u64,
}

impl Disk {
    /// Write `data` to a file in `dir`, sync it, and open it for `O_DIRECT` reads.
    fn create(dir: &std::path::Path, data: &[Vec<u8>]) -> anyhow::Result<Disk> {
        use std::io::Write;
        let path = dir.join("gms-baseline.dat");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        data.iter().try_for_each(|d| f.write_all(d))?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        let fd = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECT, Mode::empty())
            .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
        Ok(Disk { fd, path, buf: memmap2::MmapMut::map_anon(PAGE)?, pages: data.len() as u64 })
    }

    fn read(&mut self, n: u64) -> anyhow::Result<()> {
        let got = rustix::io::pread(&self.fd, &mut self.buf[..], n * PAGE as u64)?;
        if got != PAGE {
            bail!("short O_DIRECT read of page {n}: {got} bytes");
        }
        Ok(())
    }

    /// One sequential scan, 8 KB reads one at a time: MB/s (the last page checked).
    fn scan(&mut self, data: &[Vec<u8>]) -> anyhow::Result<f64> {
        let t = Instant::now();
        for n in 0..self.pages {
            self.read(n)?;
        }
        let mbs = mb_s(self.pages, t.elapsed().as_secs_f64());
        if self.buf[..] != data[self.pages as usize - 1][..] {
            bail!("the disk file reads back wrong");
        }
        Ok(mbs)
    }

    /// One timed read of page `n` (µs), its bytes checked after the clock stops.
    fn random(&mut self, n: u64, data: &[Vec<u8>]) -> anyhow::Result<f64> {
        let t = Instant::now();
        self.read(n)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        if self.buf[..] != data[n as usize][..] {
            bail!("page {n} of the disk file reads back wrong");
        }
        Ok(us)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the disk under `dir` is: its device (from `/proc/self/mountinfo`) and the
/// driver behind it (`/sys/dev/block`), e.g. "/dev/vda1 (virtio_blk)".
fn disk_device(dir: &std::path::Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // Fields: id parent MAJ:MIN root mount-point options [optional…] - fstype source …
    let best = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|&x| x == "-")?;
            Some((*f.get(4)?, *f.get(2)?, *f.get(dash + 2)?))
        })
        .filter(|(mp, ..)| dir.starts_with(mp))
        .max_by_key(|(mp, ..)| mp.len());
    let Some((_, dev, source)) = best else { return "an unknown device".into() };
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{dev}")).unwrap_or_default();
    let driver = [sys.join("device/driver"), sys.join("../device/driver")]
        .iter()
        .find_map(|p| std::fs::read_link(p).ok())
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match driver {
        Some(d) => format!("{source} ({d})"),
        None => source.to_string(),
    }
}

fn run(a: Args) -> anyhow::Result<()> {
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("HOME is not set: pass --dir")?).join(".cache/trapeze/bench")
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let fs = disk_kind(&dir)?;
    // Every page's bytes, made once: reads are checked against them without regenerating.
    let data: Vec<Vec<u8>> = (0..a.pages).map(content).collect();
    let expected: Vec<[u64; 8]> = data.iter().map(|d| fingerprint(d)).collect();
    let mut disk = if a.no_disk { None } else { Some(Disk::create(&dir, &data)?) };
    let device = disk_device(&dir);
    let (g, d) = bench_gms(&a, &data, &expected, 0.0, true, a.one_thread, disk.as_mut())?;
    drop(disk);
    let d = d.unwrap_or(Side {
        bound: Vec::new(),
        seq: vec![(0, f64::NAN)],
        cpu_us: Vec::new(),
        p50: f64::NAN,
        p99: f64::NAN,
    });
    let mut wired = Vec::new();
    for &w in &a.wire_delays_us {
        if !(w > 0.0 && w <= 1000.0) {
            bail!("--wire-delays-us: {w} is not in (0, 1000]");
        }
        wired.push((w, bench_gms(&a, &data, &expected, w, false, a.one_thread, None)?.0));
    }
    let rep = (a.replication_pairs > 0)
        .then(|| replication::run(a.replication_pages, a.replication_pairs, a.budget))
        .transpose()?;
    let sc = (a.scale_pages > 0).then(|| scale::run(a.scale_small_pages, a.scale_pages, a.scale_reads)).transpose()?;
    let bw_of = |side: &Side, depth| side.seq.iter().find(|s| s.0 == depth).map_or(f64::NAN, |s| s.1);
    let bw = |depth| bw_of(&g, depth);
    let ra_ratio = bw(16) / bw(0);
    let rounds = &g.bound;
    let round_ratio = median(rounds.iter().map(|r| r.ratio).collect());
    let round_bound = median(rounds.iter().map(Round::bound).collect());
    let lat_ratio = d.p50 / g.p50;
    let disk_seq = d.seq[0].1;
    if a.json {
        for (w, side) in std::iter::once((&0.0, &g)).chain(wired.iter().map(|(w, s)| (w, s))) {
            for (&(depth, mbs), &(_, cpu)) in side.seq.iter().zip(&side.cpu_us) {
                println!(
                    "{}",
                    json!({ "row": "seq_read", "source": "gms", "readahead": depth, "mb_s": mbs, "pages": a.pages,
                            "client_cpu_us_per_page": cpu, "wire_delay_us": w })
                );
            }
        }
        println!(
            "{}",
            json!({ "row": "seq_read", "source": "disk_odirect", "readahead": 0, "mb_s": disk_seq, "pages": a.pages, "fs": fs,
                    "device": device })
        );
        println!(
            "{}",
            json!({ "row": "random_8k", "source": "gms", "p50_us": g.p50, "p99_us": g.p99, "reads": a.random })
        );
        println!(
            "{}",
            json!({ "row": "random_8k", "source": "disk_odirect", "p50_us": d.p50, "p99_us": d.p99, "reads": a.random, "fs": fs,
                    "device": device })
        );
        if let Some(sc) = &sc {
            let copies = [sc.copy_p50.0, sc.copy_p50.1];
            for ((name, (pages, p50, p99)), copy) in [("small", sc.small), ("large", sc.large)].into_iter().zip(copies)
            {
                println!(
                    "{}",
                    json!({ "row": "random_8k_scale", "source": "gms", "cluster": name, "pages": pages,
                            "gib": pages as f64 * PAGE as f64 / (1u64 << 30) as f64, "p50_us": p50, "p99_us": p99,
                            "reads": a.scale_reads, "page_copy_p50_us": copy })
                );
            }
        }
        if let Some(rep) = &rep {
            for (r, rounds) in [(1u8, &rep.r1), (2, &rep.r2)] {
                println!(
                    "{}",
                    json!({ "row": "put_replicated", "source": "gms", "replicas": r, "pages": rep.pages,
                            "p50_us_per_page": rep.p50(r), "rounds_us_per_page": rounds })
                );
            }
        }
        println!(
            "{}",
            json!({ "summary": true, "readahead16_over_0": ra_ratio,
                    "replication_cost": rep.as_ref().map(replication::Replication::cost),
                    "replication_put_p50_us_per_page": rep.as_ref().map(|r| json!({ "r1": r.p50(1), "r2": r.p50(2) })),
                    "replication_cost_pairs": rep.as_ref().map(replication::Replication::pair_ratios),
                    "scale_inproc_p50_ratio": sc.as_ref().map(scale::Scale::p50_ratio), "disk_p50_over_gms_p50": lat_ratio,
                    "gms_seq16_over_disk_seq": bw(16) / disk_seq,
                    "two_core_bound_rounds": rounds.iter().map(|r| json!({ "readahead16_over_0": r.ratio,
                        "readahead0_us_per_page": r.t0, "one_thread_readahead16_cpu_us_per_page": r.c16, "bound": r.bound() }))
                        .collect::<Vec<_>>(),
                    "two_core_bound_median": (!rounds.is_empty()).then_some(round_bound),
                    "readahead16_over_0_in_those_rounds_median": (!rounds.is_empty()).then_some(round_ratio),
                    "readahead16_over_0_with_wire_delay": wired.iter()
                        .map(|(w, side)| json!({ "wire_delay_us": w, "ratio": bw_of(side, 16) / bw_of(side, 0) }))
                        .collect::<Vec<_>>(),
                    "readahead_target_met": ra_ratio >= 3.0, "latency_target_met": lat_ratio >= 3.0 })
        );
        return Ok(());
    }
    println!(
        "GMS: 3 nodes in-process on virtual NICs (native firmware; client thread + lenders' thread), {} pages of 8 KiB",
        a.pages
    );
    println!(
        "baseline: a file on {} ({fs} on {device}) read with O_DIRECT, same pages, same random sequence, taking turns",
        dir.display()
    );
    println!("  (on a VM's virtio-blk disk the host's page cache may hold the file: the host's memory behind an emulated disk)\n");
    println!("{:<34} {:>10}", format!("sequential read (median of {})", a.repeat), "MB/s");
    for (&(depth, mbs), &(_, cpu)) in g.seq.iter().zip(&g.cpu_us) {
        println!(
            "{:<34} {:>10.0}   (client thread CPU {cpu:.1} µs/page)",
            format!("  network memory, read-ahead {depth:>2}"),
            mbs
        );
    }
    println!("{:<34} {:>10.0}", "  disk O_DIRECT, 8 KB reads", disk_seq);
    println!("\n{:<34} {:>10} {:>10}", "random 8 KB read, one at a time", "p50 µs", "p99 µs");
    println!("{:<34} {:>10.1} {:>10.1}", "  network memory (getpage)", g.p50, g.p99);
    println!("{:<34} {:>10.1} {:>10.1}", "  disk O_DIRECT", d.p50, d.p99);
    println!("\nread-ahead 16 / read-ahead 0 bandwidth: {ra_ratio:.2}x (target ≥ 3)");
    println!("disk p50 / getpage p50:                 {lat_ratio:.2}x (target ≥ 3)");
    println!("network memory read-ahead 16 / disk sequential: {:.2}x", bw(16) / disk_seq);
    if !rounds.is_empty() {
        let list =
            |f: &dyn Fn(&Round) -> f64| rounds.iter().map(|r| format!("{:.2}", f(r))).collect::<Vec<_>>().join(" ");
        println!("\nwhat two cores allow with no wire delay ({} rounds, each within ~0.1 s):", rounds.len());
        println!("  depth-0 time per page (µs), two threads:            {}", list(&|r| r.t0));
        println!("  depth-16 CPU per page (µs), all nodes on one thread: {}", list(&|r| r.c16));
        println!(
            "  bound 2 × depth-0 time / one-thread depth-16 CPU:    {}  (median {round_bound:.2})",
            list(&Round::bound)
        );
        println!(
            "  read-ahead 16 / 0 measured in those rounds:          {}  (median {round_ratio:.2})",
            list(&|r| r.ratio)
        );
        println!("  (a depth-0 round trip is all the page's work plus cross-core handoffs, never idle; two cores can at best halve the depth-16 work)");
    }
    if !wired.is_empty() {
        // Without a wire delay, every µs of a depth-0 round trip is some thread's CPU work
        // on two cores, so read-ahead can only spread work over them; a wire delay is
        // latency for it to hide, as on a real network.
        println!("\nthe same scans with a modelled one-way wire delay on every link (what a real network adds)");
        println!("{:<34} {:>10} {:>10} {:>8}", "", "depth 0", "depth 16", "16 / 0");
        for (w, side) in &wired {
            println!(
                "{:<34} {:>10.0} {:>10.0} {:>7.2}x",
                format!("  wire delay {w} µs, MB/s"),
                bw_of(side, 0),
                bw_of(side, 16),
                bw_of(side, 16) / bw_of(side, 0)
            );
        }
    }
    if let Some(rep) = &rep {
        println!(
            "\nwriting {} pages from node 0, r = 1 and r = 2 in turn ({} pairs of rounds; {} replica puts went again)",
            rep.pages,
            rep.r1.len(),
            rep.again
        );
        println!("  put time per page p50: r = 1 {:.1} µs, r = 2 {:.1} µs", rep.p50(1), rep.p50(2));
        let pairs: Vec<String> = rep.pair_ratios().iter().map(|x| format!("{x:.2}")).collect();
        println!("  r = 2 / r = 1 per pair: {}", pairs.join(" "));
        println!("  replication_cost (median of the pairs): {:.2} (target ≤ 1.5)", rep.cost());
    }
    if let Some(sc) = &sc {
        println!("\ngetpage p50 as the cluster grows (all nodes on one thread, rounds interleaved)");
        for (name, (pages, p50, p99)) in [("small", sc.small), ("large", sc.large)] {
            let mib = (pages * PAGE as u64) >> 20;
            println!("  {name:<5} {pages:>8} pages ({mib:>5} MiB): p50 {p50:>6.1} µs, p99 {p99:>6.1} µs");
        }
        println!("  scale_inproc_p50_ratio large / small: {:.3}", sc.p50_ratio());
        let (cs, cl) = sc.copy_p50;
        println!(
            "  one 8 KiB copy out of a held page, p50: {cs:.2} µs small, {cl:.2} µs large: {:.2} of the {:.2} µs \
             getpage p50 difference is the page's own memory",
            cl - cs,
            sc.large.1 - sc.small.1
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    trapeze_node::gms::on_big_stack(move || run(a))?
}
