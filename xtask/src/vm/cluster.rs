// SPDX-License-Identifier: GPL-2.0-only
//! The guests of one run: each one's NIC and QEMU, the wait for power-off, a kill on request, cleanup.

use super::report::printable;
use anyhow::{bail, ensure, Context};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// MSI-X vectors of the NIC device.
pub(super) const VECTORS: u32 = 2;
/// How long a NIC may take to start listening.
const NIC_START: Duration = Duration::from_secs(20);

/// Set by the SIGINT/SIGTERM/SIGHUP handler; the waiting loops turn it into an error.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// From here on a signal must not kill xtask before a [`Cluster`]'s drop guard has run:
/// SIGINT, SIGTERM and SIGHUP only set a flag that the waiting loops turn into an error.
pub(super) fn stop_on_signals() -> anyhow::Result<()> {
    // Once per process: a bench boots guests several times, and the handler stays.
    static INSTALLED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed)).map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))
}

pub(super) fn check_interrupted() -> anyhow::Result<()> {
    ensure!(!INTERRUPTED.load(Ordering::Relaxed), "interrupted by a signal: stopping the guests");
    Ok(())
}

/// `trapeze-nic` arguments for guest `k`'s NIC: node `k` on the UDP link at `ports[k]`, every
/// other port a peer (node id = index; a host gmsd's port may follow the guests'), polling
/// [`GUEST_NIC_SPIN_US`] before it sleeps, authenticating the link with `key` if given.
pub(super) fn nic_args(k: u16, ports: &[u16], key: Option<&Path>) -> Vec<String> {
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
    args.extend(["--spin-us".to_string(), GUEST_NIC_SPIN_US.to_string()]);
    if let Some(key) = key {
        args.extend(["--key".to_string(), key.display().to_string()]);
    }
    args
}

/// A fresh cluster key for one run's link, in its runtime directory `dir` (mode 0600,
/// removed with the RAM files): every guest cluster runs authenticated unless asked not
/// to (`--no-key`).
pub(super) fn run_key(dir: &Path, no_key: bool) -> anyhow::Result<Option<PathBuf>> {
    if no_key {
        eprintln!("  link: unauthenticated (--no-key)");
        return Ok(None);
    }
    let path = dir.join("cluster.key");
    let _ = fs::remove_file(&path);
    trapeze_vnic::key::ClusterKey::generate(&path)?;
    eprintln!("  link: authenticated with a cluster key made for this run ({}; --no-key to opt out)", path.display());
    Ok(Some(path))
}

/// How long a guest's NIC polls after its last work before it sleeps on its doorbell
/// (`trapeze-nic --spin-us`, whose default is 50). A server's NIC is then still awake
/// when the next request of a stream of synchronous reads arrives. Interleaved `bench vm`
/// runs on 2026-11-27: `rand4k_p50` 0.354, 0.412, 0.411 with 400 µs against 0.591, 0.507
/// with 50 µs, NBD's own p50 no slower and sequential bandwidth the same.
const GUEST_NIC_SPIN_US: u32 = 400;

/// One guest: its NIC, its QEMU and their files.
pub(super) struct Guest {
    pub(super) idx: u16,
    pub(super) ram: PathBuf,
    pub(super) ivshmem: PathBuf,
    pub(super) control: PathBuf,
    pub(super) console: PathBuf,
    pub(super) qemu_log: PathBuf,
    pub(super) nic_log: PathBuf,
    pub(super) mem_mib: u32,
    pub(super) nic: Option<Child>,
    pub(super) qemu: Option<Child>,
    pub(super) started: Option<Instant>,
    /// How QEMU ended and how long it ran.
    pub(super) exit: Option<(ExitStatus, Duration)>,
    /// Console bytes already echoed.
    pub(super) echoed: usize,
    /// Echoing starts at /init's first line.
    pub(super) echoing: bool,
    /// More QEMU arguments for this guest (e.g. a virtio-net link, `cargo xtask bench vm`).
    pub(super) qemu_extra: Vec<String>,
    /// Killed on request (an [`Ask`]): how long after its (last) start.
    pub(super) killed: Option<Duration>,
    /// Booted again after a kill (an [`Ask`]): the console of its first life.
    pub(super) first_console: Option<PathBuf>,
    /// How its NIC (program, arguments, setpriv) and QEMU were started.
    nic_cmd: Option<(PathBuf, Vec<String>, bool)>,
    qemu_cmd: Option<QemuCmd>,
}

/// What a guest's script can ask of the host by printing a line: SIGKILL a guest (its
/// QEMU and NIC), or boot a killed guest again (a new NIC, then QEMU, as first started).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ask {
    Kill(u16),
    Boot(u16),
}

/// Do `ask` once guest `watch`'s console shows `line` (once; the asks of a run are done
/// in the order given, each only after the one before it).
pub(super) struct OnLine {
    pub(super) watch: u16,
    pub(super) line: &'static str,
    pub(super) ask: Ask,
    pub(super) done: Option<Instant>,
}

impl OnLine {
    pub(super) fn new(watch: u16, line: &'static str, ask: Ask) -> Self {
        OnLine { watch, line, ask, done: None }
    }
}

/// How a guest's QEMU was started (to boot it again).
#[derive(Clone)]
struct QemuCmd {
    qemu: PathBuf,
    kernel: PathBuf,
    initrd: PathBuf,
    append: String,
    setpriv: bool,
}

/// The guests of one run; dropping it kills every child and removes the run's big files.
pub(super) struct Cluster {
    pub(super) dir: PathBuf,
    pub(super) guests: Vec<Guest>,
    pub(super) remove_on_drop: Vec<PathBuf>,
    pub(super) asks: Vec<OnLine>,
}

impl Cluster {
    pub(super) fn new(dir: PathBuf) -> Self {
        Cluster { dir, guests: Vec::new(), remove_on_drop: Vec::new(), asks: Vec::new() }
    }

    pub(super) fn add_guest(&mut self, idx: u16, mem_mib: u32) {
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
            first_console: None,
            nic_cmd: None,
            qemu_cmd: None,
        };
        self.remove_on_drop.extend([g.ram.clone(), g.ivshmem.clone(), g.control.clone()]);
        self.guests.push(g);
    }

    pub(super) fn guest(&mut self, idx: u16) -> &mut Guest {
        self.guests.iter_mut().find(|g| g.idx == idx).expect("guest added")
    }

    /// Create the guest's RAM file (the NIC maps it; QEMU reuses a file of the same size),
    /// start its NIC and wait until its ivshmem server listens.
    pub(super) fn start_nic(&mut self, idx: u16, nic_bin: &Path, args: &[String], setpriv: bool) -> anyhow::Result<()> {
        let g = self.guest(idx);
        g.nic_cmd = Some((nic_bin.to_path_buf(), args.to_vec(), setpriv));
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
        // Mode 0600: the guest's memory is nobody else's to read (the NIC refuses a looser
        // file); a file left by an earlier run is made 0600 too.
        let ram = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&g.ram)
            .with_context(|| format!("creating {}", g.ram.display()))?;
        ram.set_permissions(fs::Permissions::from_mode(0o600))?;
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

    /// The kernel command line guest `k` of `guests` boots with: the serial console, a
    /// reboot on panic (QEMU exits), its number, and `no_timer_check`: under TCG on a busy
    /// host the kernel's boot-time check that the IO-APIC timer ticks can run out of time
    /// and panic the guest ("IO-APIC + timer doesn't work!", seen once at load 9.6) though
    /// the timer works.
    pub(super) fn cmdline(k: u16, guests: u16) -> String {
        format!("console=ttyS0 panic=-1 no_timer_check trapeze_guest={k} trapeze_guests={guests}")
    }

    pub(super) fn start_qemu(
        &mut self,
        idx: u16,
        qemu: &Path,
        kernel: &Path,
        initrd: &Path,
        append: &str,
        setpriv: bool,
    ) -> anyhow::Result<()> {
        let g = self.guest(idx);
        g.qemu_cmd = Some(QemuCmd {
            qemu: qemu.to_path_buf(),
            kernel: kernel.to_path_buf(),
            initrd: initrd.to_path_buf(),
            append: append.to_string(),
            setpriv,
        });
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

    /// Whether guest `idx`'s console shows `line`.
    fn console_shows(&self, idx: u16, line: &str) -> bool {
        let console = self.guests.iter().find(|g| g.idx == idx).map(|g| g.console.clone());
        console.and_then(|c| fs::read(c).ok()).is_some_and(|b| String::from_utf8_lossy(&b).contains(line))
    }

    /// The next of `asks` not done yet, once its watched console shows its line.
    pub(super) fn do_asks(&mut self) -> anyhow::Result<()> {
        let Some(i) = self.asks.iter().position(|a| a.done.is_none()) else { return Ok(()) };
        let (watch, line, ask) = (self.asks[i].watch, self.asks[i].line, self.asks[i].ask);
        if !self.console_shows(watch, line) {
            return Ok(());
        }
        self.asks[i].done = Some(Instant::now());
        match ask {
            Ask::Kill(victim) => {
                let what = self.kill(victim)?;
                eprintln!("  guest {watch} asked (\"{line}\"): SIGKILLed guest {victim}: {what}");
                Ok(())
            }
            Ask::Boot(victim) => {
                eprintln!("  guest {watch} asked (\"{line}\"): booting guest {victim} again");
                self.restart(victim)
            }
        }
    }

    /// SIGKILL guest `idx`'s QEMU and NIC; what was killed.
    fn kill(&mut self, idx: u16) -> anyhow::Result<String> {
        let g = self.guest(idx);
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
        Ok(what.join(", "))
    }

    /// Boot guest `idx` again as it was first started (a new NIC, then QEMU: a restarted
    /// machine), keeping its first life's console as `guestN.console.1`.
    fn restart(&mut self, idx: u16) -> anyhow::Result<()> {
        let g = self.guest(idx);
        let (Some((nic_bin, args, setpriv)), Some(q)) = (g.nic_cmd.clone(), g.qemu_cmd.clone()) else {
            bail!("guest {idx} cannot be booted again: it was never started");
        };
        let first = g.console.with_extension("console.1");
        fs::rename(&g.console, &first).with_context(|| format!("keeping {}", g.console.display()))?;
        g.first_console = Some(first);
        g.echoed = 0;
        g.echoing = false;
        self.start_nic(idx, &nic_bin, &args, setpriv)?;
        self.start_qemu(idx, &q.qemu, &q.kernel, &q.initrd, &q.append, q.setpriv)
    }

    /// Wait until every QEMU has exited (true) or `timeout` passed (false, QEMUs killed),
    /// echoing consoles from /init on. A NIC that dies is an error.
    pub(super) fn wait(&mut self, timeout: Duration, echo: bool) -> anyhow::Result<bool> {
        let t = Instant::now();
        loop {
            check_interrupted()?;
            self.do_asks()?;
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
    pub(super) fn echo_console(&mut self) {
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
pub(super) fn child_command(program: &Path, setpriv: bool) -> Command {
    if setpriv {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

pub(super) fn setpriv_pdeathsig() -> bool {
    Command::new("setpriv")
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--pdeathsig"))
}

pub(super) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
