// SPDX-License-Identifier: GPL-2.0-only
//! Guests for `cargo xtask bench vm`: the same guests as `cargo xtask vm` (a `trapeze-nic`
//! per guest, TCG QEMU, the busybox initramfs), plus extra files in the initramfs, extra
//! kernel command-line words per guest and a virtio-net link between guest 0 and guest 1.
//!
//! The link is QEMU's user-mode `-netdev socket,udp=…,localaddr=…` on 127.0.0.1: each
//! guest's Ethernet frames go in UDP datagrams straight to the other QEMU (no root, no tap,
//! no host bridge). The extra files are a second gzipped newc archive appended to the
//! initramfs (the kernel unpacks concatenated archives in order). The run ends when guest
//! 0 (the one measuring) has powered off; the other guests only serve, so they are then
//! stopped.

use super::cluster::{
    check_interrupted, nic_args, run_key, setpriv_pdeathsig, stop_on_signals, tail, Ask, Cluster, OnLine,
};
use super::cpu_marks::{CpuMark, MarkWatch};
use super::initramfs::{base64, build_initramfs, Cpio};
use super::report::{printable, KERNEL_TROUBLE};
use super::runtime::{free_udp_ports, prune_stale, runtime_base, which};
use anyhow::{ensure, Context};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What to boot.
pub struct BenchGuests {
    pub guests: u16,
    pub mem_mib: u32,
    pub bzimage: PathBuf,
    /// Modules for the guests' /lib/modules.
    pub modules: Vec<PathBuf>,
    /// /etc/trapeze/run.sh.
    pub script: Vec<u8>,
    /// Extra initramfs files: (absolute path in the guest, contents, permission bits).
    pub files: Vec<(String, Vec<u8>, u32)>,
    /// Extra kernel command-line words for guest K (`append[K]`, may be shorter).
    pub append: Vec<String>,
    /// Connect guest 0 and guest 1 with virtio-net.
    pub net_pair: bool,
    /// Longest wait for guest 0 to power off.
    pub timeout: Duration,
    /// A line guest 0 prints to have the host SIGKILL guest N (its QEMU and NIC).
    pub kill_on: Option<(&'static str, u16)>,
    /// Have guest K's NIC trace its events into DIR/nodeK.trace (`trapeze-nic --trace`),
    /// and print `trapeze-nic trace-report` over them after the run.
    pub nic_trace: Option<PathBuf>,
    /// Run the link unauthenticated (no cluster key).
    pub no_key: bool,
    /// More QEMU arguments for guest 0 (e.g. `-blockdev`/`-device` pairs of extra disks).
    pub guest0_qemu: Vec<String>,
    /// Sample the host CPU time of every guest's QEMU and NIC and of these host processes
    /// ((label, pid)) at each `trapeze-bench: cpu begin|end PHASE ROUND` line of guest 0
    /// ([`super::cpu_marks`]); the console is then polled every 10 ms.
    pub cpu_marks: Option<Vec<(String, u32)>>,
}

/// What a guest left.
pub struct GuestOutcome {
    pub idx: u16,
    pub console: String,
    pub console_path: PathBuf,
    /// QEMU exited by itself (guest 0 powered off) rather than being stopped.
    pub exited: bool,
    /// Console lines that show the kernel in trouble (oops, BUG, WARNING, panic…).
    pub trouble: Vec<String>,
    /// Guest 0's CPU marks (empty for the others, or without `cpu_marks`).
    pub marks: Vec<CpuMark>,
}

/// MAC address of guest K's virtio-net interface (52:54:00 is QEMU's prefix).
pub fn guest_mac(k: u16) -> String {
    format!("52:54:00:74:70:{:02x}", k & 0xff)
}

/// Boot the guests, echo their consoles, return when guest 0 powered off (or the timeout
/// passed: guest 0's outcome then says `exited: false`).
pub fn run(spec: BenchGuests) -> anyhow::Result<Vec<GuestOutcome>> {
    ensure!(spec.guests >= 1, "at least one guest");
    ensure!(!spec.net_pair || spec.guests >= 2, "a virtio-net pair needs two guests");
    let qemu = which("qemu-system-x86_64")
        .context("qemu-system-x86_64 not found (cargo xtask kernel installs qemu-system-x86)")?;

    eprintln!("==> virtual NIC: cargo build -p trapeze-vnic --bin trapeze-nic");
    crate::prereq::ensure_emulator_build_deps()?;
    crate::cargo(&["build", "--locked", "-p", "trapeze-vnic", "--bin", "trapeze-nic"])?;
    let nic_bin = target_dir()?.join("debug/trapeze-nic");
    ensure!(nic_bin.exists(), "{} was not built", nic_bin.display());

    stop_on_signals()?;
    let runtime = runtime_base()?;
    prune_stale(&runtime);
    let dir = runtime.join(format!("vm-{}", std::process::id()));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cluster = Cluster::new(dir.clone());
    cluster.asks = spec.kill_on.iter().map(|&(line, victim)| OnLine::new(0, line, Ask::Kill(victim))).collect();

    eprintln!("==> initramfs");
    let initrd = build_initramfs(&dir, &spec.modules, Some(&spec.script))?;
    cluster.remove_on_drop.push(initrd.clone());
    append_files(&initrd, &spec.files)?;

    if let Some(t) = &spec.nic_trace {
        fs::create_dir_all(t).with_context(|| format!("creating the trace directory {}", t.display()))?;
    }
    let ports = free_udp_ports(spec.guests as usize)?;
    let net_ports = free_udp_ports(2)?;
    let key = run_key(&dir, spec.no_key)?;
    cluster.remove_on_drop.extend(key.clone());
    let setpriv = setpriv_pdeathsig();
    eprintln!(
        "==> {} guest(s): virtual NICs, then QEMU (TCG, {} MiB each){}",
        spec.guests,
        spec.mem_mib,
        if spec.net_pair {
            format!("; virtio-net between guest 0 and guest 1 over UDP 127.0.0.1:{}<->{}", net_ports[0], net_ports[1])
        } else {
            String::new()
        }
    );
    for k in 0..spec.guests {
        cluster.add_guest(k, spec.mem_mib);
        let mut args = nic_args(k, &ports, key.as_deref());
        if let Some(dir) = &spec.nic_trace {
            args.extend(["--trace".into(), trace_file(dir, k).display().to_string()]);
        }
        cluster.start_nic(k, &nic_bin, &args, setpriv)?;
        if spec.net_pair && k < 2 {
            let (me, other) = (net_ports[k as usize], net_ports[1 - k as usize]);
            cluster.guest(k).qemu_extra = vec![
                "-netdev".into(),
                format!("socket,id=net0,udp=127.0.0.1:{other},localaddr=127.0.0.1:{me}"),
                "-device".into(),
                // romfile= : no iPXE option ROM (the kernel is booted directly).
                format!("virtio-net-pci,netdev=net0,mac={},romfile=", guest_mac(k)),
            ];
        }
        if k == 0 {
            cluster.guest(0).qemu_extra.extend(spec.guest0_qemu.iter().cloned());
        }
    }
    for k in 0..spec.guests {
        let mut append = Cluster::cmdline(k, spec.guests);
        if let Some(x) = spec.append.get(k as usize).filter(|x| !x.is_empty()) {
            append.push(' ');
            append.push_str(x);
        }
        cluster.start_qemu(k, &qemu, &spec.bzimage, &initrd, &append, setpriv)?;
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

    let t = Instant::now();
    let mut exited = false;
    let mut watch = spec.cpu_marks.as_ref().map(|_| MarkWatch::new(&cluster.guest(0).console));
    let mut procs: Vec<(String, u32)> = Vec::new();
    for g in &cluster.guests {
        procs.extend(g.qemu.as_ref().map(|c| (format!("qemu{}", g.idx), c.id())));
        procs.extend(g.nic.as_ref().map(|c| (format!("nic{}", g.idx), c.id())));
    }
    procs.extend(spec.cpu_marks.iter().flatten().cloned());
    let mut tick = 0u32;
    loop {
        check_interrupted()?;
        if let Some(w) = watch.as_mut() {
            w.poll(&procs);
            // Marks every 10 ms, the rest every 100 ms.
            tick = tick.wrapping_add(1);
            if !tick.is_multiple_of(10) {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        cluster.do_asks()?;
        for g in &mut cluster.guests {
            g.echo_console();
            if let Some(n) = g.nic.as_mut() {
                if let Some(st) = n.try_wait()? {
                    let text = fs::read_to_string(&g.nic_log).unwrap_or_default();
                    anyhow::bail!("trapeze-nic of guest {} exited ({st}):\n{}", g.idx, tail(&text, 20));
                }
            }
        }
        let g0 = cluster.guest(0);
        if let Some(st) = g0.qemu.as_mut().expect("started").try_wait()? {
            g0.echo_console();
            eprintln!("  guest 0: QEMU exited ({st}) after {:.1?}", t.elapsed());
            g0.qemu = None;
            exited = true;
            break;
        }
        if t.elapsed() >= spec.timeout {
            eprintln!("  guest 0: still running after {:?}: stopping every guest", spec.timeout);
            break;
        }
        if watch.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for g in &mut cluster.guests {
        if let Some(mut q) = g.qemu.take() {
            if g.idx != 0 {
                eprintln!("  guest {}: stopping (it only serves)", g.idx);
            }
            let _ = q.kill();
            let _ = q.wait();
        }
        g.echo_console();
    }
    let out = cluster
        .guests
        .iter()
        .map(|g| {
            let console = fs::read_to_string(&g.console).unwrap_or_default();
            let trouble =
                console.lines().filter(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t))).map(printable).collect();
            let marks = if g.idx == 0 {
                watch.as_mut().map(|w| std::mem::take(&mut w.marks)).unwrap_or_default()
            } else {
                Vec::new()
            };
            GuestOutcome {
                idx: g.idx,
                console,
                console_path: g.console.clone(),
                exited: g.idx == 0 && exited,
                trouble,
                marks,
            }
        })
        .collect();
    drop(cluster);
    eprintln!("runtime dir {} (RAM files and sockets removed; logs kept until the next run)", dir.display());
    if let Some(trace) = &spec.nic_trace {
        let report = Command::new(&nic_bin)
            .arg("trace-report")
            .args((0..spec.guests).map(|k| trace_file(trace, k)))
            .output()
            .context("running trapeze-nic trace-report")?;
        ensure!(report.status.success(), "trapeze-nic trace-report: {}", String::from_utf8_lossy(&report.stderr));
        eprintln!("==> round trips between the NICs (trapeze-nic trace-report {}/node*.trace)", trace.display());
        eprint!("{}", String::from_utf8_lossy(&report.stdout));
    }
    Ok(out)
}

/// Guest `k`'s NIC trace in `dir`.
fn trace_file(dir: &Path, k: u16) -> PathBuf {
    dir.join(format!("node{k}.trace"))
}

/// Append a gzipped newc archive holding `files` (and their parent directories) to the
/// gzipped initramfs `gz`.
pub(super) fn append_files(gz: &Path, files: &[(String, Vec<u8>, u32)]) -> anyhow::Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let mut c = Cpio::default();
    let mut dirs = BTreeSet::new();
    for (path, _, _) in files {
        let rel = path.trim_start_matches('/');
        let mut acc = String::new();
        for part in Path::new(rel).parent().into_iter().flat_map(|p| p.iter()) {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(&part.to_string_lossy());
            dirs.insert(acc.clone());
        }
    }
    // BTreeSet order puts every parent before its children.
    for d in &dirs {
        c.dir(d);
    }
    let mut total = 0;
    for (path, data, perm) in files {
        c.file(path.trim_start_matches('/'), *perm, data);
        total += data.len();
    }
    let extra = gz.with_extension("extra.cpio");
    fs::write(&extra, c.finish())?;
    let st = Command::new("gzip").args(["-6", "-n", "-f"]).arg(&extra).status().context("running gzip")?;
    ensure!(st.success(), "gzip {} failed ({st})", extra.display());
    let extra_gz = PathBuf::from(format!("{}.gz", extra.display()));
    let bytes = fs::read(&extra_gz)?;
    let _ = fs::remove_file(&extra_gz);
    let mut f = fs::OpenOptions::new().append(true).open(gz).with_context(|| format!("opening {}", gz.display()))?;
    std::io::Write::write_all(&mut f, &bytes)?;
    eprintln!(
        "  appended {} file(s), {} KiB ({} KiB gzipped): {}",
        files.len(),
        total / 1024,
        bytes.len() / 1024,
        files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(" ")
    );
    Ok(())
}

/// The workspace's cargo target directory.
pub fn target_dir() -> anyhow::Result<PathBuf> {
    super::runtime::target_dir()
}

/// `data` as one kernel command-line word's value (standard base64; /init's scripts
/// decode it with busybox `base64 -d`).
pub fn base64_word(data: &str) -> String {
    base64(data.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_files_are_a_second_archive_with_their_directories() {
        let dir = std::env::temp_dir().join(format!("bench-guests-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let gz = dir.join("initramfs.cpio.gz");
        let first =
            Command::new("sh").arg("-c").arg(format!("printf first | gzip -n > {}", gz.display())).status().unwrap();
        assert!(first.success());
        let files = vec![
            ("/lib/x86_64-linux-gnu/libx.so.1".to_string(), b"LIBX".to_vec(), 0o755),
            ("/usr/bin/tool".to_string(), b"TOOL".to_vec(), 0o755),
        ];
        append_files(&gz, &files).unwrap();
        let out = Command::new("gzip").arg("-dc").arg(&gz).output().unwrap();
        assert!(out.status.success(), "both gzip members decompress");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("first070701"), "the original archive comes first");
        let pos = |s: &str| text.find(s).unwrap_or_else(|| panic!("{s} missing"));
        assert!(pos("lib\0") < pos("lib/x86_64-linux-gnu\0"));
        assert!(pos("lib/x86_64-linux-gnu\0") < pos("lib/x86_64-linux-gnu/libx.so.1\0"));
        assert!(pos("usr/bin\0") < pos("usr/bin/tool\0") && text.contains("LIBX") && text.contains("TOOL"));
        assert!(text.ends_with('\0') && text.contains("TRAILER!!!"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn guest_macs_are_distinct_and_local() {
        assert_eq!(guest_mac(0), "52:54:00:74:70:00");
        assert_ne!(guest_mac(1), guest_mac(2));
    }
}
