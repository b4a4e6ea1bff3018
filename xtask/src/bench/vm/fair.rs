// SPDX-License-Identifier: GPL-2.0-only
//! The fair baseline of `cargo xtask bench vm` (issue 33): what a user would pick instead of
//! `/dev/gms0` — a remote disk read through QEMU's own NBD client — host-native at both
//! ends as our NICs are, in the same run, with the same guest tool and arguments.
//!
//! - **fair**: a virtio-blk disk in guest 0 whose QEMU backend is QEMU's NBD client
//!   (`-blockdev driver=nbd`, `cache.direct=on`, on an iothread that polls up to 32 µs)
//!   reading `qemu-nbd` on the host over TCP on 127.0.0.1, which serves a file in
//!   `/dev/shm` (RAM) with `--cache=none --aio=threads`. Host processes: guest 0's QEMU
//!   and `qemu-nbd`.
//! - **null**: a virtio-blk disk on QEMU's `null-co` driver (reads return zeroes, writes
//!   are dropped; its own iothread): the floor of a virtio-blk request in these guests.
//!   Host processes: guest 0's QEMU. Its pages are not checked (they hold no pattern).
//! - **gms**: `/dev/gms0`. Host processes: every guest's QEMU and NIC.
//! - **nbd**: Linux's NBD client in guest 0 over virtio-net to `nbd-server` in guest 1 (the
//!   secondary row). Host processes: the two guests' QEMUs.
//! - **ram**: `/dev/gms0`'s own floor, `/dev/gmsram0` in guest 0 (trapeze.ko's block
//!   driver on local RAM, made beside the GMS disk by `gms_disk_mb`): `gms_over_ram`.
//!   Host processes: guest 0's QEMU.
//! - **gms_large**, **fair_large**: the large data set, the first `--large-mb` MiB of
//!   `/dev/gms0` and of the fair disk (both that large; 4x the answer tables' reach by
//!   default): `gms_over_fair_nbd_large`, and `gms_large_over_small` (gms_large / gms).
//!
//! Every round measures every device, in the order gms fair null nbd (ram gms_large
//! fair_large) in odd rounds and the reverse in even ones (A-B-B-A over pairs of rounds);
//! each round writes the pattern, times random 4 KiB writes, random 4 KiB reads and
//! sequential reads (`trapeze-blkbench`). The host reads each process's CPU time at the edges of every device's phase
//! ([`crate::vm::cpu_marks`]) and divides by the bytes the phase moved: `cpu_per_gib`.
//! Ratios gms/fair are taken per round and reported as median, p10 and p90.

use super::report::round_to;
use super::workloads::Workloads;
use crate::vm::cpu_marks::{CpuMark, Edge};
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The devices of the raw-device phase every run measures, in the order of odd rounds.
pub(super) const DEVICES: [&str; 4] = ["gms", "fair", "null", "nbd"];

/// The devices of a run, in the order of odd rounds: [`DEVICES`], then `ram` (the floor
/// of `/dev/gms0`: its block driver on local RAM, `/dev/gmsram0`) if `ram`, then the large
/// data set (`gms_large`, `fair_large`: the first `--large-mb` MiB of `/dev/gms0` and of
/// the fair disk) if `large`.
pub(super) fn devices(ram: bool, large: bool) -> Vec<&'static str> {
    let mut d = DEVICES.to_vec();
    if ram {
        d.push("ram");
    }
    if large {
        d.extend(["gms_large", "fair_large"]);
    }
    d
}
/// The iothreads' adaptive polling limit (QEMU's default on Linux, said explicitly).
const POLL_MAX_NS: u32 = 32_768;

/// `qemu-nbd` on the host serving a RAM file; stopped and the file removed on drop.
pub(super) struct HostNbd {
    child: Child,
    file: PathBuf,
    pub port: u16,
}

impl HostNbd {
    /// Start `qemu-nbd` on a fresh `disk_mb` MiB file in /dev/shm and wait until it accepts.
    pub(super) fn start(disk_mb: u32) -> anyhow::Result<HostNbd> {
        let qemu_nbd = Path::new("/usr/bin/qemu-nbd");
        ensure!(qemu_nbd.is_file(), "{} is missing although qemu-utils is installed", qemu_nbd.display());
        let file = PathBuf::from(format!("/dev/shm/trapeze-fair-nbd-{}.img", std::process::id()));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)
                .with_context(|| format!("creating {}", file.display()))?;
            f.set_len(u64::from(disk_mb) << 20)?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = file.with_extension("log");
        let mut cmd = if Path::new("/usr/bin/setpriv").is_file() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--"]).arg(qemu_nbd);
            c
        } else {
            Command::new(qemu_nbd)
        };
        cmd.args(["--persistent", "--shared=2", "--format=raw", "--bind=127.0.0.1", "--cache=none", "--aio=threads"])
            .arg(format!("--port={port}"))
            .arg(&file);
        let out = fs::File::create(&log)?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        let child = cmd.spawn().context("starting qemu-nbd")?;
        let mut me = HostNbd { child, file, port };
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = me.child.try_wait()? {
                bail!("qemu-nbd exited ({st}): {}", fs::read_to_string(&log).unwrap_or_default().trim());
            }
            ensure!(t.elapsed() < Duration::from_secs(10), "qemu-nbd did not listen on 127.0.0.1:{port} within 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = fs::remove_file(&log);
        Ok(me)
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HostNbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.file);
    }
}

/// Guest 0's extra QEMU arguments: the fair disk (serial `trapeze-fair`) and the null-co
/// disk (serial `trapeze-null`), each on its own polling iothread.
pub(super) fn guest0_disks(port: u16, disk_mb: u32) -> Vec<String> {
    let bytes = u64::from(disk_mb) << 20;
    [
        "-object".to_string(),
        format!("iothread,id=fairio,poll-max-ns={POLL_MAX_NS}"),
        "-blockdev".into(),
        format!(
            "driver=nbd,node-name=fairnbd,server.type=inet,server.host=127.0.0.1,server.port={port},cache.direct=on"
        ),
        "-device".into(),
        "virtio-blk-pci,drive=fairnbd,iothread=fairio,serial=trapeze-fair".into(),
        "-object".into(),
        format!("iothread,id=nullio,poll-max-ns={POLL_MAX_NS}"),
        "-blockdev".into(),
        format!("driver=null-co,node-name=nullco,size={bytes},read-zeroes=on,cache.direct=on"),
        "-device".into(),
        "virtio-blk-pci,drive=nullco,iothread=nullio,serial=trapeze-null".into(),
    ]
    .to_vec()
}

/// The host processes (labels of [`crate::vm::cpu_marks`]) that serve `device`'s requests.
pub(super) fn path_processes(device: &str, guests: u16) -> Vec<String> {
    match device {
        "gms" | "gms_large" => (0..guests).flat_map(|k| [format!("qemu{k}"), format!("nic{k}")]).collect(),
        "fair" | "fair_large" => vec!["qemu0".into(), "qemu-nbd".into()],
        "null" | "ram" => vec!["qemu0".into()],
        "nbd" => vec!["qemu0".into(), "qemu1".into()],
        _ => Vec::new(),
    }
}

/// One device's figures in one round, from its `trapeze-blkbench` line.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RoundRow {
    pub device: String,
    pub round: u32,
    pub p50_us: f64,
    pub p99_us: f64,
    pub seq_mb_s: f64,
    pub seq_write_mb_s: f64,
    pub write4k_p50_us: f64,
    pub write4k_p99_us: f64,
    /// Guest 0's kernel CPU (system and interrupt time of all its CPUs) per page of the
    /// sequential reads, µs.
    pub guest_us_per_page: f64,
    /// Bytes the phase moved: the pattern written, the random writes and reads, the
    /// sequential reads.
    pub moved: u64,
}

impl RoundRow {
    pub(super) fn parse(v: &Value) -> anyhow::Result<RoundRow> {
        let f = |k: &str| v[k].as_f64().with_context(|| format!("result without a number {k}: {v}"));
        let u = |k: &str| v[k].as_u64().with_context(|| format!("result without an integer {k}: {v}"));
        let (bytes, reads, writes, block) =
            (u("bytes")?, u("rand4k_reads")?, u("write4k_writes")?, u("seq_block_kib")? * 1024);
        ensure!(block > 0, "result with seq_block_kib 0: {v}");
        Ok(RoundRow {
            device: v["name"].as_str().context("result without a name")?.to_string(),
            round: u32::try_from(u("round")?)?,
            p50_us: f("rand4k_p50_us")?,
            p99_us: f("rand4k_p99_us")?,
            seq_mb_s: f("seq_mb_s")?,
            seq_write_mb_s: f("write_mb_s")?,
            write4k_p50_us: f("write4k_p50_us")?,
            write4k_p99_us: f("write4k_p99_us")?,
            guest_us_per_page: f("seq_kernel_us_per_page")?,
            moved: bytes + (reads + writes) * 4096 + bytes / block * block,
        })
    }
}

/// The raw-device rows of guest 0's console that carry a round (every row of this bench).
pub(super) fn round_rows(console: &str) -> anyhow::Result<Vec<RoundRow>> {
    const RESULT: &str = "trapeze-bench: result ";
    console
        .lines()
        .filter_map(|l| l.find(RESULT).map(|i| l[i + RESULT.len()..].trim_end_matches('\r')))
        .map(|j| RoundRow::parse(&serde_json::from_str(j).with_context(|| format!("result line {j}"))?))
        .collect()
}

/// Host CPU seconds per GiB of `row`'s phase, by process and in all, from its marks.
pub(super) fn cpu_of(row: &RoundRow, marks: &[CpuMark], procs: &[String], hz: u64) -> anyhow::Result<CpuUse> {
    let find = |edge: Edge| {
        marks.iter().find(|m| m.edge == edge && m.phase == row.device && m.round == row.round).with_context(|| {
            format!("no cpu {} mark of {} round {} (the host missed it)", edge_name(edge), row.device, row.round)
        })
    };
    let (b, e) = (find(Edge::Begin)?, find(Edge::End)?);
    let gib = row.moved as f64 / f64::from(1u32 << 30);
    let mut by_process = BTreeMap::new();
    for p in procs {
        let at = |m: &CpuMark| m.ticks.iter().find(|(n, _)| n == p).map(|&(_, t)| t);
        let (Some(t0), Some(t1)) = (at(b), at(e)) else {
            bail!("process {p} of the {} path was not running through round {}", row.device, row.round)
        };
        by_process.insert(p.clone(), (t1.saturating_sub(t0)) as f64 / hz as f64 / gib);
    }
    Ok(CpuUse { total: by_process.values().sum(), by_process, secs: e.at.duration_since(b.at).as_secs_f64() })
}

fn edge_name(e: Edge) -> &'static str {
    match e {
        Edge::Begin => "begin",
        Edge::End => "end",
    }
}

/// One phase's host CPU: seconds per GiB moved, all the path's processes and each.
#[derive(Clone, Debug)]
pub(super) struct CpuUse {
    pub total: f64,
    pub by_process: BTreeMap<String, f64>,
    /// The phase's wall time as the host saw it.
    pub secs: f64,
}

/// The `p`-th percentile (0–100) of `v`, linearly interpolated between ranks.
pub(super) fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let pos = p / 100.0 * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(s[lo] + (s[hi] - s[lo]) * (pos - lo as f64))
}

/// {median, p10, p90, per_round, rounds} of per-round values; a value that is not finite
/// (a ratio whose denominator was 0: the guest's tick-sampled CPU time can be) is left
/// out, and `rounds` says how many counted.
pub(in crate::bench) fn spread(v: &[f64], digits: i32) -> Value {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let q = |p: f64| percentile(&v, p).map(|x| round_to(x, digits));
    json!({
        "median": q(50.0), "p10": q(10.0), "p90": q(90.0),
        "per_round": v.iter().map(|x| round_to(*x, digits)).collect::<Vec<_>>(),
        "rounds": v.len(),
    })
}

/// A figure of a row.
type Figure = fn(&RoundRow) -> f64;

/// The figures a ratio is taken of, with their JSON key.
pub(super) const KEYS: [(&str, Figure); 7] = [
    ("rand4k_p50", |r| r.p50_us),
    ("rand4k_p99", |r| r.p99_us),
    ("seq_mb_s", |r| r.seq_mb_s),
    ("write4k_p50", |r| r.write4k_p50_us),
    ("write4k_p99", |r| r.write4k_p99_us),
    ("seq_write_mb_s", |r| r.seq_write_mb_s),
    ("guest_cpu_per_page", |r| r.guest_us_per_page),
];

/// `a` over `b` of the file and swap workloads, pairing their runs in order (the k-th
/// file read of a mode is round k; the k-th swap run, swap round k): `file_write_mb_s`
/// (one run each), `file_stream_mb_s`, `file_mmap_mb_s`, `swap_time`, each {median, p10,
/// p90}; a workload either device lacks is left out (the caller fails the run on it).
pub(super) fn workload_ratios(w: &Workloads, a: &str, b: &str) -> Value {
    let mut o = serde_json::Map::new();
    let pair = |x: Vec<f64>, y: Vec<f64>| -> Vec<f64> { x.iter().zip(&y).map(|(p, q)| p / q).collect() };
    for (key, mode) in [("file_write_mb_s", "write"), ("file_stream_mb_s", "stream"), ("file_mmap_mb_s", "mmap")] {
        let runs = |d: &str| w.files.iter().filter(|f| f.device == d && f.mode == mode).map(|f| f.mb_s).collect();
        let v = pair(runs(a), runs(b));
        if !v.is_empty() {
            o.insert(key.into(), spread(&v, 3));
        }
    }
    let swaps = |d: &str| w.swaps.iter().filter(|s| s.device == d).map(|s| s.secs).collect();
    let v = pair(swaps(a), swaps(b));
    if !v.is_empty() {
        o.insert("swap_time".into(), spread(&v, 3));
    }
    Value::Object(o)
}

/// Everything of the raw-device phase: rows and CPU per round and device.
pub(super) struct Fair {
    /// The run's devices ([`devices`]).
    pub devices: Vec<&'static str>,
    pub rows: Vec<RoundRow>,
    pub cpu: Vec<(String, u32, CpuUse)>,
    pub rounds: u32,
    pub guests: u16,
}

impl Fair {
    /// Pair every (device, round) with its CPU; a missing row or mark is an error, named.
    pub(super) fn build(
        devices: Vec<&'static str>,
        rows: Vec<RoundRow>,
        marks: &[CpuMark],
        rounds: u32,
        guests: u16,
        hz: u64,
    ) -> Result<Fair, Vec<String>> {
        let mut missing = Vec::new();
        let mut cpu = Vec::new();
        for &d in &devices {
            for r in 1..=rounds {
                match rows.iter().find(|x| x.device == d && x.round == r) {
                    None => missing.push(format!("{d}: no raw-device result in round {r}")),
                    Some(row) => match cpu_of(row, marks, &path_processes(d, guests), hz) {
                        Ok(c) => cpu.push((d.to_string(), r, c)),
                        Err(e) => missing.push(format!("{d}: {e:#}")),
                    },
                }
            }
        }
        if missing.is_empty() {
            Ok(Fair { devices, rows, cpu, rounds, guests })
        } else {
            Err(missing)
        }
    }

    fn row(&self, d: &str, r: u32) -> &RoundRow {
        self.rows.iter().find(|x| x.device == d && x.round == r).expect("checked in build")
    }

    fn cpu(&self, d: &str, r: u32) -> &CpuUse {
        self.cpu.iter().find(|x| x.0 == d && x.1 == r).map(|x| &x.2).expect("checked in build")
    }

    /// `a` over `b` per round for every key and `cpu_per_gib`, as {median, p10, p90}.
    pub(super) fn ratios(&self, a: &str, b: &str) -> Value {
        let mut o = serde_json::Map::new();
        for (k, f) in KEYS {
            let v: Vec<f64> = (1..=self.rounds).map(|r| f(self.row(a, r)) / f(self.row(b, r))).collect();
            o.insert(k.to_string(), spread(&v, 3));
        }
        let v: Vec<f64> = (1..=self.rounds).map(|r| self.cpu(a, r).total / self.cpu(b, r).total).collect();
        o.insert("cpu_per_gib".into(), spread(&v, 3));
        Value::Object(o)
    }

    /// One device's figures over the rounds ({median, p10, p90} each) and its CPU.
    pub(super) fn device_json(&self, d: &str) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("device".into(), json!(d));
        o.insert("fair_rounds".into(), json!(self.rounds));
        for (k, f) in KEYS {
            let v: Vec<f64> = (1..=self.rounds).map(|r| f(self.row(d, r))).collect();
            o.insert(k.to_string(), spread(&v, 1));
        }
        let procs = path_processes(d, self.guests);
        let total: Vec<f64> = (1..=self.rounds).map(|r| self.cpu(d, r).total).collect();
        o.insert("cpu_per_gib".into(), spread(&total, 3));
        let each: serde_json::Map<String, Value> = procs
            .iter()
            .map(|p| {
                let v: Vec<f64> = (1..=self.rounds).filter_map(|r| self.cpu(d, r).by_process.get(p).copied()).collect();
                (p.clone(), json!(percentile(&v, 50.0).map(|x| round_to(x, 3))))
            })
            .collect();
        o.insert("cpu_per_gib_by_process".into(), Value::Object(each));
        o.insert("host_processes".into(), json!(procs.len()));
        let secs: Vec<f64> = (1..=self.rounds).map(|r| self.cpu(d, r).secs).collect();
        o.insert("phase_secs".into(), spread(&secs, 2));
        Value::Object(o)
    }

    /// The table: each device's medians, then the ratios gms/fair.
    pub(super) fn print(&self, ratios: &Value) {
        println!(
            "raw device, {} rounds interleaved (odd: {}, even: reversed); medians [p10-p90]:",
            self.rounds,
            self.devices.join(" ")
        );
        println!(
            "{:<10} {:>22} {:>22} {:>20} {:>22} {:>20} {:>22} {:>6}",
            "dev",
            "rand 4k p50 us",
            "rand 4k p99 us",
            "seq read MB/s",
            "write 4k p50 us",
            "seq write MB/s",
            "host CPU s/GiB",
            "procs"
        );
        for &d in &self.devices {
            let j = self.device_json(d);
            let c = |k: &str| {
                let s = &j[k];
                format!("{} [{}-{}]", num(&s["median"]), num(&s["p10"]), num(&s["p90"]))
            };
            println!(
                "{:<10} {:>22} {:>22} {:>20} {:>22} {:>20} {:>22} {:>6}",
                d,
                c("rand4k_p50"),
                c("rand4k_p99"),
                c("seq_mb_s"),
                c("write4k_p50"),
                c("seq_write_mb_s"),
                c("cpu_per_gib"),
                j["host_processes"]
            );
        }
        println!("gms / fair NBD (QEMU's NBD client to qemu-nbd on /dev/shm), per round: {}", ratio_list(ratios));
        for (a, b, what) in [
            ("gms", "ram", "gms / ram (its own floor: the same block driver on local RAM, /dev/gmsram0)"),
            ("gms_large", "fair_large", "large data set, gms / fair NBD"),
            ("gms_large", "gms", "gms, large data set / small"),
        ] {
            if self.devices.contains(&a) && self.devices.contains(&b) {
                println!("{what}, per round: {}", ratio_list(&self.ratios(a, b)));
            }
        }
        println!(
            "  (latency, time and CPU: below 1 is better for gms; MB/s: above 1 is better for gms. Host processes: gms {} \
             ({} guests' QEMU + NIC), fair 2 (guest 0's QEMU, qemu-nbd), null 1, nbd 2 (two guests' QEMU). Each \
             phase's CPU includes ~0.1 s idle before it starts.)",
            path_processes("gms", self.guests).len(),
            self.guests
        );
    }
}

/// `key median× [p10-p90]` of every ratio `ratios` has, in the table's order.
fn ratio_list(ratios: &Value) -> String {
    KEYS.iter()
        .map(|(k, _)| *k)
        .chain(["cpu_per_gib", "file_write_mb_s", "file_stream_mb_s", "file_mmap_mb_s", "swap_time"])
        .filter(|k| ratios.get(k).is_some())
        .map(|k| {
            let s = &ratios[k];
            format!("{k} {}x [{}-{}]", num(&s["median"]), num(&s["p10"]), num(&s["p90"]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn num(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 10.0 => format!("{x:.1}"),
        x => format!("{x:.3}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(d: &str, round: u32, p50: f64, seq: f64) -> Value {
        json!({"name": d, "round": round, "bytes": 1u64 << 20, "rand4k_reads": 100, "write4k_writes": 28,
            "seq_block_kib": 256, "rand4k_p50_us": p50, "rand4k_p99_us": p50 * 3.0, "seq_mb_s": seq,
            "write_mb_s": seq / 2.0, "seq_kernel_us_per_page": 5.0, "write4k_p50_us": p50 * 2.0, "write4k_p99_us": p50 * 4.0})
    }

    fn mark(edge: Edge, d: &str, r: u32, ticks: &[(&str, u64)]) -> CpuMark {
        CpuMark {
            edge,
            phase: d.into(),
            round: r,
            at: Instant::now(),
            ticks: ticks.iter().map(|&(n, t)| (n.to_string(), t)).collect(),
        }
    }

    #[test]
    fn rows_parse_with_the_bytes_they_moved() {
        let r = RoundRow::parse(&line("gms", 2, 200.0, 100.0)).unwrap();
        assert_eq!((r.round, r.moved), (2, 2 * (1 << 20) + 128 * 4096));
        assert!(RoundRow::parse(&json!({"name": "gms"})).is_err());
    }

    #[test]
    fn workload_ratios_pair_runs_in_order() {
        use super::super::workloads::{FileRun, SwapRun};
        let file = |d: &str, mode: &str, mb_s: f64| FileRun {
            device: d.into(),
            mode: mode.into(),
            bytes: 1,
            mb_s,
            pages_verified: 1,
        };
        let swap = |d: &str, secs: f64| SwapRun {
            device: d.into(),
            secs,
            mib: 24,
            avail_mb: Some(16),
            pattern: "incompressible".into(),
            zram_kib: None,
            pages_verified: 1,
            peak_swap_kib: 1,
            swap_in_kib: 1,
            swap_out_kib: 1,
            phases: Vec::new(),
        };
        let w = Workloads {
            files: vec![
                file("gms", "write", 10.0),
                file("fair", "write", 20.0),
                file("gms", "stream", 30.0),
                file("fair", "stream", 10.0),
                file("fair", "stream", 30.0),
                file("gms", "stream", 30.0),
            ],
            swaps: vec![swap("gms", 4.0), swap("fair", 2.0), swap("fair", 8.0), swap("gms", 4.0)],
            errors: Vec::new(),
        };
        let r = workload_ratios(&w, "gms", "fair");
        assert_eq!(r["file_write_mb_s"]["median"].as_f64(), Some(0.5));
        assert_eq!(r["file_stream_mb_s"]["per_round"], json!([3.0, 1.0]));
        assert_eq!(r["swap_time"]["per_round"], json!([2.0, 0.5]));
        assert!(r.get("file_mmap_mb_s").is_none(), "no mmap runs: no ratio");
    }

    #[test]
    fn the_floor_and_the_large_set_are_devices_of_their_own_on_the_same_paths() {
        assert_eq!(devices(false, false), DEVICES);
        assert_eq!(devices(true, true), ["gms", "fair", "null", "nbd", "ram", "gms_large", "fair_large"]);
        assert_eq!(path_processes("gms_large", 3), path_processes("gms", 3));
        assert_eq!(path_processes("fair_large", 2), path_processes("fair", 2));
        assert_eq!(path_processes("ram", 2), ["qemu0"]);
    }

    #[test]
    fn percentiles_interpolate() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 10.0), Some(1.4));
        assert_eq!(percentile(&v, 90.0), Some(4.6));
        assert_eq!(percentile(&[], 50.0), None);
        let s = spread(&[1.0, f64::NAN, 3.0, f64::INFINITY], 1);
        assert_eq!((s["median"].as_f64(), s["rounds"].as_u64()), (Some(2.0), Some(2)));
    }

    #[test]
    fn ratios_are_per_round_and_missing_phases_are_named() {
        let mut rows = Vec::new();
        let mut marks = Vec::new();
        let procs = |d: &str| path_processes(d, 2);
        for r in 1..=3 {
            for (d, p50) in [("gms", 200.0), ("fair", 100.0 * f64::from(r)), ("null", 50.0), ("nbd", 400.0)] {
                rows.push(RoundRow::parse(&line(d, r, p50, 100.0)).unwrap());
                let all: Vec<(&str, u64)> = ["qemu0", "nic0", "qemu1", "nic1", "qemu-nbd"].map(|n| (n, 0)).to_vec();
                marks.push(mark(Edge::Begin, d, r, &all));
                let end: Vec<(String, u64)> = all
                    .iter()
                    .map(|&(n, _)| (n.to_string(), if procs(d).iter().any(|p| p == n) { 10 } else { 0 }))
                    .collect();
                let end: Vec<(&str, u64)> = end.iter().map(|(n, t)| (n.as_str(), *t)).collect();
                marks.push(mark(Edge::End, d, r, &end));
            }
        }
        let f = Fair::build(DEVICES.to_vec(), rows.clone(), &marks, 3, 2, 100).unwrap();
        let r = f.ratios("gms", "fair");
        // gms 200 against fair 100, 200, 300: 2, 1, 0.667.
        assert_eq!(r["rand4k_p50"]["median"].as_f64(), Some(1.0));
        assert_eq!(r["rand4k_p50"]["p90"].as_f64(), Some(1.8));
        assert_eq!(r["seq_mb_s"]["median"].as_f64(), Some(1.0));
        // gms: 4 processes of 0.1 s each, fair: 2.
        assert_eq!(r["cpu_per_gib"]["median"].as_f64(), Some(2.0));
        let j = f.device_json("gms");
        assert_eq!(j["host_processes"].as_u64(), Some(4));
        assert_eq!(j["rand4k_p50"]["median"].as_f64(), Some(200.0));
        // A round without a row or a mark fails, naming it.
        let short: Vec<RoundRow> = rows.iter().filter(|x| !(x.device == "null" && x.round == 2)).cloned().collect();
        let e = Fair::build(DEVICES.to_vec(), short, &marks, 3, 2, 100).err().unwrap();
        assert_eq!(e, ["null: no raw-device result in round 2"]);
        let few: Vec<CpuMark> = marks.iter().filter(|m| !(m.phase == "fair" && m.round == 3)).cloned().collect();
        let e = Fair::build(DEVICES.to_vec(), rows, &few, 3, 2, 100).err().unwrap();
        assert!(e[0].contains("no cpu begin mark of fair round 3"), "{e:?}");
    }
}
