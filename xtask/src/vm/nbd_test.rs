// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm nbd-test`: guests' kernel NBD clients on gmblock's NBD export: one
//! mounts ext4 from it, then three share the volume (`kernel-crate/guest/nbd.sh`, a stage
//! of `cargo xtask test`).
//!
//! On the host: two `gmblockd` servers (nodes 1 and 2) each on a 32 MiB file in the target
//! directory (a disk file system: they open it with `O_DIRECT`), and nbdkit with gmblock's
//! plugin exporting the volume striped over both at a 32 KiB grain (64 MiB), its requests
//! logged by nbdkit's `log` filter. Each guest has a virtio-net interface on QEMU's
//! user-mode network (`-netdev user`), where 10.0.2.2 is the host's 127.0.0.1, and
//! connects `/dev/nbd0` to the export with Debian's `nbd-client`. Guest 0 makes an ext4
//! file system on the first 48 MiB with Debian's `mke2fs` (both copied into the initramfs
//! with their libraries), writes files, remounts with caches dropped and checks every
//! file's md5sum. Then the shared volume ([`nbd_shared`]): guest 0 writes two regions
//! after the file system and flushes them before it writes a header; guests 1 and 2 wait
//! for the header, read the writer's first region with O_DIRECT and check it; then all
//! three read the second region at once, each checking every pass.
//! After they power off, xtask stops nbdkit and the servers, reassembles the volume from
//! the two servers' files (stripe unit u is on server u mod 2 at unit u div 2), checks it
//! with `e2fsck -fn`, reads every file guest 0 listed out of it with `debugfs` and both
//! shared regions, comparing md5sums with the guests', and finds in nbdkit's log the
//! writer's FLUSH before its header and the three guests' reads of the common region in
//! flight during one span. It passes when every guest's checks show no FAIL and end with a
//! total of 0 failed, every guest powered off with a quiet kernel, and the host's checks
//! pass; a failing guest is named with its first FAIL line. Without nbdkit, nbd-client or
//! e2fsprogs it is skipped ("skipped: needs …").

use super::bench_guests::append_files;
use super::cluster::{child_command, setpriv_pdeathsig, tail};
use super::host_proc::{wait_listening, HostProc, USER_NET};
use super::nbd_shared::{self, GUESTS};
use super::report::{pass_fail, printable, yes_no};
use super::runtime::{free_udp_ports, target_dir, which};
use super::session::{Common, Prepared, Setup};
use anyhow::Context;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest's script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/nbd.sh";
/// Shortest power-off wait (boot, mkfs.ext4 and about 5 MiB of files over emulated TCP
/// under TCG, a remount, then the shared volume: 10 MiB written, 2 MiB read by each
/// reader and at least 24 MiB by every guest).
const MIN_TIMEOUT: u64 = 300;
/// The prefix of the script's lines.
const PREFIX: &str = "trapeze-nbd: ";
/// Bytes each server holds.
const SERVER_BYTES: u64 = 32 << 20;
/// The stripe unit.
const GRAIN: usize = 32 << 10;
/// The servers' node ids on the link; the plugin's.
const SERVERS: [u16; 2] = [1, 2];
const PLUGIN_NODE: u16 = 9;
/// Host programs the stage needs: (program, package).
const NEEDS: [(&str, &str); 5] = [
    ("nbdkit", "nbdkit"),
    ("nbd-client", "nbd-client"),
    ("mke2fs", "e2fsprogs"),
    ("e2fsck", "e2fsprogs"),
    ("debugfs", "e2fsprogs"),
];
/// nbdkit's request log (its `log` filter) in the runtime directory.
const REQUEST_LOG: &str = "nbdkit-requests.log";
/// Programs copied into the initramfs with their libraries.
const GUEST_PROGRAMS: [&str; 2] = ["/usr/sbin/nbd-client", "/usr/sbin/mke2fs"];

#[derive(clap::Args)]
pub struct NbdTestArgs {
    #[command(flatten)]
    common: Common,
}

/// What is missing on the host, as "needs: …", if anything is (`xtask test` then lists
/// the stage as skipped).
pub(crate) fn missing() -> Option<String> {
    let gone: Vec<String> =
        NEEDS.iter().filter(|(p, _)| which(p).is_none()).map(|(p, pkg)| format!("{p} ({pkg})")).collect();
    (!gone.is_empty()).then(|| format!("needs: {} (apt-get install them)", gone.join(", ")))
}

/// The servers, then nbdkit with the plugin striping over them on `nbd_port`.
fn start_export(bin: &Path, dir: &Path, files: &[PathBuf], nbd_port: u16) -> anyhow::Result<Vec<HostProc>> {
    let setpriv = setpriv_pdeathsig();
    let ports = free_udp_ports(SERVERS.len() + 1)?;
    let plugin_addr = format!("127.0.0.1:{}", ports[SERVERS.len()]);
    let mut procs = Vec::new();
    let mut params = Vec::new();
    for (k, (&node, file)) in SERVERS.iter().zip(files).enumerate() {
        let listen = format!("127.0.0.1:{}", ports[k]);
        let mut cmd = child_command(&bin.join("gmblockd"), setpriv);
        cmd.args(["--node", &node.to_string(), "--listen", &listen])
            .args(["--peer", &format!("{PLUGIN_NODE}={plugin_addr}")])
            .arg("--export")
            .arg(file);
        procs.push(HostProc::start("gmblockd", cmd, dir.join(format!("gmblockd{node}.log")))?);
        params.push(format!("server={node}={listen}"));
    }
    params.extend([format!("grain={}K", GRAIN >> 10), format!("node={PLUGIN_NODE}"), format!("listen={plugin_addr}")]);
    let mut cmd = child_command(&which("nbdkit").context("nbdkit")?, setpriv);
    cmd.args(["-f", "-i", "127.0.0.1", "-p", &nbd_port.to_string(), "--filter=log"])
        .arg(bin.join("libgmblock_nbdkit.so"))
        .args(&params)
        .arg(format!("logfile={}", dir.join(REQUEST_LOG).display()));
    eprintln!("  nbdkit {}", params.join(" "));
    procs.push(HostProc::start("nbdkit", cmd, dir.join("nbdkit.log"))?);
    wait_listening(nbd_port, &mut procs).context("nbdkit")?;
    Ok(procs)
}

/// The striped volume rebuilt from the servers' files.
fn reassemble(files: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let disks: Vec<Vec<u8>> = files
        .iter()
        .map(|f| fs::read(f).with_context(|| format!("reading {}", f.display())))
        .collect::<Result<_, _>>()?;
    let units = disks.iter().map(|d| d.len() / GRAIN).min().unwrap_or(0);
    let mut vol = Vec::with_capacity(units * GRAIN * disks.len());
    for u in 0..units {
        for d in &disks {
            vol.extend_from_slice(&d[u * GRAIN..(u + 1) * GRAIN]);
        }
    }
    fs::write(out, &vol).with_context(|| format!("writing {}", out.display()))
}

/// `e2fsck -fn` over the image, and each file the guest listed read out with `debugfs`
/// against its md5sum: what was found, and what failed.
fn host_checks(image: &Path, console: &str) -> (Vec<String>, Vec<String>) {
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    match Command::new("e2fsck").arg("-fn").arg(image).output() {
        Ok(o) if o.status.success() => found.push("e2fsck -fn: clean".to_string()),
        Ok(o) => failed.push(format!(
            "e2fsck -fn ({}): {}",
            o.status,
            tail(&format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), 8)
        )),
        Err(e) => failed.push(format!("running e2fsck: {e}")),
    }
    let listed = listed_files(console);
    if listed.is_empty() {
        failed.push("the guest listed no files".into());
    }
    for (name, sum) in &listed {
        let script = format!("debugfs -R 'cat /{name}' '{}' 2>/dev/null | md5sum", image.display());
        match Command::new("sh").args(["-c", &script]).output() {
            Ok(o) if String::from_utf8_lossy(&o.stdout).split_whitespace().next() == Some(sum.as_str()) => {
                found.push(format!("debugfs: /{name} md5 {sum}"));
            }
            Ok(o) => failed.push(format!(
                "debugfs: /{name} md5 {} (the guest wrote {sum})",
                String::from_utf8_lossy(&o.stdout).trim()
            )),
            Err(e) => failed.push(format!("running debugfs: {e}")),
        }
    }
    (found, failed)
}

/// The files the guest listed (`trapeze-nbd: file NAME MD5`): (name, md5).
fn listed_files(console: &str) -> Vec<(String, String)> {
    console
        .lines()
        .map(printable)
        .filter_map(|l| {
            let mut w = l.strip_prefix(PREFIX)?.strip_prefix("file ")?.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// The extra initramfs files: the NBD client and mke2fs with their libraries, mke2fs's
/// configuration, and the port with the shared area's `env`.
fn guest_files(nbd_port: u16, env: &str) -> anyhow::Result<Vec<(String, Vec<u8>, u32)>> {
    let mut files = super::programs_with_libraries(&GUEST_PROGRAMS)?;
    if let Ok(conf) = fs::read("/etc/mke2fs.conf") {
        files.push(("/etc/mke2fs.conf".into(), conf, 0o644));
    }
    files.push(("/etc/trapeze/nbd.env".into(), format!("port={nbd_port}\n{env}").into_bytes(), 0o644));
    Ok(files)
}

pub(super) fn run(a: NbdTestArgs) -> anyhow::Result<()> {
    if let Some(why) = missing() {
        eprintln!("xtask vm nbd-test: skipped: {why}");
        return Ok(());
    }
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let prepared = Prepared::build(&a.common, false)?;
    eprintln!("==> gmblockd and the NBD plugin: cargo build -p trapeze-gmblock -p trapeze-gmblock-nbdkit");
    crate::cargo(&["build", "--locked", "-p", "trapeze-gmblock", "--bin", "gmblockd"])?;
    crate::cargo(&["build", "--locked", "-p", "trapeze-gmblock-nbdkit", "--lib"])?;
    let bin = target_dir()?.join("debug");
    let work = target_dir()?.join(format!("tmp/nbd-test-{}", std::process::id()));
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let files: Vec<PathBuf> = SERVERS.iter().map(|n| work.join(format!("server{n}.vol"))).collect();
    for f in &files {
        fs::File::create(f)
            .and_then(|h| h.set_len(SERVER_BYTES))
            .with_context(|| format!("creating {}", f.display()))?;
    }
    let nbd_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();

    let setup = Setup { guests: GUESTS, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = prepared.start(&a.common, setup)?;
    eprintln!("==> the export: 2 gmblockd servers ({} MiB each), nbdkit on 127.0.0.1:{nbd_port}", SERVER_BYTES >> 20);
    let mut procs = start_export(&bin, &s.dir, &files, nbd_port)?;
    let env = nbd_shared::env(&nbd_shared::nonce(), timeout);
    append_files(&s.dir.join("initramfs.cpio.gz"), &guest_files(nbd_port, &env)?)?;
    // QEMU's user-mode network, one per guest.
    for k in 0..GUESTS {
        s.cluster.guest(k).qemu_extra.extend(USER_NET.map(String::from));
    }
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let alive: Vec<String> = procs.iter_mut().filter_map(|p| p.alive().err()).map(|e| format!("{e:#}")).collect();
    procs.iter_mut().for_each(HostProc::stop);

    let consoles: Vec<String> = (0..GUESTS).map(|k| s.console(k)).collect();
    let console = &consoles[0];
    let mut failures = s.report(false, |g| {
        let r = &g.report;
        let (passed, failed, done) = pass_fail(g.console, PREFIX);
        let ok = r.powered_off && !r.kernel_trouble && r.script_ok && done && passed > 0 && failed == 0;
        let first_fail = g.console.lines().map(printable).find(|l| l.starts_with(&format!("{PREFIX}FAIL ")));
        let what = format!(
            "nbd checks: {passed} passed, {failed} failed{}{}; script status 0: {}; kernel quiet: {}",
            if done { "" } else { " (script did not finish)" },
            first_fail.map_or(String::new(), |l| format!(" (first: \"{l}\")")),
            yes_no(r.script_ok),
            yes_no(!r.kernel_trouble),
        );
        (ok, what)
    });
    for (k, c) in consoles.iter().enumerate() {
        for l in c.lines().map(printable).filter(|l| l.starts_with(PREFIX)) {
            eprintln!("    g{k} | {l}");
        }
    }
    failures.extend(alive.into_iter().map(|e| format!("a host process died during the run: {e}")));
    let image = work.join("volume.img");
    let (found, failed) = match reassemble(&files, &image) {
        Ok(()) => {
            let (mut found, mut failed) = host_checks(&image, console);
            let log = fs::read_to_string(s.dir.join(REQUEST_LOG)).unwrap_or_default();
            let (f, e) = nbd_shared::checks(&consoles, PREFIX, &log, &image);
            found.extend(f);
            failed.extend(e);
            (found, failed)
        }
        Err(e) => (Vec::new(), vec![format!("{e:#}")]),
    };
    for l in &found {
        eprintln!("host: {l}");
    }
    for l in &failed {
        eprintln!("host: FAIL {l}");
    }
    if !failed.is_empty() {
        failures
            .push(format!("host checks (the servers' files, the guests' sums, nbdkit's log): {}", failed.join("; ")));
    }
    if failures.is_empty() {
        let _ = fs::remove_dir_all(&work);
    } else {
        eprintln!("the servers' files and the reassembled volume are kept in {}", work.display());
    }
    s.finish(all_off, timeout, &failures, "nbd test", "nbd test passed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_is_rebuilt_unit_by_unit_across_the_servers() {
        let dir = std::env::temp_dir().join(format!("xtask-nbd-reassemble-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let unit = |s: u8, u: u8| vec![s * 16 + u; GRAIN];
        let files: Vec<PathBuf> = (0..2u8)
            .map(|s| {
                let p = dir.join(format!("s{s}"));
                fs::write(&p, [unit(s, 0), unit(s, 1), unit(s, 2)].concat()).unwrap();
                p
            })
            .collect();
        let out = dir.join("vol");
        reassemble(&files, &out).unwrap();
        let vol = fs::read(&out).unwrap();
        let firsts: Vec<u8> = vol.chunks(GRAIN).map(|c| c[0]).collect();
        assert_eq!(firsts, [0, 16, 1, 17, 2, 18], "unit u of the volume is server u % 2's unit u / 2");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_guests_file_lines_are_read_back() {
        let console =
            "trapeze-nbd: PASS x\r\ntrapeze-nbd: file small 0123abcd\nnoise\ntrapeze-nbd: file dir/sub/copy 99ff\n";
        assert_eq!(
            listed_files(console),
            [("small".to_string(), "0123abcd".to_string()), ("dir/sub/copy".to_string(), "99ff".to_string())]
        );
    }
}
