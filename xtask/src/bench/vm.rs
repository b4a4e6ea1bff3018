// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench vm`: 4 KiB random read latency (p50/p99) and sequential read
//! bandwidth of the GMS block device `/dev/gms0` in guest A, against the same workload on
//! Linux's own NBD client in guest A reading an `nbd-server` export (a RAM-backed tmpfs
//! file of the same size) in guest B over virtio-net between the same guests, in the same
//! run.
//!
//! Steps: the Debian `nbd-client` and `nbd-server` packages (copied into the initramfs
//! with the shared libraries `ldd` lists); `trapeze-blkbench` (guest-tools/) built
//! statically (`cargo rustc --release … -C target-feature=+crt-static`: glibc's own
//! `libc.a`, so no second Rust target has to be downloaded); the cached guest kernel;
//! `trapeze.ko` (`cargo xtask module`), whose parameters decide whether there is a GMS
//! disk to measure; then the guests (`kernel-crate/guest/bench.sh`), guest 0 measuring,
//! guest 1 serving NBD and GMS, further guests serving GMS. Guest RAM and consoles live in
//! the runtime directory of `cargo xtask vm`; the results are also appended to
//! `~/.cache/trapeze/bench/vm.jsonl`.
//!
//! Under TCG every guest instruction is emulated, so the absolute figures measure this
//! emulation; the ratios between the two devices measured in the same guests are the point.

use crate::vm::bench_guests::{self, BenchGuests};
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/bench.sh";
/// The guest tools' measuring binary.
const BLKBENCH: &str = "trapeze-blkbench";
/// The NBD programs copied into the guests (with their libraries).
const NBD_PROGRAMS: [&str; 2] = ["/usr/sbin/nbd-client", "/usr/bin/nbd-server"];
/// What a result line starts with on guest 0's console.
const RESULT: &str = "trapeze-bench: result ";

#[derive(clap::Args)]
pub struct VmBenchArgs {
    /// One JSON object per device row (device, rand4k_p50_us, rand4k_p99_us, seq_mb_s,
    /// write_mb_s, bytes, reads), then a summary object with the gms/nbd ratios.
    #[arg(long)]
    json: bool,
    /// Guests: 0 measures, 1 serves NBD and GMS, the others serve GMS.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=8))]
    guests: u16,
    /// Size of both disks in MiB (the GMS disk's gms_disk_pages / 256 and the NBD
    /// export). GMS members store 8192 pages each at most: the servers (guests - 1) must
    /// hold the disk with a quarter to spare, so up to 51 MiB with 3 guests.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    disk_mb: u32,
    /// Read-ahead of the GMS disk (`gms_disk_readahead`, pages; 0 = off): after two
    /// sequential page reads it prefetches the next N pages. Off by default: measured with
    /// 0, 8 and 32 it did not raise the sequential figure (each 256 KiB O_DIRECT request
    /// already puts its 64 pages in flight, up to GMS's operation slots, so the prefetches
    /// mostly fetch pages of the same request); see kernel-crate/README.md. Random 4 KiB
    /// reads never trigger it. NBD's workload is the same (O_DIRECT: no page-cache
    /// read-ahead on either device).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=32))]
    readahead: u32,
    /// Random 4 KiB reads per device.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    reads: u32,
    /// Seed of the random offsets and of the data pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds: the two devices take turns, each round measuring both; the figures are the
    /// medians over the rounds (the first round also writes the pattern).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Guest RAM in MiB (guest 1 holds the NBD export in tmpfs).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(128..=4096))]
    mem: u32,
    /// Seconds to wait for guest 0 to finish.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// More trapeze.ko parameters for every guest (KEY=VALUE, repeatable), e.g. a GMS
    /// memory budget.
    #[arg(long, value_name = "KEY=VALUE")]
    ko_param: Vec<String>,
    /// Internal: write the JSON lines to this file and the table to stdout. `--json` runs
    /// the bench again this way with its stdout sent to stderr, so the progress other
    /// steps print on stdout (`cargo xtask kernel`'s) never mixes with the JSON rows.
    #[arg(long, hide = true, value_name = "FILE")]
    json_out: Option<PathBuf>,
}

/// One device's figures, as trapeze-blkbench reported them.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    device: String,
    path: String,
    bytes: u64,
    reads: u64,
    p50_us: f64,
    p99_us: f64,
    seq_mb_s: f64,
    write_mb_s: Option<f64>,
    pages_verified: u64,
    /// Per-round (p50, p99, seq MB/s) when this row is the median of several rounds.
    per_round: Vec<(f64, f64, f64)>,
}

impl Row {
    fn parse(v: &Value) -> anyhow::Result<Row> {
        let f = |k: &str| v[k].as_f64().with_context(|| format!("result without a number {k}: {v}"));
        let u = |k: &str| v[k].as_u64().with_context(|| format!("result without an integer {k}: {v}"));
        Ok(Row {
            device: v["name"].as_str().context("result without a name")?.to_string(),
            path: v["device"].as_str().unwrap_or("?").to_string(),
            bytes: u("bytes")?,
            reads: u("rand4k_reads")?,
            p50_us: f("rand4k_p50_us")?,
            p99_us: f("rand4k_p99_us")?,
            seq_mb_s: f("seq_mb_s")?,
            write_mb_s: v["write_mb_s"].as_f64(),
            pages_verified: u("pages_verified")?,
            per_round: Vec::new(),
        })
    }
    fn json(&self) -> Value {
        json!({
            "device": self.device, "path": self.path, "bytes": self.bytes, "reads": self.reads,
            "rand4k_p50_us": round_to(self.p50_us, 1), "rand4k_p99_us": round_to(self.p99_us, 1),
            "seq_mb_s": round_to(self.seq_mb_s, 1), "write_mb_s": self.write_mb_s.map(|w| round_to(w, 1)),
            "pages_verified": self.pages_verified,
            "rounds": self.per_round.len(),
            "per_round": self.per_round.iter().map(|r| json!({"rand4k_p50_us": r.0, "rand4k_p99_us": r.1, "seq_mb_s": r.2})).collect::<Vec<_>>(),
        })
    }

    /// The median over rounds of one device (its rows, in order): p50, p99 and sequential
    /// bandwidth each the median of the rounds' figures; the write bandwidth of the round
    /// that wrote; pages verified summed.
    fn median_of(rows: &[Row]) -> Option<Row> {
        let first = rows.first()?;
        let median = |f: fn(&Row) -> f64| {
            let mut v: Vec<f64> = rows.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        Some(Row {
            p50_us: median(|r| r.p50_us),
            p99_us: median(|r| r.p99_us),
            seq_mb_s: median(|r| r.seq_mb_s),
            write_mb_s: rows.iter().find_map(|r| r.write_mb_s),
            pages_verified: rows.iter().map(|r| r.pages_verified).sum(),
            per_round: rows.iter().map(|r| (r.p50_us, r.p99_us, r.seq_mb_s)).collect(),
            ..first.clone()
        })
    }
}

/// `x` rounded to `digits` decimals (for the JSON rows).
fn round_to(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// What guest 0's console says: the rows and every other bench line.
fn parse_console(console: &str) -> (Vec<anyhow::Result<Row>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for l in console.lines() {
        let l = l.trim_end_matches('\r');
        if let Some(j) = l.find(RESULT).map(|i| &l[i + RESULT.len()..]) {
            rows.push(serde_json::from_str::<Value>(j).map_err(anyhow::Error::from).and_then(|v| Row::parse(&v)));
        } else if let Some(i) = l.find("trapeze-bench: ") {
            notes.push(l[i + "trapeze-bench: ".len()..].to_string());
        }
    }
    (rows, notes)
}

/// The parameter names a module declares (`parmtype=NAME:TYPE` / `parm=NAME:…` in .modinfo).
fn module_params(ko: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = ko
        .split(|&b| b == 0)
        .filter_map(|s| s.strip_prefix(b"parmtype=").or_else(|| s.strip_prefix(b"parm=")))
        .filter_map(|s| s.split(|&b| b == b':').next())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Pages one GMS member stores for others at most (`gms_budget_pages`, net.rs `HELD`).
const MAX_BUDGET_PAGES: u64 = 8192;
/// `gms_fail_ms` for every guest of the bench (the module's default is 3000): TCG guests
/// on a loaded 2-core host can go silent for seconds, and a server declared failed
/// mid-run would turn its pages into errors. `cargo xtask vm --suite` keeps the default
/// (it times the failure detection of a killed guest).
const BENCH_FAIL_MS: u32 = 10_000;

/// Whether `/dev/gms0` would be RAM-backed: the module has no `gms_disk_pages` (its GMS
/// backend), only the RAM backend's `gms_disk_mb` (whose `parm=` text says so).
fn disk_is_ram_backed(ko: &[u8]) -> bool {
    let has = |key: &[u8]| ko.split(|&b| b == 0).any(|s| s.starts_with(key));
    !has(b"parmtype=gms_disk_pages:")
        && ko
            .split(|&b| b == 0)
            .filter_map(|s| s.strip_prefix(b"parm=gms_disk_mb:"))
            .any(|d| String::from_utf8_lossy(d).contains("RAM backend"))
}

/// The insmod arguments of trapeze.ko per guest, or why the GMS disk cannot be measured.
/// With `gms_disk_pages` (the GMS backend) guest 0's `/dev/gms0` is served by the other
/// guests' memory: they get budgets that hold the whole disk with a quarter to spare,
/// which must fit `MAX_BUDGET_PAGES` each, and guest 0 reads ahead `readahead` pages
/// (`gms_disk_readahead`, if the module has it and `extra` does not set it). Without it,
/// `gms_disk_mb` (RAM backend). Every guest gets `gms_fail_ms=BENCH_FAIL_MS` (if the
/// module has it and `extra` does not set it).
fn gms_args(
    params: &[String],
    guests: u16,
    disk_mb: u32,
    readahead: u32,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let has = |p: &str| params.iter().any(|x| x == p);
    let gms_backend = has("gms_disk_pages");
    if !gms_backend && !has("gms_disk_mb") {
        return Err(format!(
            "trapeze.ko (kernel-crate, as built now) has neither gms_disk_pages nor gms_disk_mb, so no block device \
             /dev/gms0 (its parameters: {})",
            params.join(", ")
        ));
    }
    for e in extra {
        let key = e.split('=').next().unwrap_or("");
        if !e.contains('=') || !has(key) {
            return Err(format!("--ko-param {e}: trapeze.ko has no parameter {key:?} (it has: {})", params.join(", ")));
        }
    }
    let disk_pages = u64::from(disk_mb) * 256;
    let servers = u64::from(guests - 1);
    // The servers together hold the whole disk with a quarter to spare.
    let budget = (disk_pages * 5 / 4).div_ceil(servers);
    let budget_given = extra.iter().any(|e| e.starts_with("gms_budget_pages="));
    if gms_backend && !budget_given && budget > MAX_BUDGET_PAGES {
        return Err(format!(
            "a {disk_mb} MiB GMS disk ({disk_pages} pages, +25%) needs {budget} pages on each of {servers} server(s), \
             more than a member stores ({MAX_BUDGET_PAGES}): use --disk-mb {} or more --guests",
            MAX_BUDGET_PAGES * servers * 4 / 5 / 256
        ));
    }
    let members: Vec<String> = (0..guests).map(|k| k.to_string()).collect();
    Ok((0..guests)
        .map(|k| {
            let mut a = Vec::new();
            if has("node") {
                a.push(format!("node={k}"));
            }
            if has("gms_nodes") {
                a.push(format!("gms_nodes={}", members.join(",")));
            }
            if k == 0 {
                if gms_backend {
                    a.push(format!("gms_disk_pages={disk_pages}"));
                    if readahead > 0
                        && has("gms_disk_readahead")
                        && !extra.iter().any(|e| e.starts_with("gms_disk_readahead="))
                    {
                        a.push(format!("gms_disk_readahead={readahead}"));
                    }
                } else {
                    a.push(format!("gms_disk_mb={disk_mb}"));
                }
            } else if has("gms_budget_pages") && !budget_given {
                a.push(format!("gms_budget_pages={}", if gms_backend { budget } else { budget.min(MAX_BUDGET_PAGES) }));
            }
            if has("gms_fail_ms") && !extra.iter().any(|e| e.starts_with("gms_fail_ms=")) {
                a.push(format!("gms_fail_ms={BENCH_FAIL_MS}"));
            }
            a.extend(extra.iter().cloned());
            a.join(" ")
        })
        .collect())
}

/// True when the ELF file has no program interpreter (a static executable).
fn is_static_elf(b: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (size, n) = (u16_at(0x36), u16_at(0x38));
    (0..n).all(|i| {
        let o = phoff + i * size;
        b.get(o..o + 4).is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) != PT_INTERP)
    })
}

/// `trapeze-blkbench`, statically linked, release.
fn build_blkbench() -> anyhow::Result<Vec<u8>> {
    eprintln!("==> {BLKBENCH}: static release build (glibc libc.a, +crt-static)");
    crate::cargo(&[
        "rustc",
        "--locked",
        "--release",
        "-p",
        "trapeze-guest-tools",
        "--bin",
        BLKBENCH,
        "--",
        "-C",
        "target-feature=+crt-static",
        "-C",
        "strip=symbols",
    ])?;
    let path = crate::vm::bench_guests::target_dir()?.join("release").join(BLKBENCH);
    let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        is_static_elf(&bytes),
        "{} is dynamically linked (it has a program interpreter): the guests have no libc; is libc6-dev's libc.a installed?",
        path.display()
    );
    eprintln!("  {} ({} KiB, static)", path.display(), bytes.len() / 1024);
    Ok(bytes)
}

/// A program and the shared libraries `ldd` lists for it, at the same paths in the guest.
fn with_libraries(program: &str) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let out = Command::new("ldd").arg(program).output().with_context(|| format!("running ldd {program}"))?;
    ensure!(out.status.success(), "ldd {program} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(l) = text.lines().find(|l| l.contains("not found")) {
        bail!("{program} needs a library that is not installed: {}", l.trim());
    }
    let mut files = vec![(program.to_string(), PathBuf::from(program))];
    files.extend(ldd_paths(&text).into_iter().map(|p| (p.clone(), PathBuf::from(p))));
    Ok(files)
}

/// The library paths in `ldd` output: "libx.so.1 => /lib/…/libx.so.1 (0x…)" and
/// "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file.
fn ldd_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        })
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// `--json`: run the bench as a child with `--json-out FILE` and its stdout on our stderr,
/// then print the file's lines: stdout carries only the JSON rows.
fn json_via_child() -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let out = std::env::temp_dir().join(format!("trapeze-bench-vm-{}.jsonl", std::process::id()));
    let _ = fs::remove_file(&out);
    let exe = std::env::current_exe().context("finding xtask's own executable")?;
    let stderr = std::io::stderr().as_fd().try_clone_to_owned().context("duplicating stderr")?;
    let st = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--json-out")
        .arg(&out)
        .stdout(stderr)
        .status()
        .context("running the bench")?;
    let text = fs::read_to_string(&out).unwrap_or_default();
    let _ = fs::remove_file(&out);
    ensure!(st.success(), "the bench failed ({st})");
    ensure!(!text.is_empty(), "the bench wrote no JSON rows to {}", out.display());
    print!("{text}");
    Ok(())
}

pub fn run(a: VmBenchArgs) -> anyhow::Result<()> {
    if a.json && a.json_out.is_none() {
        return json_via_child();
    }
    let root = crate::workspace_root();
    eprintln!("==> NBD baseline: Debian nbd-client and nbd-server");
    crate::prereq::ensure_nbd_bench_deps()?;
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for prog in NBD_PROGRAMS {
        ensure!(Path::new(prog).is_file(), "{prog} is missing although its package is installed");
        for (guest_path, host_path) in with_libraries(prog)? {
            if seen.insert(guest_path.clone()) {
                let data = fs::read(&host_path).with_context(|| format!("reading {}", host_path.display()))?;
                files.push((guest_path, data, 0o755));
            }
        }
    }
    eprintln!("  {} and {} with {} libraries", NBD_PROGRAMS[0], NBD_PROGRAMS[1], files.len() - 2);
    files.push((format!("/usr/bin/{BLKBENCH}"), build_blkbench()?, 0o755));

    eprintln!("==> guest kernel (cargo xtask kernel)");
    let kernel = crate::kernel::ensure(None, false)?;
    eprintln!("==> trapeze.ko (cargo xtask module)");
    // Other work may be building the module in the same directory at this moment (its
    // make then trips over the other's temporary files): one retry.
    let built = crate::module::build(&kernel, false).or_else(|e| {
        eprintln!("  trapeze.ko did not build ({e:#}); trying once more in 5 s");
        std::thread::sleep(Duration::from_secs(5));
        crate::module::build(&kernel, false)
    });
    let mut ram_backend = false;
    let (modules, gms) = match built {
        Ok(ko) => {
            let bytes = fs::read(&ko)?;
            let params = module_params(&bytes);
            ram_backend = disk_is_ram_backed(&bytes);
            let gms = gms_args(&params, a.guests, a.disk_mb, a.readahead, &a.ko_param);
            match &gms {
                Ok(args) => eprintln!(
                    "  {}: GMS disk measured{}; insmod arguments per guest: {}",
                    ko.display(),
                    if ram_backend { " (its gms_disk_mb says: RAM backend)" } else { "" },
                    args.join(" | ")
                ),
                Err(why) => eprintln!("  GMS disk NOT measured: {why}"),
            }
            (vec![ko], gms)
        }
        Err(e) => {
            eprintln!("  GMS disk NOT measured: trapeze.ko did not build: {e:#}");
            (Vec::new(), Err(format!("trapeze.ko did not build: {e:#}")))
        }
    };

    let script = fs::read(root.join(SCRIPT)).with_context(|| format!("reading {SCRIPT}"))?;
    let append = (0..a.guests)
        .map(|k| {
            let mut w = format!(
                "trapeze_bench_mb={} trapeze_bench_reads={} trapeze_bench_seed={} trapeze_bench_rounds={}",
                a.disk_mb, a.reads, a.seed, a.rounds
            );
            match &gms {
                Ok(args) => w.push_str(&format!(
                    " trapeze_bench_ko={}",
                    crate::vm::bench_guests::base64_word(&args[k as usize])
                )),
                Err(_) => w.push_str(" trapeze_bench_gms_why=see_the_host_output"),
            }
            w
        })
        .collect();
    let outcomes = bench_guests::run(BenchGuests {
        guests: a.guests,
        mem_mib: a.mem,
        bzimage: kernel.bzimage(),
        modules,
        script,
        files,
        append,
        net_pair: true,
        timeout: Duration::from_secs(a.timeout),
    })?;
    let g0 = outcomes.iter().find(|o| o.idx == 0).context("guest 0 missing")?;
    let (rows, notes) = parse_console(&g0.console);
    eprintln!();
    let trouble: Vec<String> =
        outcomes.iter().flat_map(|o| o.trouble.iter().map(move |l| format!("guest {}: {l}", o.idx))).collect();
    for t in &trouble {
        eprintln!("  KERNEL TROUBLE: {t}");
    }
    for n in notes.iter().filter(|n| !n.starts_with("result ")) {
        eprintln!("  guest 0: {n}");
    }
    let mut good = Vec::new();
    for r in rows {
        good.push(r.context("a result line of guest 0 did not parse")?);
    }
    let of = |d: &str| Row::median_of(&good.iter().filter(|r| r.device == d).cloned().collect::<Vec<_>>());
    let nbd = of("nbd");
    let gms_row = of("gms");
    let gms_missing = match (&gms, &gms_row) {
        (_, Some(_)) => None,
        (Err(why), None) => Some(why.clone()),
        (Ok(_), None) => Some(
            notes
                .iter()
                .find(|n| n.starts_with("gms: "))
                .map_or("guest 0 printed no GMS result".to_string(), |n| n.trim_start_matches("gms: ").to_string()),
        ),
    };
    let Some(nbd) = nbd else {
        bail!(
            "no NBD result from guest 0{} (console {})",
            if g0.exited { "" } else { ", which did not finish" },
            g0.console_path.display()
        );
    };

    let ratios = gms_row.as_ref().map(|g| {
        json!({
            "rand4k_p50": round_to(g.p50_us / nbd.p50_us, 3),
            "rand4k_p99": round_to(g.p99_us / nbd.p99_us, 3),
            "seq_mb_s": round_to(g.seq_mb_s / nbd.seq_mb_s, 3),
        })
    });
    let summary = json!({
        "summary": "vm",
        "guests": a.guests,
        "disk_mb": a.disk_mb,
        "gms_readahead": a.readahead,
        "reads": a.reads,
        "rounds": a.rounds,
        "kernel_trouble": trouble,
        "gms_over_nbd": ratios,
        "gms_missing": gms_missing,
        "gms_backend": gms_row.as_ref().map(|_| if ram_backend { "ram" } else { "gms" }),
        "gms_disk_stats": notes.iter().find_map(|n| n.strip_prefix("gms: stats: ")),
        "gms_disk_counters": notes.iter().find_map(|n| n.strip_prefix("gms: counters: ")),
        "net_ping": notes.iter().find_map(|n| n.strip_prefix("net: ping ")),
        "note": "TCG guests on a shared 2-core host: compare the ratios, not the absolute figures",
    });
    let mut lines: Vec<Value> = vec![nbd.json()];
    if let Some(g) = &gms_row {
        lines.push(g.json());
    }
    lines.push(summary);
    save(&lines);

    if let Some(p) = &a.json_out {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    {
        println!(
            "Block devices in guest A (TCG), {} MiB each, {} random 4 KiB reads and sequential 256 KiB reads \
             with O_DIRECT per round; medians of {} rounds taken in turn; GMS read-ahead {}",
            a.disk_mb,
            a.reads,
            a.rounds,
            if a.readahead > 0 { format!("{} pages", a.readahead) } else { "off".into() }
        );
        println!("{:<6} {:>14} {:>14} {:>12} {:>12}", "device", "4K p50 (us)", "4K p99 (us)", "seq MB/s", "write MB/s");
        let row = |r: &Row| {
            println!(
                "{:<6} {:>14.1} {:>14.1} {:>12.1} {:>12}",
                r.device,
                r.p50_us,
                r.p99_us,
                r.seq_mb_s,
                r.write_mb_s.map_or("-".into(), |w| format!("{w:.1}"))
            );
            if r.per_round.len() > 1 {
                let each = |f: fn(&(f64, f64, f64)) -> f64| {
                    r.per_round.iter().map(|x| format!("{:.0}", f(x))).collect::<Vec<_>>().join(" / ")
                };
                println!(
                    "         rounds: p50 {} us; p99 {} us; seq {} MB/s",
                    each(|x| x.0),
                    each(|x| x.1),
                    each(|x| x.2)
                );
            }
        };
        row(&nbd);
        match (&gms_row, &gms_missing) {
            (Some(g), _) => {
                row(g);
                if let Some(c) = notes.iter().find_map(|n| n.strip_prefix("gms: counters: ")) {
                    println!("         {}", c.trim_end());
                }
                if ram_backend {
                    println!(
                        "  (trapeze.ko says gms_disk_mb is a RAM backend: this row is blk-mq + local RAM, \
                         not network memory yet)"
                    );
                }
                println!(
                    "gms / nbd: 4K p50 {:.2}x, 4K p99 {:.2}x, sequential bandwidth {:.2}x",
                    g.p50_us / nbd.p50_us,
                    g.p99_us / nbd.p99_us,
                    g.seq_mb_s / nbd.seq_mb_s
                );
            }
            (None, Some(why)) => println!("gms    not measured: {why}"),
            (None, None) => {}
        }
        println!("(nbd: Linux's NBD client in guest A, Debian nbd-server in guest B on a tmpfs file, virtio-net over QEMU UDP sockets)");
    }
    Ok(())
}

/// Append the run's lines to ~/.cache/trapeze/bench/vm.jsonl (best effort).
fn save(lines: &[Value]) {
    let Some(home) = std::env::var_os("HOME") else {
        return;
    };
    let dir = PathBuf::from(home).join(".cache/trapeze/bench");
    let when = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let text: String = lines.iter().map(|l| format!("{{\"unix_time\":{when},\"row\":{l}}}\n")).collect();
    let path = dir.join("vm.jsonl");
    let r = fs::create_dir_all(&dir).and_then(|_| {
        use std::io::Write;
        fs::OpenOptions::new().create(true).append(true).open(&path)?.write_all(text.as_bytes())
    });
    match r {
        Ok(()) => eprintln!("results appended to {}", path.display()),
        Err(e) => eprintln!("note: could not append the results to {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"tool":"trapeze-blkbench","name":"nbd","device":"/dev/nbd0","bytes":67108864,"write_mb_s":12.5,"rand4k_reads":2000,"rand4k_p50_us":410.2,"rand4k_p99_us":1900.0,"rand4k_mean_us":500.0,"seq_block_kib":256,"seq_mb_s":35.5,"pages_verified":18384}"#;

    #[test]
    fn console_results_and_notes_are_found() {
        let console = format!(
            "[    3.0] random kernel line\r\ntrapeze-bench: nbd: /dev/nbd0 connected, 64 MiB\r\ntrapeze-bench: result {LINE}\r\n\
             trapeze-bench: gms: /dev/gms0 does not exist after insmod trapeze.ko node=0 gms_disk_mb=64\r\n"
        );
        let (rows, notes) = parse_console(&console);
        assert_eq!(rows.len(), 1);
        let r = rows.into_iter().next().unwrap().unwrap();
        assert_eq!((r.device.as_str(), r.bytes, r.reads), ("nbd", 64 << 20, 2000));
        assert_eq!((r.p50_us, r.p99_us, r.seq_mb_s, r.write_mb_s), (410.2, 1900.0, 35.5, Some(12.5)));
        assert_eq!(notes.len(), 2);
        assert!(notes[1].starts_with("gms: /dev/gms0 does not exist"));
        let (bad, _) = parse_console("trapeze-bench: result {\"name\":\"nbd\"}\n");
        assert!(bad[0].is_err(), "a result without figures is an error");
    }

    #[test]
    fn rounds_combine_into_medians() {
        let (rows, _) = parse_console(&format!("trapeze-bench: result {LINE}\n"));
        let r = rows.into_iter().next().unwrap().unwrap();
        let round = |p50, p99, seq, w| Row { p50_us: p50, p99_us: p99, seq_mb_s: seq, write_mb_s: w, ..r.clone() };
        let m = Row::median_of(&[
            round(300.0, 900.0, 30.0, Some(9.0)),
            round(100.0, 5000.0, 10.0, None),
            round(200.0, 700.0, 20.0, None),
        ])
        .unwrap();
        assert_eq!((m.p50_us, m.p99_us, m.seq_mb_s, m.write_mb_s), (200.0, 900.0, 20.0, Some(9.0)));
        assert_eq!((m.pages_verified, m.per_round.len()), (3 * 18384, 3));
        let even = Row::median_of(&[round(100.0, 1.0, 1.0, None), round(300.0, 3.0, 3.0, None)]).unwrap();
        assert_eq!(even.p50_us, 200.0);
        assert!(Row::median_of(&[]).is_none());
        let j = m.json();
        assert_eq!(j["rounds"], 3);
        assert_eq!(j["per_round"][1]["rand4k_p50_us"], 100.0);
    }

    #[test]
    fn ldd_output_gives_the_library_files() {
        let text =
            "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgnutls.so.30 => /lib/x86_64-linux-gnu/libgnutls.so.30 (0x7f9c)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f9b)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f9e)\n\
                    \tlibmissing.so.1 => not found\n";
        assert_eq!(
            ldd_paths(text),
            ["/lib/x86_64-linux-gnu/libgnutls.so.30", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
        );
    }

    #[test]
    fn module_params_come_from_modinfo() {
        let ko = b"\x7fELF junk\0parm=node:this node's id\0parmtype=node:int\0parmtype=gms_disk_mb:int\0license=GPL\0";
        assert_eq!(module_params(ko), ["gms_disk_mb", "node"]);
        assert!(!disk_is_ram_backed(ko));
        let ram = b"\0parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0)\0";
        assert!(disk_is_ram_backed(ram));
        // A module with the GMS backend's gms_disk_pages is measured on GMS, even though
        // it still has the RAM backend's gms_disk_mb.
        let both =
            b"\0parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0)\0parmtype=gms_disk_pages:int\0";
        assert!(!disk_is_ram_backed(both));
    }

    #[test]
    fn gms_args_need_a_disk_parameter_and_name_each_node() {
        let without: Vec<String> = ["node", "ping_peer", "stats"].map(String::from).to_vec();
        let why = gms_args(&without, 2, 64, 0, &[]).unwrap_err();
        assert!(why.contains("neither gms_disk_pages nor gms_disk_mb") && why.contains("ping_peer"), "{why}");
        // RAM backend: gms_disk_mb on guest 0.
        let ram: Vec<String> = ["node", "gms_disk_mb", "gms_nodes", "gms_budget_pages"].map(String::from).to_vec();
        let args = gms_args(&ram, 3, 32, 8, &["gms_budget_pages=100".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_mb=32 gms_budget_pages=100");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=100");
        assert!(gms_args(&ram, 2, 32, 0, &["nope=1".into()]).unwrap_err().contains("no parameter \"nope\""));
        // GMS backend: gms_disk_pages on guest 0, budgets that hold the disk + 25%.
        let gms: Vec<String> =
            ["node", "gms_disk_mb", "gms_disk_pages", "gms_nodes", "gms_budget_pages"].map(String::from).to_vec();
        let args = gms_args(&gms, 3, 3, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=768");
        // 768 pages * 1.25 = 960 over two servers.
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=480");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=480");
        // 32 MiB: 8192 pages * 1.25 = 10240 over two servers, within 8192 each.
        let args = gms_args(&gms, 3, 32, 32, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=5120");
        let why = gms_args(&gms, 3, 52, 0, &[]).unwrap_err();
        assert!(why.contains("needs 8320 pages") && why.contains("--disk-mb 51"), "{why}");
        assert!(gms_args(&gms, 4, 52, 0, &[]).is_ok(), "three servers hold 52 MiB");
        // Read-ahead goes to guest 0 only, when the module has the parameter and the user
        // did not set it.
        let ra: Vec<String> = ["node", "gms_disk_pages", "gms_nodes", "gms_budget_pages", "gms_disk_readahead"]
            .map(String::from)
            .to_vec();
        let args = gms_args(&ra, 3, 32, 16, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192 gms_disk_readahead=16");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=5120");
        let args = gms_args(&ra, 3, 32, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192");
        let args = gms_args(&ra, 3, 32, 16, &["gms_disk_readahead=4".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192 gms_disk_readahead=4");
    }

    #[test]
    fn every_guest_gets_the_bench_failure_timeout_unless_given() {
        let p: Vec<String> =
            ["node", "gms_disk_pages", "gms_nodes", "gms_budget_pages", "gms_fail_ms"].map(String::from).to_vec();
        let args = gms_args(&p, 3, 3, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=768 gms_fail_ms=10000");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=480 gms_fail_ms=10000");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=480 gms_fail_ms=10000");
        // Given with --ko-param: that value only, once.
        let args = gms_args(&p, 2, 3, 0, &["gms_fail_ms=20000".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1 gms_disk_pages=768 gms_fail_ms=20000");
        assert_eq!(args[1], "node=1 gms_nodes=0,1 gms_budget_pages=960 gms_fail_ms=20000");
    }

    #[test]
    fn static_executables_have_no_interpreter() {
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me), "the test binary is dynamically linked");
        assert!(!is_static_elf(b"not an elf"));
        // A minimal ELF64 header with two program headers at 64, 56 bytes each.
        let elf = |types: [u32; 2]| {
            let mut b = vec![0u8; 64 + 2 * 56];
            b[..5].copy_from_slice(b"\x7fELF\x02");
            b[0x20] = 64;
            b[0x36] = 56;
            b[0x38] = 2;
            for (i, t) in types.iter().enumerate() {
                b[64 + i * 56..68 + i * 56].copy_from_slice(&t.to_le_bytes());
            }
            b
        };
        assert!(is_static_elf(&elf([1, 1])), "PT_LOAD only");
        assert!(!is_static_elf(&elf([6, 3])), "PT_PHDR + PT_INTERP");
    }
}
