// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench vm`: the GMS block device `/dev/gms0` in guest A against Linux's own
//! NBD client in guest A reading an `nbd-server` export (a RAM-backed tmpfs file of the
//! same size) in guest B over virtio-net between the same guests, in the same run, the
//! same workloads on each: 4 KiB random read latency (p50/p99) and sequential read
//! bandwidth of the raw device; a file on ext2 read with streaming `read()` and through
//! `mmap` after the page cache was dropped (the GMS paper's Fig. 4); and the wall time of
//! a program whose memory is 1.5× its memory cgroup's limit, swapping onto the device, beside
//! the same program swapping onto zram, all in RAM, and at half the RAM (`swap_baselines.rs`). Every
//! page is checked, and any I/O error of any phase (kernel log, the disk's page errors,
//! a tool's failure) fails the bench, naming the phase.
//!
//! Steps: the Debian `nbd-client` and `nbd-server` packages (copied into the initramfs
//! with the shared libraries `ldd` lists); `trapeze-blkbench`, `trapeze-filebench` and
//! `trapeze-memhog` (guest-tools/) built statically (`cargo rustc --release … -C target-feature=+crt-static`: glibc's own
//! `libc.a`, so no second Rust target has to be downloaded); the cached guest kernel;
//! `trapeze.ko` (`cargo xtask module`), whose parameters decide whether there is a GMS
//! disk to measure; then the guests (`kernel-crate/guest/bench.sh`), guest 0 measuring,
//! guest 1 serving NBD and GMS, further guests serving GMS. Guest RAM and consoles live in
//! the runtime directory of `cargo xtask vm`; the results are also appended to
//! `~/.cache/trapeze/bench/vm.jsonl`.
//!
//! Then `mac_cost_vm` (`mac.rs`): fresh guests per session, `/dev/gms0` measured with
//! the link under a cluster key and without, in interleaved pairs of sessions (A-B-B-A);
//! and `replication_cost` (`replication.rs`): fresh guests per session, a writer keeping
//! one copy of each page and then two, in interleaved pairs of sessions.
//!
//! The headline is against the fair baseline (`fair.rs`, issue 33): a virtio-blk disk in
//! guest 0 whose QEMU backend is QEMU's own NBD client reading `qemu-nbd` on the host from
//! `/dev/shm`, beside a `null-co` virtio-blk floor, all four devices interleaved round by
//! round with the host CPU time of each path's processes (`gms_over_fair_nbd`). NBD over
//! virtio-net between the guests stays as the secondary row (`gms_over_nbd`).
//!
//! Under TCG every guest instruction is emulated, so the absolute figures measure this
//! emulation; the ratios between the two devices measured in the same guests are the point.

mod fair;
pub(super) use fair::spread;
mod guest_files;
mod mac;
mod module_args;
mod replication;
mod report;
mod swap_baselines;
mod workloads;

use crate::vm::bench_guests::{self, BenchGuests};
use anyhow::{bail, ensure, Context};
use guest_files::{build_tool, TOOLS};
use module_args::{disk_is_ram_backed, gms_args, module_params};
use report::{parse_console, round_to, Row};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use workloads::Workloads;

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/bench.sh";
/// The NBD programs copied into the guests (with their libraries).
const NBD_PROGRAMS: [&str; 2] = ["/usr/sbin/nbd-client", "/usr/bin/nbd-server"];

#[derive(clap::Args)]
pub struct VmBenchArgs {
    /// One JSON object per device row (device, rand4k_p50_us, rand4k_p99_us, seq_mb_s,
    /// write_mb_s, seq_kernel_us_per_page and write_kernel_us_per_page (guest 0's kernel
    /// CPU per page), bytes, reads, file_stream_mb_s, file_mmap_mb_s, swap_secs,
    /// swap_phase_secs, …), then a summary object with the gms/nbd ratios (gms_over_nbd:
    /// rand4k_p50, rand4k_p99, seq_mb_s, swap_time, swap_time_per_mib, file_stream_mb_s,
    /// file_mmap_mb_s, and swap_phase_time: each phase of the swap workload), the link
    /// MAC's cost (mac_cost_vm, mac_cost_vm_seq, mac_vm; see --mac-pairs) and the
    /// replication and repair figures; the swap baselines (gms_over_zram: swap_time,
    /// swap_time_compressible; gms_over_ram.swap_time: against the workload all in RAM;
    /// swap_half_over_ram: /dev/gms0 at 50 % local memory against all in RAM; zram_over_ram;
    /// swap_baselines: each run's figures).
    #[arg(long)]
    json: bool,
    /// Guests: 0 measures, 1 serves NBD and GMS, the others serve GMS. Two by default: one
    /// GMS server against one NBD server.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(2..=8))]
    guests: u16,
    /// Size of both disks in MiB (the GMS disk's gms_disk_pages / 256 and the NBD
    /// export). The servers (guests - 1) hold the disk with a quarter to spare, in their
    /// RAM (--mem; a member stores 1 GiB at most) beside the NBD export's tmpfs. The swap
    /// workload must fit in it.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..=1024))]
    disk_mb: u32,
    /// The large data set in MiB (0: none): `/dev/gms0` and the fair disk are this large,
    /// and each round also measures their first `--large-mb` MiB (rows gms_large and
    /// fair_large: `gms_over_fair_nbd_large`, `gms_large_over_small`). The default is 4x
    /// the answer tables' reach (12,288 pages: 48 MiB, the small set), so most of its reads
    /// miss the holder's answer table. More than --disk-mb.
    #[arg(long, default_value_t = 192, value_parser = clap::value_parser!(u32).range(0..=1024))]
    large_mb: u32,
    /// Read-ahead of the GMS disk (`gms_disk_readahead`, pages; 0 = off): after two
    /// reads of consecutive pages the store reads the next N ahead (`gms::store::ahead`).
    /// Off by default: the old backend's read-ahead, measured with 0, 8 and 32 on
    /// 2026-11-21, did not raise the sequential figure (each 256 KiB O_DIRECT request
    /// already puts its 64 pages in flight), and the store's has not been measured here
    /// yet. Random 4 KiB reads never trigger it. NBD's workload is the same (O_DIRECT: no
    /// page-cache read-ahead on either device).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=32))]
    readahead: u32,
    /// Random 4 KiB reads per device.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    reads: u32,
    /// Seed of the random offsets and of the data pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds: the four devices (gms, fair, null, nbd) take turns, each round measuring
    /// each, the order reversed every other round; ratios are per round, reported as median
    /// with p10-p90 (5 at least for a figure to quote; fewer only while developing).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Random 4 KiB writes timed per device and round (after the pattern write).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    writes: u32,
    /// Size in MiB of the file written on ext2 on each device and read back by stream and
    /// by mmap each round (at most three quarters of --disk-mb).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=768))]
    file_mb: u32,
    /// RAM in MiB of the swap workload's memory cgroup (`memory.max`); the workload uses
    /// 1.5 times that, which must fit in --disk-mb.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(4..=512))]
    swap_avail_mb: u32,
    /// Runs of the swap workload on each device, the order of the two devices alternating
    /// from run to run (nbd gms, gms nbd, ...); a device's figures are the mean of its runs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10))]
    swap_rounds: u32,
    /// Guest RAM in MiB (guest 1 holds the NBD export in tmpfs).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(128..=4096))]
    mem: u32,
    /// Pairs of replication sessions (fresh guests writing with one copy, then two) for
    /// `replication_cost`; 0 skips them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=10))]
    replication_pairs: u32,
    /// Pairs of MAC sessions (fresh guests like the main run's, their link under a cluster
    /// key or without one, the order alternating pair by pair: A-B-B-A) for `mac_cost_vm`
    /// (random 4 KiB read p50 of /dev/gms0, key on over off: the headline) and
    /// `mac_cost_vm_seq` (sequential read time); 0 skips them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=10))]
    mac_pairs: u32,
    /// Size in MiB of the disk the replication sessions write.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    replication_mb: u32,
    /// Random 4 KiB writes each replication session times.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    replication_writes: u32,
    /// Repair sessions for `repair_mb_s` (fresh guests: a --replication-mb disk written with
    /// two copies on three servers, one server killed, re-replication timed); 0 skips them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=5))]
    repair_sessions: u32,
    /// Seconds to wait for guest 0 to finish.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// More trapeze.ko parameters for every guest (KEY=VALUE, repeatable), e.g. a GMS
    /// memory budget.
    #[arg(long, value_name = "KEY=VALUE")]
    ko_param: Vec<String>,
    /// Also draw the figure (p50/p99 and sequential MB/s, gms against nbd) into DIR/vm.svg
    /// and keep the JSON lines it was drawn from in DIR/vm.json.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Trace the main run's NICs into DIR/nodeK.trace (`trapeze-nic --trace`) and print
    /// where request/reply round trips spent their time (`trapeze-nic trace-report`).
    #[arg(long, value_name = "DIR")]
    nic_trace: Option<PathBuf>,
    /// Internal: write the JSON lines to this file and the table to stdout. `--json` runs
    /// the bench again this way with its stdout sent to stderr, so the progress other
    /// steps print on stdout (`cargo xtask kernel`'s) never mixes with the JSON rows.
    #[arg(long, hide = true, value_name = "FILE")]
    json_out: Option<PathBuf>,
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
    ensure!(
        u64::from(a.file_mb) * 4 <= u64::from(a.disk_mb) * 3,
        "--file-mb {}: the file must fit in three quarters of the {} MiB disk (ext2's own blocks take the rest)",
        a.file_mb,
        a.disk_mb
    );
    ensure!(
        a.swap_avail_mb * 3 / 2 <= a.disk_mb,
        "--swap-avail-mb {}: the workload (1.5 times it, {} MiB) must fit in the {} MiB disk (use a larger \
         --disk-mb or a smaller --swap-avail-mb)",
        a.swap_avail_mb,
        a.swap_avail_mb * 3 / 2,
        a.disk_mb
    );
    ensure!(
        a.swap_avail_mb * 4 <= a.mem,
        "--swap-avail-mb {}: at most a quarter of the guest's --mem {} MiB",
        a.swap_avail_mb,
        a.mem
    );
    ensure!(
        a.large_mb == 0 || a.large_mb > a.disk_mb,
        "--large-mb {}: the large data set must be larger than the small one (--disk-mb {}), or 0 for none",
        a.large_mb,
        a.disk_mb
    );
    // The GMS and fair disks hold the large data set; the small one is their start.
    let disk_size = a.disk_mb.max(a.large_mb);
    let root = crate::workspace_root();
    eprintln!("==> NBD baselines: Debian nbd-client and nbd-server (guests), qemu-nbd (host)");
    crate::prereq::ensure_nbd_bench_deps()?;
    for prog in NBD_PROGRAMS {
        ensure!(Path::new(prog).is_file(), "{prog} is missing although its package is installed");
    }
    let mut files = crate::vm::programs_with_libraries(&NBD_PROGRAMS)?;
    eprintln!("  {} and {} with {} libraries", NBD_PROGRAMS[0], NBD_PROGRAMS[1], files.len() - 2);
    for tool in TOOLS {
        files.push((format!("/usr/bin/{tool}"), build_tool(tool)?, 0o755));
    }

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
    let mut params = Vec::new();
    let (modules, gms) = match built {
        Ok(ko) => {
            let bytes = fs::read(&ko)?;
            params = module_params(&bytes);
            ram_backend = disk_is_ram_backed(&bytes);
            let gms = gms_args(&params, a.guests, disk_size, a.readahead, &a.ko_param);
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

    // /dev/gms0's floor: a RAM disk beside it in guest 0 (/dev/gmsram0), if the module
    // makes one (its gms_disk_mb beside gms_disk_pages); the MAC sessions go without.
    let ram_floor = !ram_backend && ["gms_disk_mb", "gms_disk_pages"].iter().all(|p| params.iter().any(|x| x == p));
    let main_args = gms.clone().map(|mut args| {
        if ram_floor {
            args[0].push_str(&format!(" gms_disk_mb={}", a.disk_mb));
        }
        args
    });
    let devices = fair::devices(ram_floor && main_args.is_ok(), a.large_mb > 0);
    let script = fs::read(root.join(SCRIPT)).with_context(|| format!("reading {SCRIPT}"))?;
    let append = (0..a.guests)
        .map(|k| {
            let mut w = format!(
                "trapeze_bench_mb={} trapeze_bench_reads={} trapeze_bench_seed={} trapeze_bench_rounds={} \
                 trapeze_bench_file_mb={} trapeze_bench_swap_avail_mb={} trapeze_bench_swap_rounds={} \
                 trapeze_bench_writes={} trapeze_bench_large_mb={}",
                a.disk_mb, a.reads, a.seed, a.rounds, a.file_mb, a.swap_avail_mb, a.swap_rounds, a.writes, a.large_mb
            );
            match &main_args {
                Ok(args) => w.push_str(&format!(
                    " trapeze_bench_ko={}",
                    crate::vm::bench_guests::base64_word(&args[k as usize])
                )),
                Err(_) => w.push_str(" trapeze_bench_gms_why=see_the_host_output"),
            }
            w
        })
        .collect();
    let sessions = replication::Sessions {
        pairs: a.replication_pairs,
        disk_mb: a.replication_mb,
        writes: a.replication_writes,
        seed: a.seed,
        mem_mib: a.mem,
        bzimage: kernel.bzimage(),
        modules: modules.clone(),
        script: script.clone(),
        files: files.clone(),
        params: params.clone(),
    };
    let hz = crate::vm::cpu_marks::ticks_per_second()?;
    eprintln!("==> fair baseline: qemu-nbd on the host serving {disk_size} MiB of /dev/shm");
    let host_nbd = fair::HostNbd::start(disk_size)?;
    eprintln!("  qemu-nbd pid {} on 127.0.0.1:{}", host_nbd.pid(), host_nbd.port);
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
        kill_on: None,
        nic_trace: a.nic_trace.clone(),
        no_key: false,
        guest0_qemu: fair::guest0_disks(host_nbd.port, disk_size),
        cpu_marks: Some(vec![("qemu-nbd".to_string(), host_nbd.pid())]),
    })?;
    drop(host_nbd);
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
    let work = Workloads::parse(&notes).context("a file or swap result line of guest 0 did not parse")?;
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
        let mut r = json!({
            "rand4k_p50": round_to(g.p50_us / nbd.p50_us, 3),
            "rand4k_p99": round_to(g.p99_us / nbd.p99_us, 3),
            "seq_mb_s": round_to(g.seq_mb_s / nbd.seq_mb_s, 3),
        });
        merge(&mut r, work.ratios());
        r
    });
    // Every phase's errors, then what a finished run must have reported.
    let mut failures: Vec<String> = work.errors.iter().map(|e| format!("I/O error or failure in phase {e}")).collect();
    if !g0.exited {
        failures.push(format!("guest 0 did not finish within {} s (console {})", a.timeout, g0.console_path.display()));
    }
    if failures.is_empty() {
        failures.extend(work.missing("nbd"));
        if gms_row.is_some() {
            failures.extend(work.missing("gms"));
        }
    }
    if failures.is_empty() {
        failures.extend(work.missing("fair"));
        failures.extend(swap_baselines::missing(&work));
    }
    if let Some(why) = &gms_missing {
        failures.push(format!("gms: no /dev/gms0 measured ({why})"));
    }
    if ram_backend {
        failures.push("gms: trapeze.ko's /dev/gms0 is RAM-backed (no gms_disk_pages): it would not measure GMS".into());
    }
    // The fair baseline: every device in every round, with its CPU marks.
    let fair = match fair::round_rows(&g0.console) {
        Ok(rows) => fair::Fair::build(devices.clone(), rows, &g0.marks, a.rounds, a.guests, hz)
            .map_err(|m| failures.extend(m))
            .ok(),
        Err(e) => {
            failures.push(format!("a raw-device result of guest 0 did not parse: {e:#}"));
            None
        }
    };
    let fair_ratios = fair.as_ref().map(|f| {
        let mut r = f.ratios("gms", "fair");
        merge(&mut r, fair::workload_ratios(&work, "gms", "fair"));
        r
    });
    // What the link MAC costs /dev/gms0: sessions of their own, keyed and not, after the
    // comparison.
    let gms_measured = gms_row.is_some() && !ram_backend;
    let mac = match &gms {
        Ok(args) => extra_sessions(
            a.mac_pairs,
            "MAC",
            "mac_cost_vm",
            (!gms_measured).then_some("no GMS disk in this run"),
            &mut failures,
            format!(
                "{} pairs of sessions, /dev/gms0 with the cluster key on and off (A-B-B-A), {} MiB, {} reads",
                a.mac_pairs, a.disk_mb, a.reads
            ),
            || {
                mac::MacRun {
                    sessions: &sessions,
                    pairs: a.mac_pairs,
                    args,
                    disk_mb: a.disk_mb,
                    reads: a.reads,
                    writes: a.writes,
                    seed: a.seed,
                    hz,
                }
                .run()
            },
        ),
        Err(_) => None,
    };
    // What a second copy costs the writer: sessions of their own, after the comparison.
    let replicas = (!(gms_measured && params.iter().any(|p| p == "gms_replicas")))
        .then_some("no GMS disk with gms_replicas in this run");
    let replication = extra_sessions(
        a.replication_pairs,
        "replication",
        "replication_cost",
        replicas,
        &mut failures,
        format!("{} pairs of sessions, {} MiB written with one copy, then two", a.replication_pairs, a.replication_mb),
        || sessions.run(),
    );
    // The repair rate after a server dies: sessions of their own too.
    let repair = extra_sessions(
        a.repair_sessions,
        "repair",
        "repair_mb_s",
        replicas,
        &mut failures,
        format!(
            "{} session(s), {} MiB written with two copies on three servers, one killed",
            a.repair_sessions, a.replication_mb
        ),
        || sessions.repairs(a.repair_sessions),
    );
    let swap_base = swap_baselines::ratios(&work);
    // gms_over_ram: the raw device against /dev/gmsram0, and the swap workload against
    // itself all in RAM.
    let mut gms_over_ram =
        fair.as_ref().filter(|f| f.devices.contains(&"ram")).map(|f| f.ratios("gms", "ram")).unwrap_or(json!({}));
    merge(&mut gms_over_ram, json!({ "swap_time": swap_base["gms_over_ram_swap"] }));
    let mut summary = json!({
        "summary": "vm",
        "guests": a.guests,
        "disk_mb": a.disk_mb,
        "gms_readahead": a.readahead,
        "reads": a.reads,
        "rounds": a.rounds,
        "file_mb": a.file_mb,
        "swap_avail_mb": a.swap_avail_mb,
        "swap_mb": a.swap_avail_mb * 3 / 2,
        "swap_rounds": a.swap_rounds,
        "io_errors": work.errors.len(),
        "kernel_trouble": trouble,
        "gms_over_fair_nbd": fair_ratios,
        "gms_over_nbd_per_round": fair.as_ref().map(|f| f.ratios("gms", "nbd")),
        "fair_over_null": fair.as_ref().map(|f| f.ratios("fair", "null")),
        "large_mb": a.large_mb,
        "answer_table_reach_pages": trapeze_firmware::iface::layout::ANSWER_ENTRIES,
        "gms_over_ram": gms_over_ram,
        "gms_over_zram": swap_base["gms_over_zram"],
        "swap_half_over_ram": swap_base["swap_half_over_ram"],
        "zram_over_ram": swap_base["zram_over_ram"],
        "zram_compression": swap_base["zram_compression"],
        "swap_baselines": swap_baselines::RUNS.iter().map(|&d| (d.to_string(), work.swap_keys(d))).collect::<serde_json::Map<_, _>>(),
        "gms_over_fair_nbd_large": fair.as_ref().filter(|f| f.devices.contains(&"gms_large")).map(|f| f.ratios("gms_large", "fair_large")),
        "gms_large_over_small": fair.as_ref().filter(|f| f.devices.contains(&"gms_large")).map(|f| f.ratios("gms_large", "gms")),
        "host_processes": devices.iter().map(|d| (d.to_string(), json!(fair::path_processes(d, a.guests).len()))).collect::<serde_json::Map<_, _>>(),
        "fair_baseline": "fair: virtio-blk in guest 0, QEMU's NBD client (iothread, poll-max-ns 32768, cache.direct) \
            to qemu-nbd on the host (TCP 127.0.0.1, --cache=none, a /dev/shm file); null: virtio-blk on null-co",
        "gms_over_nbd": ratios,
        "gms_missing": gms_missing,
        "gms_backend": gms_row.as_ref().map(|_| if ram_backend { "ram" } else { "gms" }),
        "gms_disk_stats": notes.iter().find_map(|n| n.strip_prefix("gms: stats: ")),
        "gms_disk_counters": notes.iter().find_map(|n| n.strip_prefix("gms: counters: ")),
        "net_ping": notes.iter().find_map(|n| n.strip_prefix("net: ping ")),
        "note": "TCG guests on a shared 2-core host: compare the ratios, not the absolute figures",
    });
    for r in [&mac, &replication, &repair].into_iter().flatten() {
        merge(&mut summary, r.clone());
    }
    let row = |r: &report::Row| {
        let mut j = r.json();
        merge(&mut j, work.row_keys(&r.device));
        j
    };
    let mut lines: Vec<Value> = vec![row(&nbd)];
    if let Some(g) = &gms_row {
        lines.push(row(g));
    }
    lines.extend(of("fair").map(|r| row(&r)));
    for d in ["null", "ram", "gms_large", "fair_large"] {
        lines.extend(of(d).map(|r| r.json()));
    }
    if let Some(f) = &fair {
        for l in &mut lines {
            let d = l["device"].as_str().unwrap_or_default().to_string();
            merge(l, json!({ "rounds_spread": f.device_json(&d) }));
        }
    }
    lines.push(summary);
    // The device table, then the file and swap workloads' rows for `devices`.
    let print_tables = |devices: &[&str]| {
        report::print_table(
            &report::Heading { disk_mb: a.disk_mb, reads: a.reads, rounds: a.rounds, readahead: a.readahead },
            &nbd,
            gms_row.as_ref(),
            gms_missing.as_ref(),
            &notes,
            ram_backend,
        );
        work.print_table(devices);
        swap_baselines::print(&work, &swap_base);
        if let (Some(f), Some(r)) = (&fair, &fair_ratios) {
            f.print(r);
        }
    };
    if !failures.is_empty() {
        print_tables(&["nbd", "gms", "fair"]);
        for f in &failures {
            eprintln!("  FAILED: {f}");
        }
        bail!("the vm bench failed ({} problem(s)); the first: {}", failures.len(), failures[0]);
    }
    save(&lines);
    if let Some(dir) = &a.plot {
        super::plot::write_json(dir, "vm", &lines)?;
        super::plot::vm::write(dir, &lines)?;
    }

    if let Some(p) = &a.json_out {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    print_tables(&["nbd", "gms", "fair"]);
    if let Some(m) = &mac {
        let r = |k: &str| {
            let s = &m["mac_vm"][k];
            format!("{}x [{}-{}]", s["median"], s["p10"], s["p90"])
        };
        let us = |side: &str, k: &str| m["mac_vm"][side][k]["median"].as_f64().unwrap_or(f64::NAN);
        println!(
            "link MAC in the guests (cluster key on / off, {} pairs of fresh-guest sessions, A-B-B-A): mac_cost_vm {} \
             (the headline: random 4 KiB read p50 {:.0} / {:.0} us), mac_cost_vm_seq {} (sequential read time; \
             {:.1} / {:.1} MB/s); 4 KiB write p50 {}; the NICs' host CPU per second {}",
            a.mac_pairs,
            r("rand4k_p50"),
            us("on", "rand4k_p50_us"),
            us("off", "rand4k_p50_us"),
            r("seq_time"),
            us("on", "seq_mb_s"),
            us("off", "seq_mb_s"),
            r("write4k_p50"),
            r("nic_cpu_per_sec")
        );
    }
    if let Some(r) = &replication {
        let us = |side: &str| r["replication"][side]["write4k_p50_us"].as_f64().unwrap_or(f64::NAN);
        let mb = |side: &str| r["replication"][side]["write_mb_s"].as_f64().unwrap_or(f64::NAN);
        println!(
            "replication: 4 KiB write p50 {:.0} us with one copy, {:.0} us with two: replication_cost {}x; \
             pattern write {:.1} / {:.1} MB/s: {}x (medians of {} pairs)",
            us("r1"),
            us("r2"),
            r["replication_cost"],
            mb("r1"),
            mb("r2"),
            r["replication_cost_seq"],
            a.replication_pairs
        );
    }
    if let Some(r) = &repair {
        println!(
            "repair: {} MB/s of copies re-made after a server was killed (median of {} session(s), every page read back checked)",
            r["repair_mb_s"], a.repair_sessions
        );
    }
    if let Some(r) = &ratios {
        let f = |k: &str| r[k].as_f64().map_or("-".into(), |v| format!("{v:.2}x"));
        println!(
            "gms / nbd: swap workload time {} ({} per MiB swapped), file read() {}, file mmap {}; 0 I/O errors in every phase",
            f("swap_time"),
            f("swap_time_per_mib"),
            f("file_stream_mb_s"),
            f("file_mmap_mb_s")
        );
    }
    Ok(())
}

/// Add `extra`'s keys to the JSON object `into`.
fn merge(into: &mut Value, extra: Value) {
    if let (Some(o), Value::Object(e)) = (into.as_object_mut(), extra) {
        o.extend(e);
    }
}

/// `n` sessions of fresh guests after the comparison (`run`), measuring `key`: none when
/// none are asked, when the run lacks what they measure (`missing` says what, printed),
/// or when the comparison already failed; a session that fails is one of `failures`,
/// named `what`.
#[allow(clippy::too_many_arguments)]
fn extra_sessions(
    n: u32,
    what: &str,
    key: &str,
    missing: Option<&str>,
    failures: &mut Vec<String>,
    heading: String,
    run: impl FnOnce() -> anyhow::Result<Value>,
) -> Option<Value> {
    if n == 0 {
        return None;
    }
    if let Some(m) = missing {
        eprintln!("  {key} NOT measured: {m}");
        return None;
    }
    if !failures.is_empty() {
        return None;
    }
    eprintln!("==> {what}: {heading}");
    run().map_err(|e| failures.push(format!("{what}: {e:#}"))).ok()
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
