// SPDX-License-Identifier: GPL-2.0-only
//! The guest phase of `cargo xtask bench block` (`stripe_md`): a volume striped by gmblock
//! over four `gmblockd` servers, read through the guest kernel's NBD client, against Linux
//! md RAID-0 striping the same four servers, each read through its own NBD device, in the
//! same guest (`kernel-crate/guest/md.sh`).
//!
//! On the host: four `gmblockd` (nodes 1–4), each on its own file in the target directory
//! (a disk file system: they open it with `O_DIRECT`) with the same modelled disk, each
//! accepting two peers: nbdkit with gmblock's plugin striped over all four (32 KiB grain,
//! the plugin's default read-ahead), and one nbdkit per server with the plugin exporting
//! that server alone. md's members thus go through the same plugin and the same modelled
//! disks: the only difference is who stripes. Debian's `nbd-server` is not md's member
//! here: it cannot model a disk, and over page-cache files the guest's network would be
//! measured, not the striping. Two ceilings are read too: `nbdkit memory` (the guest's NBD
//! path over QEMU's user-mode network) and a fifth, unmodelled `gmblockd` through the
//! plugin alone (that path with gmblock in it). A secondary side, `md1`, is md RAID-0 over
//! four exports of one Debian `nbd-server` serving the four servers' files unmodelled
//! (from the host's page cache): what md over the usual NBD server reads on this network,
//! not a comparison of striping.
//!
//! The guest (QEMU TCG, `-netdev user`, the host's 127.0.0.1 is 10.0.2.2) connects the
//! NBD devices with Debian's `nbd-client`, builds `/dev/md0` with Debian's `mdadm --build`
//! (no superblock: nothing is written), checksums both volumes once and reads each in
//! interleaved rounds with Debian's `dd bs=1M iflag=direct` (all three copied into the
//! initramfs with their libraries). [`parse`] turns its lines into [`MdReads`]; a missing
//! or malformed line, or volumes whose bytes differ, is an error.

use super::bench_guests::append_files;
use super::cluster::{child_command, setpriv_pdeathsig};
use super::host_proc::{wait_listening, HostProc, USER_NET};
use super::report::{pass_fail, printable, yes_no};
use super::runtime::{free_udp_ports, target_dir, which};
use super::session::{Common, Prepared, Setup};
use anyhow::{bail, ensure, Context};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The guest's script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/md.sh";
/// The prefix of the script's lines.
const PREFIX: &str = "trapeze-md: ";
/// The striped servers' node ids; the unmodelled ceiling server's.
const SERVERS: [u16; 4] = [1, 2, 3, 4];
const PLAIN_SERVER: u16 = 5;
/// The plugins' node ids: the striped export's; a single export's is this plus its server's.
const STRIPED_NODE: u16 = 10;
/// The stripe unit (md's chunk too), KiB.
pub(crate) const GRAIN_KIB: u64 = 32;
/// Host programs the phase needs: (program, package).
const NEEDS: [(&str, &str); 6] = [
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("nbdkit", "nbdkit"),
    ("nbd-server", "nbd-server"),
    ("nbd-client", "nbd-client"),
    ("mdadm", "mdadm"),
    ("dd", "coreutils"),
];
/// Programs copied into the initramfs with their libraries.
const GUEST_PROGRAMS: [&str; 3] = ["/usr/sbin/nbd-client", "/usr/sbin/mdadm", "/usr/bin/dd"];

/// What the phase runs.
pub(crate) struct MdPlan {
    /// Interleaved rounds (each reads both volumes once).
    pub rounds: u32,
    /// MiB read per side and round (the volumes' size).
    pub mib: u64,
    /// Each server's modelled disk.
    pub model_mbps: f64,
    pub model_latency_us: u64,
    /// Where the release `gmblockd` and `libgmblock_nbdkit.so` are.
    pub bin: PathBuf,
}

/// One timed read in the guest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    /// `nbd0` (gmblock's stripe), `md0` (md's), `md1` (md over nbd-server),
    /// `ceiling_memory`, `ceiling_plain`.
    pub side: String,
    /// 1.. for the compared sides, 0 for the ceilings.
    pub round: u32,
    pub bytes: u64,
    pub secs: f64,
}

impl Read {
    pub(crate) fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }
}

/// What the guest measured.
#[derive(Debug)]
pub(crate) struct MdReads {
    pub reads: Vec<Read>,
    /// The volumes' md5sum (the same on both sides).
    pub md5: String,
}

impl MdReads {
    /// The read of `side` in `round`.
    pub(crate) fn of(&self, side: &str, round: u32) -> Option<&Read> {
        self.reads.iter().find(|r| r.side == side && r.round == round)
    }
}

/// What is missing on the host for the phase, as "needs: …", if anything is.
pub(crate) fn missing() -> Option<String> {
    let gone: Vec<String> =
        NEEDS.iter().filter(|(p, _)| which(p).is_none()).map(|(p, pkg)| format!("{p} ({pkg})")).collect();
    if !gone.is_empty() {
        return Some(format!("needs: {} (apt-get install them)", gone.join(", ")));
    }
    let kernel = crate::kernel::Paths::new().map(|p| p.bzimage());
    match kernel {
        Ok(bz) if bz.is_file() => None,
        Ok(bz) => Some(format!("needs the guest kernel ({} is missing: cargo xtask kernel)", bz.display())),
        Err(e) => Some(format!("needs the guest kernel ({e:#})")),
    }
}

/// The servers' files: removed on drop, whatever ends the run.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The guest's lines: every read of every round and both checksums, or what is wrong.
pub(crate) fn parse(console: &str, rounds: u32) -> anyhow::Result<MdReads> {
    let mut reads = Vec::new();
    let mut sums: Vec<(String, String)> = Vec::new();
    for l in console.lines().map(printable) {
        let Some(t) = l.strip_prefix(PREFIX) else { continue };
        if let Some(rest) = t.strip_prefix("read ") {
            reads.push(parse_read(rest).with_context(|| format!("the guest's line {l:?}"))?);
        } else if let Some(rest) = t.strip_prefix("md5 ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            ensure!(w.len() == 2 && w[1].len() == 32, "the guest's line {l:?}: not \"md5 SIDE SUM\"");
            sums.push((w[0].to_string(), w[1].to_string()));
        }
    }
    for side in ["ceiling_memory", "ceiling_plain"] {
        ensure!(reads.iter().any(|r| r.side == side && r.round == 0), "the guest printed no read of {side}");
    }
    for r in 1..=rounds {
        for side in ["nbd0", "md0", "md1"] {
            ensure!(
                reads.iter().any(|x| x.side == side && x.round == r),
                "the guest printed no read of {side} in round {r}"
            );
        }
    }
    let sum = |side: &str| sums.iter().find(|s| s.0 == side).map(|s| s.1.clone());
    let (Some(a), Some(b), Some(c)) = (sum("nbd0"), sum("md0"), sum("md1")) else {
        bail!("the guest printed no md5 of nbd0, md0 and md1")
    };
    ensure!(a == b, "gmblock's striped volume (md5 {a}) and md's (md5 {b}) read different bytes");
    ensure!(a == c, "gmblock's striped volume (md5 {a}) and md's over nbd-server (md5 {c}) read different bytes");
    Ok(MdReads { reads, md5: a })
}

/// "SIDE ROUND BYTES SECONDS", bytes and seconds positive.
fn parse_read(rest: &str) -> anyhow::Result<Read> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    ensure!(w.len() == 4, "not \"read SIDE ROUND BYTES SECONDS\" (dd printed no byte count?)");
    let read = Read {
        side: w[0].to_string(),
        round: w[1].parse().context("the round")?,
        bytes: w[2].parse().context("the bytes")?,
        secs: w[3].parse().context("the seconds")?,
    };
    ensure!(read.bytes > 0 && read.secs > 0.0 && read.secs.is_finite(), "no bytes, or no time");
    Ok(read)
}

/// A file of `mib` MiB of seeded pseudo-random bytes (so a misplaced stripe shows).
fn pattern_file(path: &Path, mib: u64, seed: u64) -> anyhow::Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for c in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&buf).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A free TCP port on 127.0.0.1 for each of `n` listeners.
fn free_tcp_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let held: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// The TCP ports of the guest's exports.
struct Ports {
    striped: u16,
    members: Vec<u16>,
    memory: u16,
    plain: u16,
    nbd_server: u16,
}

/// Debian's `nbd-server` (it forks into the background): killed by its pid file's pid on drop.
struct NbdServer {
    pid: Option<rustix::process::Pid>,
}

impl NbdServer {
    /// One nbd-server on 127.0.0.1:`port` exporting `files` read-only as m1, m2, ….
    fn start(dir: &Path, files: &[PathBuf], port: u16) -> anyhow::Result<NbdServer> {
        let (conf, pidf) = (dir.join("md-nbd-server.conf"), dir.join("md-nbd-server.pid"));
        let mut text = format!("[generic]\n    port = {port}\n    listenaddr = 127.0.0.1\n");
        for (k, f) in files.iter().enumerate() {
            text += &format!("[m{}]\n    exportname = {}\n    readonly = true\n", k + 1, f.display());
        }
        fs::write(&conf, text).with_context(|| format!("writing {}", conf.display()))?;
        let out = std::process::Command::new("nbd-server").arg("-C").arg(&conf).arg("-p").arg(&pidf).output();
        let out = out.context("running nbd-server")?;
        ensure!(out.status.success(), "nbd-server failed to start: {}", String::from_utf8_lossy(&out.stderr).trim());
        // The daemon creates its pid file, then writes it: wait for a number.
        let t = std::time::Instant::now();
        loop {
            let pid = fs::read_to_string(&pidf).ok().and_then(|s| s.trim().parse::<i32>().ok());
            if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
                eprintln!("  nbd-server: pid {} on 127.0.0.1:{port} ({})", pid.as_raw_nonzero(), conf.display());
                return Ok(NbdServer { pid: Some(pid) });
            }
            ensure!(t.elapsed().as_secs() < 10, "nbd-server wrote no pid to {} in 10 s", pidf.display());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The servers and the nbdkits: the striped export, one per server, the memory and the
/// unmodelled ceilings.
fn start_host(plan: &MdPlan, dir: &Path, work: &Path) -> anyhow::Result<(Vec<HostProc>, NbdServer, Ports)> {
    let setpriv = setpriv_pdeathsig();
    let udp = free_udp_ports(2 * (SERVERS.len() + 1) + 1)?;
    let tcp = free_tcp_ports(SERVERS.len() + 4)?;
    let addr = |p: u16| format!("127.0.0.1:{p}");
    // UDP: the servers 1..=5, then the plugins 10, 11..=14, 15.
    let server_udp = |n: u16| udp[n as usize - 1];
    let plugin_udp = |n: u16| udp[SERVERS.len() + 1 + (n - STRIPED_NODE) as usize];
    let ports = Ports {
        striped: tcp[0],
        members: tcp[1..=SERVERS.len()].to_vec(),
        memory: tcp[5],
        plain: tcp[6],
        nbd_server: tcp[7],
    };
    let per_server = plan.mib.div_ceil(SERVERS.len() as u64);
    let mut procs = Vec::new();
    for n in SERVERS.into_iter().chain([PLAIN_SERVER]) {
        let file = work.join(format!("server{n}.vol"));
        let (mib, peers) = if n == PLAIN_SERVER {
            (plan.mib, vec![STRIPED_NODE + n])
        } else {
            (per_server, vec![STRIPED_NODE, STRIPED_NODE + n])
        };
        pattern_file(&file, mib, n.into())?;
        let mut cmd = child_command(&plan.bin.join("gmblockd"), setpriv);
        cmd.args(["--node", &n.to_string(), "--listen", &addr(server_udp(n)), "--read-only"])
            .arg("--export")
            .arg(&file);
        for p in peers {
            cmd.args(["--peer", &format!("{p}={}", addr(plugin_udp(p)))]);
        }
        if n != PLAIN_SERVER {
            cmd.args(["--model-mbps", &plan.model_mbps.to_string()]);
            cmd.args(["--model-latency-us", &plan.model_latency_us.to_string()]);
        }
        procs.push(HostProc::start("gmblockd", cmd, dir.join(format!("gmblockd{n}.log")))?);
    }
    let nbdkit = which("nbdkit").context("nbdkit")?;
    let mut exports: Vec<(u16, Vec<String>)> = vec![(
        ports.striped,
        SERVERS
            .iter()
            .map(|&n| format!("server={n}={}", addr(server_udp(n))))
            .chain([format!("grain={GRAIN_KIB}K"), format!("node={STRIPED_NODE}")])
            .chain([format!("listen={}", addr(plugin_udp(STRIPED_NODE)))])
            .collect(),
    )];
    for (k, n) in SERVERS.into_iter().chain([PLAIN_SERVER]).enumerate() {
        let port = if n == PLAIN_SERVER { ports.plain } else { ports.members[k] };
        let node = STRIPED_NODE + n;
        exports.push((
            port,
            vec![
                format!("server={n}={}", addr(server_udp(n))),
                format!("node={node}"),
                format!("listen={}", addr(plugin_udp(node))),
            ],
        ));
    }
    for (port, params) in &exports {
        let mut cmd = child_command(&nbdkit, setpriv);
        cmd.args(["-f", "-r", "-i", "127.0.0.1", "-p", &port.to_string()])
            .arg(plan.bin.join("libgmblock_nbdkit.so"))
            .args(params);
        eprintln!("  nbdkit :{port} {}", params.join(" "));
        procs.push(HostProc::start("nbdkit", cmd, dir.join(format!("nbdkit-{port}.log")))?);
    }
    let mut cmd = child_command(&nbdkit, setpriv);
    cmd.args(["-f", "-i", "127.0.0.1", "-p", &ports.memory.to_string(), "memory", &format!("size={}M", plan.mib)]);
    procs.push(HostProc::start("nbdkit memory", cmd, dir.join("nbdkit-memory.log"))?);
    for (port, _) in &exports {
        wait_listening(*port, &mut procs).context("an nbdkit of the md phase")?;
    }
    wait_listening(ports.memory, &mut procs).context("nbdkit memory")?;
    let files: Vec<PathBuf> = SERVERS.iter().map(|n| work.join(format!("server{n}.vol"))).collect();
    let nbd_server = NbdServer::start(dir, &files, ports.nbd_server)?;
    wait_listening(ports.nbd_server, &mut procs).context("nbd-server")?;
    Ok((procs, nbd_server, ports))
}

/// The extra initramfs files: nbd-client, mdadm and dd with their libraries, and the env.
fn guest_files(plan: &MdPlan, ports: &Ports) -> anyhow::Result<Vec<(String, Vec<u8>, u32)>> {
    let mut files = super::programs_with_libraries(&GUEST_PROGRAMS)?;
    let members: Vec<String> = ports.members.iter().map(u16::to_string).collect();
    let env = format!(
        "striped={}\nmembers=\"{}\"\nmemory={}\nplain={}\nnbd_server={}\nrounds={}\nmib={}\n",
        ports.striped,
        members.join(" "),
        ports.memory,
        ports.plain,
        ports.nbd_server,
        plan.rounds,
        plan.mib
    );
    files.push(("/etc/trapeze/md.env".into(), env.into_bytes(), 0o644));
    Ok(files)
}

/// Boot the guest beside the host's servers and exports, and read what it measured.
pub(crate) fn run(plan: &MdPlan) -> anyhow::Result<MdReads> {
    if let Some(why) = missing() {
        bail!("the md phase (stripe_md) {why}; or leave it out with --no-md");
    }
    // Boot and the checksums take a minute or two under TCG; each read of the modelled
    // volumes at least mib / (4 × model) s.
    let reads = 2 * u64::from(plan.rounds) + 4;
    let per_read = plan.mib as f64 * 1.05 / (plan.model_mbps * SERVERS.len() as f64 / 2.0).max(0.5);
    let timeout = 300 + (reads as f64 * per_read * 4.0) as u64;
    let common = Common { mem: 256, timeout, append: None, module: Vec::new(), no_key: false };
    let prepared = Prepared::build(&common, false)?;
    let work = WorkDir(target_dir()?.join(format!("tmp/md-bench-{}", std::process::id())));
    fs::create_dir_all(&work.0).with_context(|| format!("creating {}", work.0.display()))?;
    let setup = Setup { guests: 1, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = prepared.start(&common, setup)?;
    eprintln!(
        "==> md phase: 4 gmblockd ({} MB/s, {} µs modelled) and 7 nbdkit",
        plan.model_mbps, plan.model_latency_us
    );
    let (mut procs, mut nbd_server, ports) = start_host(plan, &s.dir, &work.0)?;
    append_files(&s.dir.join("initramfs.cpio.gz"), &guest_files(plan, &ports)?)?;
    s.cluster.guest(0).qemu_extra.extend(USER_NET.map(String::from));
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let alive: Vec<String> = procs.iter_mut().filter_map(|p| p.alive().err()).map(|e| format!("{e:#}")).collect();
    procs.iter_mut().for_each(HostProc::stop);
    nbd_server.stop();
    drop(work);
    let console = s.console(0);
    let mut failures = s.report(false, |g| {
        let r = &g.report;
        let (passed, failed, done) = pass_fail(g.console, PREFIX);
        let ok = r.powered_off && !r.kernel_trouble && done && passed > 0 && failed == 0;
        let what = format!(
            "md phase checks: {passed} passed, {failed} failed{}; kernel quiet: {}",
            if done { "" } else { " (script did not finish)" },
            yes_no(!r.kernel_trouble),
        );
        (ok, what)
    });
    for l in console.lines().map(printable).filter(|l| l.starts_with(PREFIX)) {
        eprintln!("    | {l}");
    }
    failures.extend(alive.into_iter().map(|e| format!("a host process died during the run: {e}")));
    s.finish(all_off, timeout, &failures, "the md phase (stripe_md)", "md phase done")?;
    parse(&console, plan.rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "0123456789abcdef0123456789abcdef";

    fn console(rounds: u32) -> String {
        let mut c = String::from("noise\r\ntrapeze-md: PASS x\ntrapeze-md: read ceiling_memory 0 33554432 0.5\n");
        c += "trapeze-md: read ceiling_plain 0 33554432 1.0\n";
        c += &format!("trapeze-md: md5 nbd0 {SUM}\ntrapeze-md: md5 md0 {SUM}\ntrapeze-md: md5 md1 {SUM}\n");
        for r in 1..=rounds {
            c += &format!("trapeze-md: read nbd0 {r} 33554432 2\ntrapeze-md: read md0 {r} 33554432 4\r\n");
            c += &format!("trapeze-md: read md1 {r} 33554432 1\n");
        }
        c
    }

    #[test]
    fn the_guests_reads_are_parsed() {
        let m = parse(&console(2), 2).unwrap();
        assert_eq!(m.md5, SUM);
        assert_eq!(m.reads.len(), 8);
        assert_eq!(m.of("nbd0", 2).unwrap().mb_s(), 33554432.0 / 2.0 / 1e6);
        assert_eq!(m.of("ceiling_memory", 0).unwrap().secs, 0.5);
    }

    #[test]
    fn a_missing_round_or_ceiling_is_an_error() {
        let e = parse(&console(2), 3).unwrap_err().to_string();
        assert!(e.contains("no read of nbd0 in round 3"), "{e}");
        let c = console(1).replace("trapeze-md: read ceiling_plain 0 33554432 1.0\n", "");
        assert!(parse(&c, 1).unwrap_err().to_string().contains("no read of ceiling_plain"));
        let c = console(1).replace(&format!("trapeze-md: md5 md0 {SUM}\n"), "");
        assert!(parse(&c, 1).unwrap_err().to_string().contains("no md5"));
    }

    #[test]
    fn a_bad_line_is_an_error_naming_it() {
        for bad in ["read nbd0 1", "read nbd0 x 3 1", "read nbd0 1 0 1.0", "read nbd0 1 5 -1", "read md0 1 5 nan"] {
            let c = console(1) + &format!("trapeze-md: {bad}\n");
            let e = format!("{:#}", parse(&c, 1).unwrap_err());
            assert!(e.contains(bad), "{bad}: {e}");
        }
        let c = console(1) + "trapeze-md: md5 md0 short\n";
        assert!(parse(&c, 1).is_err());
    }

    #[test]
    fn volumes_reading_different_bytes_are_an_error() {
        let c = console(1).replace(&format!("md5 md0 {SUM}"), "md5 md0 ffffffffffffffffffffffffffffffff");
        assert!(parse(&c, 1).unwrap_err().to_string().contains("md's (md5 ffff"));
        let c = console(1).replace(&format!("md5 md1 {SUM}"), "md5 md1 ffffffffffffffffffffffffffffffff");
        assert!(parse(&c, 1).unwrap_err().to_string().contains("over nbd-server (md5 ffff"));
    }

    #[test]
    fn a_pattern_file_is_seeded() {
        let dir = std::env::temp_dir().join(format!("xtask-md-pattern-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
        pattern_file(&a, 1, 1).unwrap();
        pattern_file(&b, 1, 1).unwrap();
        pattern_file(&c, 1, 2).unwrap();
        let (a, b, c) = (fs::read(a).unwrap(), fs::read(b).unwrap(), fs::read(c).unwrap());
        assert_eq!(a.len(), 1 << 20);
        assert_eq!(a, b);
        assert_ne!(a, c);
        fs::remove_dir_all(&dir).unwrap();
    }
}
