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
//! `--module-test` builds `trapeze.ko` (`cargo xtask module`), boots at least three guests
//! with it and `kernel-crate/guest/ping.sh` as their script. First the ping: guest 0 loads
//! it as node 0 and answers pings, every other guest K loads it as node K with
//! `ping_peer=0`, which sends node 0 a control message + 4 KB payload at load and checks
//! the pong byte for byte. Then NetRPC echo calls to node 0 and GMS put/get between the
//! guests (guest 1 also checks `/dev/gms0` on GMS), and an unload with calls and getpages
//! in flight. It passes when each guest's console shows the endpoint up, its side of the
//! ping and of the later phases, a clean `rmmod` (NIC halted, frames freed), the script's
//! status 0, no oops/BUG/WARNING, and a clean power-off.
//!
//! `--blk-test` builds `trapeze.ko` and boots (by default) one guest with `kernel-crate/guest/blk.sh`,
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
//! `--gmsd-test` puts a host `gmsd` in one guest's GMS cluster ([`host_gmsd`]).
//!
//! A drop guard kills every child and removes RAM files, sockets and the initramfs on every
//! return, error or not; SIGINT, SIGTERM and SIGHUP end the run through it (once the
//! children start, a handler turns them into an error). Children are also started through
//! `setpriv --pdeathsig KILL`, so they die with xtask even if it is SIGKILLed. Console and
//! process logs stay until the next `cargo xtask vm`, which removes the runtime directories
//! of runs whose xtask is gone (and anything such a run left behind).

pub mod bench_guests;
mod cluster;
pub mod host_gmsd;
mod initramfs;
mod report;
mod runtime;

use cluster::{nic_args, setpriv_pdeathsig, tail, Cluster, KillOn};
use initramfs::{base64, build_initramfs, Cpio};
use report::{interesting, printable, rpc_phase_ok, suite_summary, yes_no, GuestReport, Mode};
use runtime::{free_udp_ports, prune_stale, runtime_base, target_dir, which};

use anyhow::{bail, ensure, Context};
use std::fs;
use std::path::PathBuf;
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
    /// Guests to boot, each with its own virtual NIC (all NICs on one UDP link);
    /// --module-test boots at least 3, --suite 3, --gmsd-test 1.
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
    /// Seconds to wait for every guest to power off before killing them (an error); the
    /// tests wait at least their own minimum (--module-test 120, --blk-test 300, --suite
    /// 300, --gmsd-test 240).
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Extra words for the kernel command line.
    #[arg(long, value_name = "WORDS")]
    append: Option<String>,
    /// Do not echo the guests' console output (from /init on) to the terminal while they
    /// run; print the lines that matter at the end (what --smoke and the tests do).
    #[arg(long)]
    quiet: bool,
    /// A kernel module (.ko) to add to the guests' /lib/modules (repeatable), e.g.
    /// kernel-crate/trapeze.ko from `cargo xtask module`.
    #[arg(long, value_name = "KO")]
    module: Vec<PathBuf>,
    /// Build trapeze.ko and test it in (at least) three guests (`kernel-crate/guest/ping.sh`):
    /// guest 0 loads it as node 0, the others as node K pinging node 0 with a 4 KB payload;
    /// then NetRPC echo calls and GMS put/get between the guests (guest 1 also /dev/gms0 on
    /// GMS), and an unload with calls in flight; each checks its side, unloads it and powers
    /// off. Exit status 0 or 1, with the console lines that matter.
    #[arg(long, conflicts_with_all = ["smoke", "script", "cmd"])]
    module_test: bool,
    /// Build trapeze.ko and test its GMS block device /dev/gms0 on the RAM backend in each
    /// guest, one by default (`kernel-crate/guest/blk.sh`: data round trips with dropped caches, O_DIRECT,
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
