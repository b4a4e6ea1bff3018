// SPDX-License-Identifier: GPL-2.0-only
//! What every `cargo xtask vm` subcommand shares: the common options, and one run's steps
//! from the builds to the boot, the wait for power-off and the per-guest report.
//!
//! A subcommand calls [`Prepared::build`] (the kernel, `trapeze.ko` if it needs it, the
//! virtual NIC), [`Prepared::start`] (runtime directory, initramfs, UDP ports, the NICs),
//! [`Session::boot`] (the QEMUs), [`Session::wait`], [`Session::report`] with its own
//! verdict for each guest, and [`Session::finish`].

use super::cluster::{nic_args, run_key, setpriv_pdeathsig, stop_on_signals, Cluster, OnLine};
use super::initramfs::{base64, build_initramfs};
use super::report::{interesting, printable, trouble_context, yes_no, GuestReport, IVSHMEM_PCI_ID};
use super::runtime::{free_udp_ports, prune_stale, runtime_base, target_dir, which};
use anyhow::{bail, ensure, Context};
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The options every subcommand takes.
#[derive(clap::Args)]
pub struct Common {
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(64..=4096))]
    pub(super) mem: u32,
    /// Seconds to wait for every guest to power off before killing them (an error); the
    /// tests wait at least their own minimum (module-test 120, gmsd-test 240, blk-test
    /// 300, suite and swap 420, big-disk and disks 600).
    #[arg(long, default_value_t = 60)]
    pub(super) timeout: u64,
    /// Extra words for the kernel command line.
    #[arg(long, value_name = "WORDS")]
    pub(super) append: Option<String>,
    /// A kernel module (.ko) to add to the guests' /lib/modules (repeatable), e.g.
    /// kernel-crate/trapeze.ko from `cargo xtask module`.
    #[arg(long, value_name = "KO")]
    pub(super) module: Vec<PathBuf>,
    /// Run the guests' link unauthenticated. By default every NIC (and a host gmsd) gets
    /// a cluster key made for the run, and drops packets without its tag.
    #[arg(long)]
    pub(super) no_key: bool,
}

/// How many guests, for the subcommands that let it be chosen.
#[derive(clap::Args)]
pub struct GuestCount {
    /// Guests to boot, each with its own virtual NIC (all NICs on one UDP link).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub(super) guests: u16,
}

/// What a subcommand boots.
#[derive(Default)]
pub(super) struct Setup {
    pub(super) guests: u16,
    /// The guests' script, embedded as /etc/trapeze/run.sh.
    pub(super) script: Option<PathBuf>,
    /// Shell commands every guest runs before the script (`trapeze_cmd=`).
    pub(super) cmd: Option<String>,
    /// UDP ports after the guests' for processes on the host (node ids from `guests` on),
    /// in every NIC's peer list.
    pub(super) host_ports: usize,
    /// What the guests' scripts ask of the host (kill a guest, boot it again), in order.
    pub(super) asks: Vec<OnLine>,
}

/// What is built before any guest starts.
pub(super) struct Prepared {
    t0: Instant,
    qemu: PathBuf,
    bzimage: PathBuf,
    modules: Vec<PathBuf>,
    nic_bin: PathBuf,
}

impl Prepared {
    /// Find QEMU, make sure of the cached kernel, build `trapeze.ko` if `trapeze_ko`, and
    /// build the virtual NIC.
    pub(super) fn build(common: &Common, trapeze_ko: bool) -> anyhow::Result<Prepared> {
        let t0 = Instant::now();
        let qemu = which("qemu-system-x86_64")
            .context("qemu-system-x86_64 not found (cargo xtask kernel installs qemu-system-x86)")?;
        eprintln!("==> guest kernel (cargo xtask kernel)");
        let kernel = crate::kernel::ensure(None, false)?;
        let bzimage = kernel.bzimage();
        let mut extra = common.module.clone();
        if trapeze_ko {
            extra.push(crate::module::build(&kernel, false)?);
        }
        let mut modules = kernel.paths.modules();
        for m in &extra {
            ensure!(m.extension().is_some_and(|e| e == "ko"), "--module {}: not a .ko file", m.display());
            ensure!(m.is_file(), "--module {}: no such file", m.display());
            modules.push(m.clone());
        }

        eprintln!("==> virtual NIC: cargo build -p trapeze-vnic --bin trapeze-nic");
        crate::prereq::ensure_emulator_build_deps()?;
        crate::cargo(&["build", "--locked", "-p", "trapeze-vnic", "--bin", "trapeze-nic"])?;
        let nic_bin = target_dir()?.join("debug/trapeze-nic");
        ensure!(nic_bin.exists(), "{} was not built", nic_bin.display());
        Ok(Prepared { t0, qemu, bzimage, modules, nic_bin })
    }

    /// The runtime directory, the initramfs, the UDP ports and every guest's NIC.
    pub(super) fn start(self, common: &Common, setup: Setup) -> anyhow::Result<Session> {
        stop_on_signals()?;
        let runtime = runtime_base()?;
        prune_stale(&runtime);
        let dir = runtime.join(format!("vm-{}", std::process::id()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut cluster = Cluster::new(dir.clone());
        cluster.asks = setup.asks;

        eprintln!("==> initramfs");
        let script = match &setup.script {
            Some(p) => Some(fs::read(p).with_context(|| format!("reading {}", p.display()))?),
            None => None,
        };
        let initrd = build_initramfs(&dir, &self.modules, script.as_deref())?;
        cluster.remove_on_drop.push(initrd.clone());

        let ports = free_udp_ports(setup.guests as usize + setup.host_ports)?;
        let setpriv = setpriv_pdeathsig();
        if !setpriv {
            eprintln!("note: setpriv --pdeathsig is not available; children outlive a killed xtask");
        }
        eprintln!("==> {} guest(s): virtual NICs, then QEMU (TCG, {} MiB each)", setup.guests, common.mem);
        let key = run_key(&dir, common.no_key)?;
        cluster.remove_on_drop.extend(key.clone());
        for k in 0..setup.guests {
            cluster.add_guest(k, common.mem);
            cluster.start_nic(k, &self.nic_bin, &nic_args(k, &ports, key.as_deref()), setpriv)?;
        }
        Ok(Session {
            t0: self.t0,
            qemu: self.qemu,
            bzimage: self.bzimage,
            initrd,
            guests: setup.guests,
            cmd: setup.cmd,
            append: common.append.clone(),
            setpriv,
            ports,
            dir,
            key,
            cluster,
        })
    }
}

/// One run's guests, from their NICs on.
pub(super) struct Session {
    t0: Instant,
    qemu: PathBuf,
    bzimage: PathBuf,
    initrd: PathBuf,
    guests: u16,
    cmd: Option<String>,
    append: Option<String>,
    setpriv: bool,
    /// The UDP ports: the guests' NICs', then the host processes'.
    pub(super) ports: Vec<u16>,
    /// The runtime directory.
    pub(super) dir: PathBuf,
    /// The link's cluster key file (`None`: `--no-key`).
    pub(super) key: Option<PathBuf>,
    pub(super) cluster: Cluster,
}

/// What [`Session::report`] shows a subcommand's verdict about one guest.
pub(super) struct Seen<'a> {
    pub(super) idx: u16,
    pub(super) console: &'a str,
    pub(super) report: GuestReport,
    /// Killed on request (an [`Ask`](super::cluster::Ask)).
    pub(super) killed: bool,
    /// Booted again after that (its console is its second life's).
    pub(super) restarted: bool,
}

impl Session {
    /// Start every guest's QEMU and say where its logs are.
    pub(super) fn boot(&mut self) -> anyhow::Result<()> {
        for k in 0..self.guests {
            let mut append = Cluster::cmdline(k, self.guests);
            if let Some(c) = &self.cmd {
                append.push_str(&format!(" trapeze_cmd={}", base64(c.as_bytes())));
            }
            if let Some(x) = &self.append {
                append.push(' ');
                append.push_str(x);
            }
            self.cluster.start_qemu(k, &self.qemu, &self.bzimage, &self.initrd, &append, self.setpriv)?;
        }
        for g in &self.cluster.guests {
            eprintln!(
                "guest {}: console {}  (qemu log {}, nic log {})",
                g.idx,
                g.console.display(),
                g.qemu_log.display(),
                g.nic_log.display()
            );
        }
        Ok(())
    }

    /// Wait up to `timeout` s for every guest to power off (true), echoing the consoles if
    /// `echo`.
    pub(super) fn wait(&mut self, timeout: u64, echo: bool) -> anyhow::Result<bool> {
        let all_off = self.cluster.wait(Duration::from_secs(timeout), echo)?;
        eprintln!();
        Ok(all_off)
    }

    /// Guest `idx`'s console so far.
    pub(super) fn console(&self, idx: u16) -> String {
        self.cluster
            .guests
            .iter()
            .find(|g| g.idx == idx)
            .map(|g| fs::read_to_string(&g.console).unwrap_or_default())
            .unwrap_or_default()
    }

    /// One line per guest: `verdict` says whether it passed and what it checked; with
    /// `summary`, the console lines that matter follow. Returns the guests that failed.
    pub(super) fn report(&self, summary: bool, mut verdict: impl FnMut(&Seen) -> (bool, String)) -> Vec<String> {
        let mut failures = Vec::new();
        for g in &self.cluster.guests {
            let console = fs::read_to_string(&g.console).unwrap_or_default();
            let report = GuestReport::of(&console, g.exit.as_ref().map(|e| e.0), g.idx);
            let took = match (&g.exit, g.killed) {
                (Some(e), _) => format!("{:.1?}", e.1),
                (None, Some(d)) => format!("SIGKILLed by xtask after {d:.1?}"),
                (None, None) => "still running".to_string(),
            };
            let (nic_listed, powered_off) = (report.nic_listed, report.powered_off);
            let (ok, what) = verdict(&Seen {
                idx: g.idx,
                console: &console,
                report,
                killed: g.killed.is_some(),
                restarted: g.first_console.is_some(),
            });
            eprintln!(
                "guest {}: {} PCI {}: {}; {what}; powered off: {} ({}, QEMU {})",
                g.idx,
                if ok { "ok  " } else { "FAIL" },
                IVSHMEM_PCI_ID,
                yes_no(nic_listed),
                yes_no(powered_off),
                took,
                g.exit.as_ref().map_or("killed".to_string(), |e| e.0.to_string()),
            );
            if summary {
                for l in console.lines().filter(|l| interesting(l)) {
                    eprintln!("    | {}", printable(l));
                }
            }
            let context = trouble_context(&console);
            if !context.is_empty() {
                eprintln!("  guest {}: the console around its first kernel-trouble line:", g.idx);
                for l in &context {
                    eprintln!("    ! {l}");
                }
            }
            if !ok {
                failures.push(format!("guest {} (console {})", g.idx, g.console.display()));
            }
        }
        failures
    }

    /// Stop everything, then fail if a guest did not power off within `timeout` s or
    /// anything is in `failures`; `name` is the run's, `passed` what success prints.
    pub(super) fn finish(
        self,
        all_off: bool,
        timeout: u64,
        failures: &[String],
        name: &str,
        passed: &str,
    ) -> anyhow::Result<()> {
        let Session { t0, dir, cluster, .. } = self;
        drop(cluster);
        eprintln!("runtime dir {} (RAM files and sockets removed; logs kept until the next run)", dir.display());
        if !all_off {
            bail!("guests did not power off within {timeout} s: {}", failures.join(", "));
        }
        if !failures.is_empty() {
            bail!("{name} failed: {}", failures.join(", "));
        }
        eprintln!("xtask vm: {passed} in {:.1?}", t0.elapsed());
        Ok(())
    }
}
