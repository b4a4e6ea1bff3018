// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm`: boot QEMU guests (TCG) on the cached kernel, each with its own
//! virtual NIC as a PCI device.
//!
//! Per guest K, in a runtime directory (`$XDG_RUNTIME_DIR/trapeze/vm-PID`, else
//! `/dev/shm/trapeze-UID/vm-PID`, so guest RAM is never written to disk):
//! * `guestK.ram` — the guest's RAM, a `memory-backend-file,share=on` created by xtask at its
//!   final size, which the NIC maps for DMA (guest-physical address = DMA address);
//! * a `trapeze-nic` process, node K, on one UDP link with every other guest's NIC, serving
//!   `nicK.ivshmem.sock` as an ivshmem-doorbell server (BAR2 = NIC memory, 2 MSI-X vectors);
//!   it must listen before QEMU starts, so xtask waits for its "ivshmem server" line;
//! * `qemu-system-x86_64 -machine pc -accel tcg` with `-device ivshmem-doorbell` on that
//!   socket, the busybox initramfs and the serial console in `guestK.console`.
//!
//! The initramfs (`kernel-crate/guest/init` as `/init`, busybox, the kernel's modules and
//! any `--module` in `/lib/modules`, optionally `--script` as `/etc/trapeze/run.sh`) is a
//! newc cpio written here and gzipped. `--cmd` reaches the guest base64-encoded as
//! `trapeze_cmd=` on the kernel command line; `trapeze_guest=K` and `trapeze_guests=N`
//! tell each guest who it is.
//!
//! `--module-test` builds `trapeze.ko` (`cargo xtask module`), boots at least two guests
//! with it and `kernel-crate/guest/ping.sh` as their script: guest 0 loads it as node 0
//! and answers pings, every other guest K loads it as node K with `ping_peer=0`, which
//! sends node 0 a control message + 4 KB payload at load and checks the pong byte for
//! byte; then every guest unloads it. It passes when each guest's console shows the
//! endpoint up, its side of the ping, a clean `rmmod` (NIC halted, frames freed), the
//! script's status 0, no oops/BUG/WARNING, and a clean power-off.
//!
//! `--blk-test` builds `trapeze.ko` and boots one guest with `kernel-crate/guest/blk.sh`,
//! which tests the GMS block device `/dev/gms0` on its RAM backend (`gms_disk_mb=`): it
//! passes when the console shows the script's PASS lines and its total with no FAIL, the
//! script's status 0, no oops/BUG/WARNING, and a clean power-off.
//!
//! `--suite` is the guest suite (`kernel-crate/guest/suite.sh`, a stage of `cargo xtask
//! test`): three GMS members; guest 0 (A) puts an ext2 file system on `/dev/gms0` on the
//! GMS backend, writes files, verifies their md5sums after dropping its caches and
//! remounting, writes probe pages, then prints `trapeze-suite: KILL node 2`; xtask then
//! SIGKILLs guest 2's QEMU and NIC (C, a server) and A checks that C's pages fail with
//! I/O errors in bounded time while B's still read correctly, then unloads under load.
//! It passes when A's PASS lines and total show no FAIL, guest 1 (B) loaded and unloaded
//! cleanly, guest 2 was killed on request, no console shows an oops/BUG/WARNING, and A
//! and B power off; it prints the lines the issue asks for (module load, data verified,
//! failure case, clean unload).
//!
//! A drop guard kills every child and removes RAM files, sockets and the initramfs on every
//! return, error or not; SIGINT, SIGTERM and SIGHUP end the run through it (once the
//! children start, a handler turns them into an error). Children are also started through
//! `setpriv --pdeathsig KILL`, so they die with xtask even if it is SIGKILLed. Console and
//! process logs stay until the next `cargo xtask vm`, which removes the runtime directories
//! of runs whose xtask is gone (and anything such a run left behind).

pub mod bench_guests;
pub mod host_gmsd;

use anyhow::{bail, ensure, Context};
use std::fs;
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by the SIGINT/SIGTERM/SIGHUP handler; the waiting loops turn it into an error.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn check_interrupted() -> anyhow::Result<()> {
    ensure!(!INTERRUPTED.load(Ordering::Relaxed), "interrupted by a signal: stopping the guests");
    Ok(())
}

/// The ivshmem-doorbell device's PCI id (vendor:device) as the guest lists it.
pub const IVSHMEM_PCI_ID: &str = "1af4:1110";
/// MSI-X vectors of the NIC device.
pub const VECTORS: u32 = 2;
/// The guest's `/init`, relative to the workspace root.
const INIT: &str = "kernel-crate/guest/init";
/// The kernel prints this when `poweroff -f` reaches ACPI.
const POWER_DOWN: &str = "reboot: Power down";
/// What `--smoke` runs in the guest: load and unload the Rust sample module.
const SMOKE_CMD: &str = "insmod /lib/modules/rust_minimal.ko && rmmod rust_minimal";
/// How long a NIC may take to start listening.
const NIC_START: Duration = Duration::from_secs(20);
/// The guests' script under `--module-test`, relative to the workspace root.
const MODULE_TEST_SCRIPT: &str = "kernel-crate/guest/ping.sh";
/// Shortest power-off wait under `--module-test` (boot, load, ping retries, unload).
const MODULE_TEST_TIMEOUT: u64 = 120;
/// The guest's script under `--blk-test`, relative to the workspace root.
const BLK_TEST_SCRIPT: &str = "kernel-crate/guest/blk.sh";
/// Shortest power-off wait under `--blk-test` (boot, three loads, 8 MiB round trips under
/// TCG, a 2 s request timeout).
const BLK_TEST_TIMEOUT: u64 = 300;
/// The guests' script under `--suite`, relative to the workspace root.
const SUITE_SCRIPT: &str = "kernel-crate/guest/suite.sh";
/// Shortest power-off wait under `--suite` (boot, mke2fs and 2 MiB through GMS under TCG,
/// failure detection, the bounded reads after the kill, two unloads).
const SUITE_TIMEOUT: u64 = 300;
/// Under `--suite`: the guest whose console asks for the kill, the line, and the victim.
const SUITE_KILL: (u16, &str, u16) = (0, "trapeze-suite: KILL node 2", 2);
/// Console text that means the kernel is in trouble.
const KERNEL_TROUBLE: [&str; 6] =
    ["Kernel panic", "Oops", "BUG:", "WARNING:", "Call Trace", "general protection fault"];

#[derive(clap::Args)]
pub struct VmArgs {
    /// Guests to boot, each with its own virtual NIC (all NICs on one UDP link).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    guests: u16,
    /// Boot (by default one) guest and check that it lists the NIC (PCI 1af4:1110), loads
    /// and unloads the Rust sample module and powers off cleanly; exit status 0 or 1.
    #[arg(long)]
    smoke: bool,
    /// Shell commands every guest runs before powering off.
    #[arg(long, value_name = "SHELL")]
    cmd: Option<String>,
    /// A script embedded in the initramfs as /etc/trapeze/run.sh, run after --cmd.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(64..=4096))]
    mem: u32,
    /// Seconds to wait for every guest to power off before killing them (an error).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Extra words for the kernel command line.
    #[arg(long, value_name = "WORDS")]
    append: Option<String>,
    /// Do not echo the guests' console output (from /init on) to the terminal while they
    /// run; print the lines that matter at the end (what --smoke does).
    #[arg(long)]
    quiet: bool,
    /// A kernel module (.ko) to add to the guests' /lib/modules (repeatable), e.g.
    /// kernel-crate/trapeze.ko from `cargo xtask module`.
    #[arg(long, value_name = "KO")]
    module: Vec<PathBuf>,
    /// Build trapeze.ko and test it in (at least) two guests: guest 0 loads it as node 0,
    /// the others as node K pinging node 0 with a 4 KB payload; each checks its side,
    /// unloads it and powers off. Exit status 0 or 1, with the console lines that matter.
    #[arg(long, conflicts_with_all = ["smoke", "script", "cmd"])]
    module_test: bool,
    /// Build trapeze.ko and test its GMS block device /dev/gms0 on the RAM backend in one
    /// guest (`kernel-crate/guest/blk.sh`: data round trips with dropped caches, O_DIRECT,
    /// a tar file round trip, rmmod while the disk is open, reload, failing and stalling
    /// pages). Exit status 0 or 1, with the console lines that matter.
    #[arg(long, conflicts_with_all = ["smoke", "script", "cmd", "module_test"])]
    blk_test: bool,
    /// Build trapeze.ko and run the guest suite on three guests (`kernel-crate/guest/suite.sh`):
    /// ext2 on /dev/gms0 on GMS with data verified after dropping caches, a server guest
    /// SIGKILLed mid-run (I/O errors, not a hang), unload under load. Exit status 0 or 1,
    /// with the console lines that matter.
    #[arg(long, conflicts_with_all = ["smoke", "script", "cmd", "module_test", "blk_test"])]
    suite: bool,
    /// Build trapeze.ko and gmsd: one guest (node 0) and a host `gmsd` (node 1) on the
    /// guests' UDP link in one GMS cluster (`kernel-crate/guest/gmsd.sh`): the guest's
    /// /dev/gms0 pages land on the daemon and read back; `gms stat` on the host shows them
    /// held and `gms get` reads each one. Exit status 0 or 1.
    #[arg(long, conflicts_with_all = ["smoke", "script", "cmd", "module_test", "blk_test", "suite"])]
    gmsd_test: bool,
}

pub fn run(mut a: VmArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    if a.module_test {
        // Three guests: ping, then NetRPC echo, GMS put/get between guests and an unload
        // with requests in flight (`rpc_phase_ok`).
        a.guests = a.guests.max(3);
        a.timeout = a.timeout.max(MODULE_TEST_TIMEOUT);
        a.script = Some(crate::workspace_root().join(MODULE_TEST_SCRIPT));
    }
    if a.blk_test {
        a.timeout = a.timeout.max(BLK_TEST_TIMEOUT);
        a.script = Some(crate::workspace_root().join(BLK_TEST_SCRIPT));
    }
    if a.suite {
        a.guests = 3;
        a.timeout = a.timeout.max(SUITE_TIMEOUT);
        a.script = Some(crate::workspace_root().join(SUITE_SCRIPT));
    }
    if a.gmsd_test {
        a.guests = 1;
        a.timeout = a.timeout.max(240);
        a.script = Some(crate::workspace_root().join(host_gmsd::SCRIPT));
    }
    let qemu = which("qemu-system-x86_64")
        .context("qemu-system-x86_64 not found (cargo xtask kernel installs qemu-system-x86)")?;

    eprintln!("==> guest kernel (cargo xtask kernel)");
    let kernel = crate::kernel::ensure(None, false)?;
    let bzimage = kernel.bzimage();
    let mut extra_modules = a.module.clone();
    if a.module_test {
        extra_modules.push(crate::module::build(&kernel, false)?);
    }
    if a.blk_test || a.suite {
        extra_modules.push(crate::module::build(&kernel, false)?);
    }
    if a.gmsd_test {
        extra_modules.push(crate::module::build(&kernel, false)?);
        eprintln!("==> host gmsd: cargo build -p trapeze-gmsd");
        crate::cargo(&["build", "--locked", "-p", "trapeze-gmsd"])?;
    }

    eprintln!("==> virtual NIC: cargo build -p trapeze-vnic --bin trapeze-nic");
    crate::prereq::ensure_emulator_build_deps()?;
    crate::cargo(&["build", "--locked", "-p", "trapeze-vnic", "--bin", "trapeze-nic"])?;
    let nic_bin = target_dir()?.join("debug/trapeze-nic");
    ensure!(nic_bin.exists(), "{} was not built", nic_bin.display());

    // From here on a signal must not kill xtask before its drop guard has run.
    ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed)).context("installing the signal handler")?;
    let runtime = runtime_base()?;
    prune_stale(&runtime);
    let dir = runtime.join(format!("vm-{}", std::process::id()));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cluster = Cluster::new(dir.clone());
    if a.suite {
        let (watch, line, victim) = SUITE_KILL;
        cluster.kill_on = Some(KillOn { watch, line, victim, done: None });
    }

    eprintln!("==> initramfs");
    let script = match &a.script {
        Some(p) => Some(fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let mut modules = kernel.paths.modules();
    for m in &extra_modules {
        ensure!(m.extension().is_some_and(|e| e == "ko"), "--module {}: not a .ko file", m.display());
        ensure!(m.is_file(), "--module {}: no such file", m.display());
        modules.push(m.clone());
    }
    let initrd = build_initramfs(&dir, &modules, script.as_deref())?;
    cluster.remove_on_drop.push(initrd.clone());

    let cmd = match (&a.cmd, a.smoke) {
        (Some(c), true) => Some(format!("{SMOKE_CMD}\n{c}")),
        (Some(c), false) => Some(c.clone()),
        (None, true) => Some(SMOKE_CMD.to_string()),
        (None, false) => None,
    };
    // Under --gmsd-test one more port: the host daemon's (node = a.guests), in every NIC's peer list.
    let ports = free_udp_ports(a.guests as usize + usize::from(a.gmsd_test))?;
    let setpriv = setpriv_pdeathsig();
    if !setpriv {
        eprintln!("note: setpriv --pdeathsig is not available; children outlive a killed xtask");
    }

    eprintln!("==> {} guest(s): virtual NICs, then QEMU (TCG, {} MiB each)", a.guests, a.mem);
    for k in 0..a.guests {
        cluster.add_guest(k, a.mem);
        cluster.start_nic(k, &nic_bin, &nic_args(k, &ports), setpriv)?;
    }
    let host_gmsd = if a.gmsd_test {
        let peers: Vec<(u16, u16)> = (0..a.guests).map(|k| (k, ports[k as usize])).collect();
        Some(host_gmsd::HostGmsd::start(
            &target_dir()?.join("debug"),
            &dir,
            a.guests,
            ports[a.guests as usize],
            &peers,
        )?)
    } else {
        None
    };
    for k in 0..a.guests {
        let mut append = format!("console=ttyS0 panic=-1 trapeze_guest={k} trapeze_guests={}", a.guests);
        if let Some(c) = &cmd {
            append.push_str(&format!(" trapeze_cmd={}", base64(c.as_bytes())));
        }
        if let Some(x) = &a.append {
            append.push(' ');
            append.push_str(x);
        }
        cluster.start_qemu(k, &qemu, &bzimage, &initrd, &append, setpriv)?;
    }
    for g in &cluster.guests {
        eprintln!(
            "guest {}: console {}  (qemu log {}, nic log {})",
            g.idx,
            g.console.display(),
            g.qemu_log.display(),
            g.nic_log.display()
        );
    }

    // The smoke test prints the console lines that matter at the end instead.
    if let (Some(h), Some(g)) = (&host_gmsd, cluster.guests.first()) {
        h.watch(g.console.clone(), Duration::from_secs(a.timeout));
    }
    let summary_only = a.quiet || a.smoke || a.module_test || a.blk_test || a.suite || a.gmsd_test;
    let all_off = cluster.wait(Duration::from_secs(a.timeout), !summary_only)?;
    eprintln!();
    let mode = if a.module_test {
        Mode::ModuleTest
    } else if a.suite {
        Mode::Suite
    } else if a.blk_test {
        Mode::BlkTest
    } else if a.smoke {
        Mode::Smoke
    } else {
        Mode::Plain
    };
    let mut failures = Vec::new();
    let mut suite_lines = Vec::new();
    if mode == Mode::Suite {
        let (_, _, victim) = SUITE_KILL;
        let killed = cluster.guests.iter().any(|g| g.idx == victim && g.killed.is_some());
        if !killed {
            failures.push(format!("guest {victim} was never killed (guest 0 did not ask, or asked too late)"));
        }
    }
    for g in &cluster.guests {
        let console = fs::read_to_string(&g.console).unwrap_or_default();
        let report = GuestReport::of(&console, g.exit.as_ref().map(|e| e.0), g.idx);
        let took = match (&g.exit, g.killed) {
            (Some(e), _) => format!("{:.1?}", e.1),
            (None, Some(d)) => format!("SIGKILLed by xtask after {d:.1?}"),
            (None, None) => "still running".to_string(),
        };
        let ok = if mode == Mode::Suite { report.suite_ok(g.idx, g.killed.is_some()) } else { report.ok(mode) };
        let rpc = (mode == Mode::ModuleTest && cluster.guests.len() >= 3).then(|| rpc_phase_ok(&console, g.idx));
        let ok = ok && rpc.as_ref().is_none_or(|r| r.0);
        if let Some((_, what)) = &rpc {
            eprintln!("guest {}: netrpc/gms phase: {what}", g.idx);
        }
        let what = match mode {
            Mode::ModuleTest => format!(
                "trapeze.ko up: {}; {}: {}; rmmod clean: {}; script status 0: {}; kernel quiet: {}",
                yes_no(report.trapeze_up),
                if g.idx == 0 { "answered a ping" } else { "pong verified" },
                yes_no(report.ping_ok),
                yes_no(report.trapeze_removed),
                yes_no(report.script_ok),
                yes_no(!report.kernel_trouble),
            ),
            Mode::Suite if g.idx == 0 => format!(
                "suite checks: {} passed, {} failed{}; script status 0: {}; kernel quiet: {}",
                report.suite_passed,
                report.suite_failed,
                if report.suite_done { "" } else { " (script did not finish)" },
                yes_no(report.script_ok),
                yes_no(!report.kernel_trouble),
            ),
            Mode::Suite => format!(
                "server: trapeze.ko up: {}; {}; kernel quiet: {}",
                yes_no(report.trapeze_up),
                if g.killed.is_some() {
                    "killed mid-run as asked".to_string()
                } else {
                    format!(
                        "rmmod clean: {}; script status 0: {}",
                        yes_no(report.trapeze_removed),
                        yes_no(report.script_ok)
                    )
                },
                yes_no(!report.kernel_trouble),
            ),
            Mode::BlkTest => format!(
                "gms0 checks: {} passed, {} failed{}; script status 0: {}; kernel quiet: {}",
                report.blk_passed,
                report.blk_failed,
                if report.blk_done { "" } else { " (script did not finish)" },
                yes_no(report.script_ok),
                yes_no(!report.kernel_trouble),
            ),
            _ => format!(
                "Rust module: {}",
                if report.rust_loaded {
                    "loaded and unloaded"
                } else if a.smoke {
                    "NOT loaded"
                } else {
                    "-"
                }
            ),
        };
        eprintln!(
            "guest {}: {} PCI {}: {}; {what}; powered off: {} ({}, QEMU {})",
            g.idx,
            if ok { "ok  " } else { "FAIL" },
            IVSHMEM_PCI_ID,
            yes_no(report.nic_listed),
            yes_no(report.powered_off),
            took,
            g.exit.as_ref().map_or("killed".to_string(), |e| e.0.to_string()),
        );
        if mode == Mode::Suite && g.idx == 0 {
            suite_lines = suite_summary(&console);
        }
        if summary_only {
            for l in console.lines().filter(|l| interesting(l)) {
                eprintln!("    | {}", printable(l));
            }
        }
        if !ok {
            failures.push(format!("guest {} (console {})", g.idx, g.console.display()));
        }
    }
    if !suite_lines.is_empty() {
        eprintln!("guest suite (guest 0):");
        for l in &suite_lines {
            eprintln!("  {l}");
        }
    }
    if let Some(h) = host_gmsd {
        // The guest's own checks (writes and reads through the daemon) and the host's.
        let console =
            cluster.guests.first().map(|g| fs::read_to_string(&g.console).unwrap_or_default()).unwrap_or_default();
        let lines: Vec<String> = console.lines().map(printable).filter(|l| l.starts_with("trapeze-gmsd: ")).collect();
        for l in &lines {
            eprintln!("    | {l}");
        }
        if lines.iter().any(|l| l.contains(": FAIL ")) || !lines.iter().any(|l| l.ends_with("passed, 0 failed")) {
            failures.push("guest 0's gmsd checks (a FAIL line, or no total)".into());
        }
        let (found, failed) = (h.found.lock().unwrap().clone(), h.failed.lock().unwrap().clone());
        for l in &found {
            eprintln!("host: {l}");
        }
        if found.len() < 2 || !failed.is_empty() {
            failures.push(format!(
                "host gmsd checks: {}",
                if failed.is_empty() { "did not run".to_string() } else { failed.join("; ") }
            ));
        }
        let tail = h.stop();
        if !failures.is_empty() {
            eprintln!("host gmsd log (tail):\n{tail}");
        }
    }
    drop(cluster);
    eprintln!("runtime dir {} (RAM files and sockets removed; logs kept until the next run)", dir.display());
    if !all_off {
        bail!("guests did not power off within {} s: {}", a.timeout, failures.join(", "));
    }
    let name = match mode {
        Mode::ModuleTest => "module test",
        Mode::BlkTest => "blk test",
        Mode::Suite => "guest suite",
        Mode::Smoke => "smoke test",
        Mode::Plain => "vm run",
    };
    if !failures.is_empty() {
        bail!("{name} failed: {}", failures.join(", "));
    }
    eprintln!(
        "xtask vm: {} in {:.1?}",
        if mode == Mode::Plain { "all guests powered off".to_string() } else { format!("{name} passed") },
        t0.elapsed()
    );
    Ok(())
}

/// `trapeze-nic` arguments for guest `k`'s NIC: node `k` on the UDP link at `ports[k]`, every
/// other port a peer (node id = index; a host gmsd's port may follow the guests').
fn nic_args(k: u16, ports: &[u16]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--name".into(),
        format!("vm{}-g{k}", std::process::id()),
        "--node".into(),
        k.to_string(),
        "--link".into(),
        format!("udp:127.0.0.1:{}", ports[k as usize]),
    ];
    args.extend(
        ports
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != k as usize)
            .flat_map(|(j, p)| ["--peer".to_string(), format!("{j}=127.0.0.1:{p}")]),
    );
    args
}

/// The `--module-test` phases after the ping with 3 guests or more
/// (`kernel-crate/guest/ping.sh`): guest 0 answered every echo call; every other guest's
/// NetRPC echo test and GMS put/get test passed (checked byte for byte in the module), and
/// it unloaded with calls and getpages in flight, all failed cleanly. (passed, summary).
fn rpc_phase_ok(console: &str, guest: u16) -> (bool, String) {
    let has = |t: &str| console.lines().any(|l| l.contains(t));
    if guest == 0 {
        let served = console.lines().find_map(|l| {
            let t = l.split("trapeze-test: node 0 answered ").nth(1)?;
            let mut w = t.split(' ');
            let got: u32 = w.next()?.parse().ok()?;
            let want: u32 = w.nth(1)?.parse().ok()?;
            Some((got, want))
        });
        let ok = served.is_some_and(|(g, w)| w > 0 && g >= w);
        let what = served.map_or("no echo count".to_string(), |(g, w)| format!("answered {g} of {w} echo calls"));
        return (ok, what);
    }
    let echo = has("trapeze: netrpc echo with node 0: PASSED");
    let gms = has("trapeze: gms test: PASSED");
    let inflight = has("were in flight at unload: failed (0 calls, 0 operations left)");
    // Guest 1 also checks /dev/gms0 on the GMS backend.
    let disk = guest != 1 || has("trapeze-test: node 1: gms0 on GMS") && has("read back O_DIRECT") && !has(": FAILED");
    let ok = echo && gms && inflight && disk;
    (ok, format!(
        "echo (wait, continuation, deferred): {}; gms put/get verified: {}; unload with requests in flight failed them cleanly: {}{}",
        yes_no(echo),
        yes_no(gms),
        yes_no(inflight),
        if guest == 1 { format!("; /dev/gms0 on GMS: {}", yes_no(disk)) } else { String::new() }
    ))
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

/// What a run checks in each guest.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Smoke,
    ModuleTest,
    BlkTest,
    Suite,
}

/// What the issue asks the suite's log to show, from guest 0's console: each item with
/// the PASS/FAIL lines behind it.
fn suite_summary(console: &str) -> Vec<String> {
    let lines: Vec<String> = console
        .lines()
        .map(printable)
        .filter(|l| l.starts_with("trapeze-suite: PASS ") || l.starts_with("trapeze-suite: FAIL "))
        .collect();
    let mut out = Vec::new();
    for (item, keys) in [
        ("module load", &["module loaded", "servers B and C"][..]),
        ("data verified", &["mke2fs", "mount -t ext2", "files written", "data verified", "probe pages"][..]),
        ("failure case", &["failure case"][..]),
        ("clean unload", &["clean unload"][..]),
    ] {
        let hits: Vec<&String> = lines.iter().filter(|l| keys.iter().any(|k| l.contains(k))).collect();
        let ok = !hits.is_empty() && hits.iter().all(|l| l.contains(": PASS "));
        out.push(format!("{item}: {}", if ok { "PASS" } else { "FAIL" }));
        out.extend(hits.iter().map(|l| format!("    {l}")));
    }
    out
}

/// What a guest's console shows.
struct GuestReport {
    nic_listed: bool,
    rust_loaded: bool,
    powered_off: bool,
    /// trapeze.ko brought the endpoint up.
    trapeze_up: bool,
    /// trapeze.ko's remove halted the NIC and freed its frames.
    trapeze_removed: bool,
    /// Guest 0 answered a ping; any other guest had its pong verified.
    ping_ok: bool,
    /// The guest's script ended with status 0.
    script_ok: bool,
    kernel_trouble: bool,
    /// `--blk-test`: the script's PASS and FAIL lines, and whether it printed its total.
    blk_passed: usize,
    blk_failed: usize,
    blk_done: bool,
    /// `--suite`, guest 0: the same for `trapeze-suite:` lines.
    suite_passed: usize,
    suite_failed: usize,
    suite_done: bool,
}

/// A script's `PREFIX PASS …` and `PREFIX FAIL …` lines, and whether it printed its total
/// (`PREFIX N passed, M failed`).
fn pass_fail(console: &str, prefix: &str) -> (usize, usize, bool) {
    let lines = || console.lines().map(printable);
    let pass = format!("{prefix}PASS ");
    let fail = format!("{prefix}FAIL ");
    (
        lines().filter(|l| l.starts_with(&pass)).count(),
        lines().filter(|l| l.starts_with(&fail)).count(),
        lines().any(|l| {
            l.strip_prefix(prefix).is_some_and(|t| {
                t.ends_with(" failed") && t.split(' ').next().is_some_and(|n| n.parse::<u32>().is_ok())
            })
        }),
    )
}

impl GuestReport {
    fn of(console: &str, exit: Option<ExitStatus>, guest: u16) -> Self {
        let kernel_trouble = KERNEL_TROUBLE.iter().any(|t| console.contains(t));
        let (suite_passed, suite_failed, suite_done) = pass_fail(console, "trapeze-suite: ");
        GuestReport {
            suite_passed,
            suite_failed,
            suite_done,
            nic_listed: console.lines().any(|l| l.contains("trapeze-guest: pci ") && l.contains(IVSHMEM_PCI_ID)),
            rust_loaded: console.contains("Rust minimal sample (init)")
                && console.contains("Rust minimal sample (exit)"),
            powered_off: console.contains(POWER_DOWN)
                && !console.contains("Kernel panic")
                && exit.is_some_and(|s| s.success()),
            trapeze_up: console.lines().any(|l| l.contains("trapeze: ") && l.contains(" up: endpoint live")),
            trapeze_removed: console.contains("removed: NIC halted, frames freed"),
            ping_ok: console.lines().any(|l| {
                l.contains("trapeze: ")
                    && if guest == 0 {
                        l.contains("answered with a pong")
                    } else {
                        l.contains("bytes verified byte for byte")
                    }
            }),
            script_ok: console.contains("/etc/trapeze/run.sh exited with status 0"),
            kernel_trouble,
            blk_passed: console.lines().filter(|l| l.starts_with("trapeze-blk: PASS ")).count(),
            blk_failed: console.lines().filter(|l| l.starts_with("trapeze-blk: FAIL ")).count(),
            blk_done: console.lines().any(|l| {
                l.strip_prefix("trapeze-blk: ").is_some_and(|t| {
                    t.ends_with(" failed") && t.split(' ').next().is_some_and(|n| n.parse::<u32>().is_ok())
                })
            }),
        }
    }
    /// `--suite`: guest 0 passed every check; a server loaded the module, and either was
    /// the guest killed on request or unloaded cleanly and powered off. No kernel trouble.
    fn suite_ok(&self, guest: u16, killed: bool) -> bool {
        if self.kernel_trouble || !self.nic_listed {
            return false;
        }
        if guest == 0 {
            return self.powered_off
                && self.suite_done
                && self.suite_passed > 0
                && self.suite_failed == 0
                && self.script_ok;
        }
        if guest == SUITE_KILL.2 {
            return killed && self.trapeze_up;
        }
        self.powered_off && self.trapeze_up && self.trapeze_removed && self.script_ok
    }

    fn ok(&self, mode: Mode) -> bool {
        let base = self.nic_listed && self.powered_off;
        match mode {
            Mode::Plain => base,
            Mode::Smoke => base && self.rust_loaded,
            Mode::BlkTest => {
                base && self.blk_done
                    && self.blk_passed > 0
                    && self.blk_failed == 0
                    && self.script_ok
                    && !self.kernel_trouble
            }
            Mode::ModuleTest => {
                base && self.trapeze_up
                    && self.trapeze_removed
                    && self.ping_ok
                    && self.script_ok
                    && !self.kernel_trouble
            }
            Mode::Suite => false,
        }
    }
}

/// A console line without terminal escape sequences (the BIOS clears the screen) and
/// other control characters.
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // ESC [ params letter, or ESC + one character.
                if chars.next_if_eq(&'[').is_some() {
                    while chars.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
                } else {
                    chars.next();
                }
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// Console lines worth repeating in the summary.
fn interesting(l: &str) -> bool {
    [
        "trapeze-guest:",
        "trapeze-test:",
        "trapeze-blk:",
        "trapeze-suite:",
        "trapeze: ",
        "rust_minimal",
        "Linux version",
        "reboot:",
        "ivshmem",
    ]
    .iter()
    .chain(KERNEL_TROUBLE.iter())
    .any(|k| l.contains(k))
}

/// One guest: its NIC, its QEMU and their files.
struct Guest {
    idx: u16,
    ram: PathBuf,
    ivshmem: PathBuf,
    control: PathBuf,
    console: PathBuf,
    qemu_log: PathBuf,
    nic_log: PathBuf,
    mem_mib: u32,
    nic: Option<Child>,
    qemu: Option<Child>,
    started: Option<Instant>,
    /// How QEMU ended and how long it ran.
    exit: Option<(ExitStatus, Duration)>,
    /// Console bytes already echoed.
    echoed: usize,
    /// Echoing starts at /init's first line.
    echoing: bool,
    /// More QEMU arguments for this guest (e.g. a virtio-net link, `cargo xtask bench vm`).
    qemu_extra: Vec<String>,
    /// Killed on purpose (`--suite`): how long after its start.
    killed: Option<Duration>,
}

/// Kill guest `victim` (QEMU and NIC, SIGKILL) once guest `watch`'s console shows `line`.
struct KillOn {
    watch: u16,
    line: &'static str,
    victim: u16,
    done: Option<Instant>,
}

/// The guests of one run; dropping it kills every child and removes the run's big files.
struct Cluster {
    dir: PathBuf,
    guests: Vec<Guest>,
    remove_on_drop: Vec<PathBuf>,
    kill_on: Option<KillOn>,
}

impl Cluster {
    fn new(dir: PathBuf) -> Self {
        Cluster { dir, guests: Vec::new(), remove_on_drop: Vec::new(), kill_on: None }
    }

    fn add_guest(&mut self, idx: u16, mem_mib: u32) {
        let f = |s: &str| self.dir.join(s);
        let g = Guest {
            idx,
            ram: f(&format!("guest{idx}.ram")),
            ivshmem: f(&format!("nic{idx}.ivshmem.sock")),
            control: f(&format!("nic{idx}.control.sock")),
            console: f(&format!("guest{idx}.console")),
            qemu_log: f(&format!("guest{idx}.qemu.log")),
            nic_log: f(&format!("nic{idx}.log")),
            mem_mib,
            nic: None,
            qemu: None,
            started: None,
            exit: None,
            echoed: 0,
            echoing: false,
            qemu_extra: Vec::new(),
            killed: None,
        };
        self.remove_on_drop.extend([g.ram.clone(), g.ivshmem.clone(), g.control.clone()]);
        self.guests.push(g);
    }

    fn guest(&mut self, idx: u16) -> &mut Guest {
        self.guests.iter_mut().find(|g| g.idx == idx).expect("guest added")
    }

    /// Create the guest's RAM file (the NIC maps it; QEMU reuses a file of the same size),
    /// start its NIC and wait until its ivshmem server listens.
    fn start_nic(&mut self, idx: u16, nic_bin: &Path, args: &[String], setpriv: bool) -> anyhow::Result<()> {
        let g = self.guest(idx);
        let mut cmd = child_command(nic_bin, setpriv);
        cmd.args(args)
            .arg("--control")
            .arg(&g.control)
            .arg("--ivshmem")
            .arg(&g.ivshmem)
            .args(["--vectors", &VECTORS.to_string()])
            .arg("--guest-ram")
            .arg(&g.ram)
            .args(["--machine", "pc"]);
        let ram = fs::File::create(&g.ram).with_context(|| format!("creating {}", g.ram.display()))?;
        ram.set_len(u64::from(g.mem_mib) << 20)?;
        drop(ram);
        let log = fs::File::create(&g.nic_log)?;
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let t = Instant::now();
        let child = cmd.spawn().context("starting trapeze-nic")?;
        eprintln!("  guest {idx}: trapeze-nic pid {} (ivshmem server {})", child.id(), g.ivshmem.display());
        g.nic = Some(child);
        loop {
            check_interrupted()?;
            let text = fs::read_to_string(&g.nic_log).unwrap_or_default();
            if text.contains("ivshmem server") && g.ivshmem.exists() {
                break;
            }
            if let Some(st) = g.nic.as_mut().expect("set above").try_wait()? {
                bail!("trapeze-nic for guest {idx} exited ({st}):\n{}", tail(&text, 20));
            }
            ensure!(
                t.elapsed() < NIC_START,
                "trapeze-nic for guest {idx} did not listen within {NIC_START:?} (log {})",
                g.nic_log.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn start_qemu(
        &mut self,
        idx: u16,
        qemu: &Path,
        kernel: &Path,
        initrd: &Path,
        append: &str,
        setpriv: bool,
    ) -> anyhow::Result<()> {
        let g = self.guest(idx);
        let _ = fs::remove_file(&g.console);
        let mut cmd = child_command(qemu, setpriv);
        cmd.args(["-machine", "pc,memory-backend=mem", "-accel", "tcg", "-m", &format!("{}M", g.mem_mib)])
            .args(["-nodefaults", "-nographic", "-no-reboot", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", g.console.display()))
            .arg("-kernel")
            .arg(kernel)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", append])
            .arg("-object")
            .arg(format!("memory-backend-file,id=mem,size={}M,mem-path={},share=on", g.mem_mib, g.ram.display()))
            .arg("-chardev")
            .arg(format!("socket,path={},id=nic", g.ivshmem.display()))
            .args(["-device", &format!("ivshmem-doorbell,chardev=nic,vectors={VECTORS}")])
            .args(&g.qemu_extra);
        let log = fs::File::create(&g.qemu_log)?;
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let child = cmd.spawn().context("starting qemu-system-x86_64")?;
        eprintln!("  guest {idx}: qemu pid {} (TCG, RAM {})", child.id(), g.ram.display());
        g.qemu = Some(child);
        g.started = Some(Instant::now());
        g.exit = None;
        Ok(())
    }

    /// `kill_on`: once the watched console shows the line, SIGKILL the victim's QEMU and
    /// NIC (once).
    fn kill_if_asked(&mut self) -> anyhow::Result<()> {
        let Some(k) = self.kill_on.as_mut() else { return Ok(()) };
        if k.done.is_some() {
            return Ok(());
        }
        let (watch, line, victim) = (k.watch, k.line, k.victim);
        let console = self.guests.iter().find(|g| g.idx == watch).map(|g| g.console.clone());
        let asked = console.and_then(|c| fs::read(c).ok()).is_some_and(|b| String::from_utf8_lossy(&b).contains(line));
        if !asked {
            return Ok(());
        }
        k.done = Some(Instant::now());
        let g = self.guest(victim);
        let mut what = Vec::new();
        if let Some(mut q) = g.qemu.take() {
            what.push(format!("QEMU pid {}", q.id()));
            q.kill().context("killing QEMU")?;
            let _ = q.wait();
        }
        if let Some(mut n) = g.nic.take() {
            what.push(format!("trapeze-nic pid {}", n.id()));
            n.kill().context("killing trapeze-nic")?;
            let _ = n.wait();
        }
        g.killed = Some(g.started.map_or(Duration::ZERO, |s| s.elapsed()));
        eprintln!("  guest {watch} asked (\"{line}\"): SIGKILLed guest {victim}: {}", what.join(", "));
        Ok(())
    }

    /// Wait until every QEMU has exited (true) or `timeout` passed (false, QEMUs killed),
    /// echoing consoles from /init on. A NIC that dies is an error.
    fn wait(&mut self, timeout: Duration, echo: bool) -> anyhow::Result<bool> {
        let t = Instant::now();
        loop {
            check_interrupted()?;
            self.kill_if_asked()?;
            let mut running = 0;
            for g in &mut self.guests {
                if echo {
                    g.echo_console();
                }
                if let Some(q) = g.qemu.as_mut() {
                    match q.try_wait()? {
                        Some(st) => {
                            let took = g.started.map_or(Duration::ZERO, |s| s.elapsed());
                            g.exit = Some((st, took));
                            g.qemu = None;
                            if echo {
                                g.echo_console();
                            }
                            eprintln!("  guest {}: QEMU exited ({st}) after {took:.1?}", g.idx);
                        }
                        None => running += 1,
                    }
                }
                if let Some(n) = g.nic.as_mut() {
                    if let Some(st) = n.try_wait()? {
                        g.nic = None;
                        let text = fs::read_to_string(&g.nic_log).unwrap_or_default();
                        bail!("trapeze-nic of guest {} exited ({st}):\n{}", g.idx, tail(&text, 20));
                    }
                }
            }
            if running == 0 {
                return Ok(true);
            }
            if t.elapsed() >= timeout {
                for g in &mut self.guests {
                    if let Some(mut q) = g.qemu.take() {
                        eprintln!("  guest {}: still running after {timeout:?}: killing QEMU", g.idx);
                        let _ = q.kill();
                        let _ = q.wait();
                    }
                }
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Guest {
    /// Print new console lines, from /init's first line on, prefixed with the guest.
    fn echo_console(&mut self) {
        let Ok(mut f) = fs::File::open(&self.console) else { return };
        let mut bytes = Vec::new();
        if f.read_to_end(&mut bytes).is_err() || bytes.len() <= self.echoed {
            return;
        }
        let new = &bytes[self.echoed..];
        // Only whole lines.
        let Some(end) = new.iter().rposition(|&b| b == b'\n') else { return };
        let text = String::from_utf8_lossy(&new[..=end]);
        self.echoed += end + 1;
        let mut out = std::io::stderr().lock();
        for l in text.lines() {
            if !self.echoing && l.contains("trapeze-guest: up") {
                self.echoing = true;
            }
            if self.echoing {
                let _ = writeln!(out, "  [g{}] {}", self.idx, printable(l));
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for g in &mut self.guests {
            for child in [g.qemu.take(), g.nic.take()].into_iter().flatten() {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for p in &self.remove_on_drop {
            let _ = fs::remove_file(p);
        }
    }
}

/// A command for `program`, through `setpriv --pdeathsig KILL --` when available (the
/// child then dies with this process, however it ends).
fn child_command(program: &Path, setpriv: bool) -> Command {
    if setpriv {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn setpriv_pdeathsig() -> bool {
    Command::new("setpriv")
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--pdeathsig"))
}

/// Build `initramfs.cpio.gz` in `dir`: /init, busybox, the modules, the optional script.
fn build_initramfs(dir: &Path, modules: &[PathBuf], script: Option<&[u8]>) -> anyhow::Result<PathBuf> {
    let root = crate::workspace_root();
    let init = fs::read(root.join(INIT)).with_context(|| format!("reading {INIT}"))?;
    let busybox = fs::read("/bin/busybox").context("reading /bin/busybox (apt-get install busybox-static)")?;
    let mut c = Cpio::default();
    for d in [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "root",
        "etc",
        "etc/trapeze",
        "lib",
        "lib/modules",
    ] {
        c.dir(d);
    }
    c.char_dev("dev/console", 0o600, 5, 1);
    c.char_dev("dev/null", 0o666, 1, 3);
    c.file("bin/busybox", 0o755, &busybox);
    c.symlink("bin/sh", "busybox");
    c.file("init", 0o755, &init);
    let mut names = Vec::new();
    for m in modules {
        let name = m.file_name().context("module path")?.to_string_lossy().into_owned();
        c.file(&format!("lib/modules/{name}"), 0o644, &fs::read(m)?);
        names.push(name);
    }
    if let Some(s) = script {
        c.file("etc/trapeze/run.sh", 0o755, s);
    }
    let cpio = dir.join("initramfs.cpio");
    fs::write(&cpio, c.finish())?;
    let st = Command::new("gzip").args(["-9", "-n", "-f"]).arg(&cpio).status().context("running gzip")?;
    ensure!(st.success(), "gzip {} failed ({st})", cpio.display());
    let gz = dir.join("initramfs.cpio.gz");
    let size = fs::metadata(&gz)?.len();
    eprintln!(
        "  {} ({} KiB): /init from {INIT}, busybox, modules: {}{}",
        gz.display(),
        size / 1024,
        if names.is_empty() { "none".to_string() } else { names.join(" ") },
        if script.is_some() { ", /etc/trapeze/run.sh" } else { "" }
    );
    Ok(gz)
}

/// A newc ("070701") cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }
    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, 2, (0, 0), &[]);
    }
    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, 1, (0, 0), data);
    }
    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120_777, 1, (0, 0), target.as_bytes());
    }
    fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, 0o020_000 | perm, 1, (major, minor), &[]);
    }
    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[]);
        while !self.buf.len().is_multiple_of(512) {
            self.buf.push(0);
        }
        self.buf
    }
}

/// Standard base64 with padding (the guest decodes it with busybox `base64 -d`).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `n` UDP ports on 127.0.0.1 that were free a moment ago.
fn free_udp_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let socks: Vec<UdpSocket> =
        (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>().context("finding free UDP ports")?;
    socks.iter().map(|s| Ok(s.local_addr()?.port())).collect()
}

/// `$XDG_RUNTIME_DIR/trapeze`, else `/dev/shm/trapeze-UID`, else `/tmp/trapeze-UID`.
fn runtime_base() -> anyhow::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let base = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("trapeze"),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from(format!("/dev/shm/trapeze-{uid}")),
        None => PathBuf::from(format!("/tmp/trapeze-{uid}")),
    };
    fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    Ok(base)
}

/// Remove `vm-PID` directories whose xtask is gone (their logs, and any RAM files a killed
/// run left behind).
fn prune_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("vm-").and_then(|p| p.parse::<u32>().ok()) else { continue };
        let gone = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
        if gone && fs::remove_dir_all(e.path()).is_ok() {
            eprintln!("  removed the previous run's {}", e.path().display());
        }
    }
}

/// The workspace's cargo target directory.
fn target_dir() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(crate::workspace_root())
        .output()
        .context("cargo metadata")?;
    ensure!(out.status.success(), "cargo metadata failed ({})", out.status);
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(PathBuf::from(meta["target_directory"].as_str().context("cargo metadata: target_directory")?))
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(cmd)).find(|p| p.is_file()))
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"insmod x && rmmod x"), "aW5zbW9kIHggJiYgcm1tb2QgeA==");
    }

    #[test]
    fn escapes_are_dropped_from_console_lines() {
        assert_eq!(
            printable("Booting from ROM..\u{1b}c\u{1b}[?7l\u{1b}[2JLinux version 6.12\r"),
            "Booting from ROM..Linux version 6.12"
        );
    }

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("init", 0o755, b"#!/bin/sh\n");
        let a = c.finish();
        assert!(a.starts_with(b"070701"));
        assert_eq!(a.len() % 512, 0);
        let s = String::from_utf8_lossy(&a);
        assert!(s.contains("TRAILER!!!"));
        assert!(s.contains("init\0"));
    }

    #[test]
    fn report_needs_the_nic_and_a_clean_poweroff() {
        let good = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\nreboot: Power down\n";
        let r = GuestReport::of(good, Some(ExitStatus::default()), 0);
        assert!(r.ok(Mode::Plain) && !r.ok(Mode::Smoke) && !r.ok(Mode::ModuleTest));
        let panic = format!("{good}Kernel panic - not syncing\n");
        assert!(!GuestReport::of(&panic, Some(ExitStatus::default()), 0).ok(Mode::Plain));
    }

    #[test]
    fn blk_test_needs_every_check_passed_and_the_total() {
        let ok = Some(ExitStatus::default());
        let run = "trapeze-guest: pci 0000:00:03.0 1af4:1110 class 050000\n\
            trapeze-blk: PASS disk /dev/gms0 appears\n\
            trapeze-blk: PASS 8 MiB read back after drop_caches: md5 0\n\
            trapeze-blk: 2 passed, 0 failed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        let r = GuestReport::of(run, ok, 0);
        assert!(r.ok(Mode::BlkTest) && r.blk_passed == 2);
        let failed = run.replacen("PASS 8 MiB", "FAIL 8 MiB", 1);
        assert!(!GuestReport::of(&failed, ok, 0).ok(Mode::BlkTest));
        let cut_short = run.replace("trapeze-blk: 2 passed, 0 failed\n", "");
        assert!(!GuestReport::of(&cut_short, ok, 0).ok(Mode::BlkTest), "the total line must be there");
        let oops = format!("{run}Oops: 0000 [#1] SMP\n");
        assert!(!GuestReport::of(&oops, ok, 0).ok(Mode::BlkTest));
    }

    #[test]
    fn suite_needs_every_check_the_kill_and_a_clean_server() {
        let ok = Some(ExitStatus::default());
        let a = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\n\
            trapeze-suite: PASS module loaded, /dev/gms0 on GMS (1024 pages)\n\
            trapeze-suite: PASS data verified: 4 files' md5sums match\n\
            trapeze-suite: PASS failure case: node 2 declared failed 3.4 s after the kill request\n\
            trapeze-suite: PASS clean unload with NetRPC calls and getpages in flight\n\
            trapeze-suite: 4 passed, 0 failed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        assert!(GuestReport::of(a, ok, 0).suite_ok(0, false));
        let failed = a.replacen("PASS failure case", "FAIL failure case", 1);
        assert!(!GuestReport::of(&failed, ok, 0).suite_ok(0, false));
        let cut = a.replace("trapeze-suite: 4 passed, 0 failed\n", "");
        assert!(!GuestReport::of(&cut, ok, 0).suite_ok(0, false), "the total line must be there");
        let sum = suite_summary(&failed);
        assert_eq!(sum.iter().filter(|l| l.ends_with(": PASS")).count(), 3);
        assert!(sum.contains(&"failure case: FAIL".to_string()));
        // A server: loaded and unloaded cleanly; the victim: loaded, then killed.
        let b = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\n\
            [ 3.1] trapeze: 0000:00:02.0: node 1 up: endpoint live, 32 receive frames\n\
            [ 9.2] trapeze: 0000:00:02.0: node 1 removed: NIC halted, frames freed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        assert!(GuestReport::of(b, ok, 1).suite_ok(1, false));
        let c = b.split("[ 9.2]").next().unwrap_or_default();
        assert!(GuestReport::of(c, None, 2).suite_ok(2, true));
        assert!(!GuestReport::of(c, None, 2).suite_ok(2, false), "the victim must have been killed");
        assert!(!GuestReport::of(&format!("{c}WARNING: CPU: 0 PID: 1\n"), None, 2).suite_ok(2, true));
    }

    #[test]
    fn module_test_needs_each_side_of_the_ping_and_a_clean_unload() {
        let common = "trapeze-guest: pci 0000:00:03.0 1af4:1110 class 050000\n\
            [    3.1] trapeze: 0000:00:03.0: node 1 up: endpoint live, 32 receive frames\n\
            [    5.2] trapeze: 0000:00:03.0: node 1 removed: NIC halted, frames freed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        let pinger = format!("{common}[ 4.0] trapeze: pong 2 from node 0: 4096 bytes verified byte for byte (crc 1), round trip 900 us\n");
        let ok = Some(ExitStatus::default());
        assert!(GuestReport::of(&pinger, ok, 1).ok(Mode::ModuleTest));
        assert!(!GuestReport::of(&pinger, ok, 0).ok(Mode::ModuleTest), "guest 0 must answer, not ping");
        let answered = format!("{common}[ 4.0] trapeze: ping 2 from node 1: 4096 bytes; answered with a pong\n");
        assert!(GuestReport::of(&answered, ok, 0).ok(Mode::ModuleTest));
        let oops = format!("{answered}BUG: kernel NULL pointer dereference\n");
        assert!(!GuestReport::of(&oops, ok, 0).ok(Mode::ModuleTest));
        let failed = answered.replace("status 0", "status 1");
        assert!(!GuestReport::of(&failed, ok, 0).ok(Mode::ModuleTest));
    }
}
