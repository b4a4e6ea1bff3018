// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench block`: a sequential read of one file through gmblockd's direct
//! path, its via-RAM path, and Debian's `nbd-server` read with `nbdcopy` (libnbd), taking
//! turns in interleaved rounds (the order rotates each round) on one machine. Given
//! `--plugin` (gmblock-nbdkit's `.so`), three NBD sides join, all read by `nbdcopy` with
//! its defaults: the **export** (gmblockd on the direct path behind nbdkit running the
//! plugin), `nbdkit memory` holding the file's bytes (copied in before the timed read),
//! and `nbdkit file` serving the file itself. `export_over_nbdkit` is the export's MB/s
//! over nbdkit file's (issue 35's ratio); `export_over_nbdkit_memory` over nbdkit
//! memory's; `export_over_direct`
//! over gmblock's own client on the direct path (what NBD and nbdkit cost on top).
//!
//! Each round evicts the file from the page cache (`posix_fadvise(DONTNEED)`) before each
//! side, so every side reads from the disk: gmblockd with `O_DIRECT`, nbd-server through
//! the page cache. The gmblock client is this process (a station of its own, 1 MiB
//! requests, a window of 32 chunks, as the export's); nbdcopy runs with its defaults. Per side:
//! MB/s; server CPU-seconds per GiB (from /proc/PID/stat; nbd-server's forked
//! per-connection children counted through the parent's reaped-children times);
//! host-RAM bytes per byte served, from the vNIC's DMA counters plus the disk's DMA into
//! host-RAM frames (the model's accounting: `NIC_LOCAL_DMA_BASE`; nbd-server has no such
//! counter, so none). Ratios are medians over the rounds.
//!
//! **Striping** (`stripe_scaling`): a sequential read of the same number of bytes
//! (`--stripe-mib`) from a volume striped at 32 KiB over 1, 2 and 4 gmblockd servers
//! (direct path), each on its own file with a modelled disk (`--model-mbps`,
//! `--model-latency-us`: one request at a time, latency + bytes/throughput), read by
//! gmblock's striping client (this process; 8 chunks in flight per server, two stripes
//! of read-ahead), in the same interleaved rounds. The four servers run for the whole
//! bench, warmed up by one uncounted round; each side connects a new client to the first
//! 1, 2 or 4 of them. Their CPU figure (`server_cpu_s_per_gib` in the round rows,
//! `client_and_servers_cpu_s_per_gib` in the summary) counts the client and the servers.
//! Ratios are over the one-server side of the same round, the median over rounds;
//! `ideal_mb_s_per_server` is what the model allows one server at 32 KiB requests.
//!
//! **GMS over disk** (`cached`): `--cached-blocks` 4 KiB writes and a flush to a
//! read-write gmblockd with the same modelled disk, through gmblock's client (the
//! baseline), the GMS-cached volume in write-through and in write-back
//! (`block_sides/cached.rs`), in the same rounds, the order rotating; ratios over the
//! baseline of the same round, medians over rounds.
//!
//! **Co-location** (`corunner_slowdown`, `block_sides/corunner.rs`): a memory-bound job
//! on CPU 1 — alone, then beside the direct path, the path via RAM and nbd-server, each
//! on CPU 0 — in the same rounds; its slowdown beside each against its rate alone in the
//! same round, medians over rounds.
//!
//! `cargo bench -p trapeze-gmblock --bench block -- [--mib N] [--rounds N] [--json]
//! [--stripe-only] [--cached-only] [--no-corunner]`

use anyhow::{bail, ensure, Context};
use clap::Parser;
use gmblock::client::Client;
use gmblock::proto::MAX_REQUEST_BYTES;
use gmblock::station::{Placement, StationConfig};
use gmblock::striped::{StripeConfig, StripedClient};
use serde_json::json;

/// The GMS-cached sides (`block_sides/cached.rs`).
#[path = "block_sides/cached.rs"]
mod cached;
/// The co-location experiment (`block_sides/corunner.rs`).
#[path = "block_sides/corunner.rs"]
mod corunner;
use corunner::Neighbour;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "gmblock direct vs via-RAM vs nbd-server, sequential read")]
struct Args {
    /// The file's size in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    mib: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Directory on a disk file system for the file (default: ~/.cache/trapeze/bench).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// gmblock-nbdkit's plugin (`libgmblock_nbdkit.so`): adds the NBD export's sides.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Bytes each striping side reads, in MiB (each server's file holds as much).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    stripe_mib: u64,
    /// The striping sides' modelled disks: throughput in MB/s.
    #[arg(long, default_value = "100", value_parser = gmblock::model::parse_mbps)]
    model_mbps: f64,
    /// The striping sides' modelled disks: latency per request in µs.
    #[arg(long, default_value = "200", value_parser = gmblock::model::parse_latency_us)]
    model_latency_us: u64,
    /// Only the striping sides.
    #[arg(long)]
    stripe_only: bool,
    /// 4 KiB writes of each GMS-cached side (`cached`; 0: none).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(0..=65536))]
    cached_blocks: u64,
    /// Only the GMS-cached sides.
    #[arg(long)]
    cached_only: bool,
    /// Leave out the co-location experiment (`corunner_slowdown`; it needs CPUs 0 and 1).
    #[arg(long)]
    no_corunner: bool,
    /// JSON lines on stdout (rounds, then the summary).
    #[arg(long)]
    json: bool,
    /// Ignored: `cargo bench` passes it to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Direct,
    ViaRam,
    NbdServer,
    Export,
    NbdkitMemory,
    NbdkitFile,
    /// A volume striped over this many servers.
    Stripe(u16),
    /// The memory-bound job on CPU 1 beside a side on CPU 0, or alone.
    Corunner(Neighbour),
}

/// The gmblock client's chunks in flight (the most it takes; the export's default).
const WINDOW: usize = 32;

/// The striping sides' server counts.
const STRIPES: [u16; 3] = [1, 2, 4];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Direct => "direct",
            Side::ViaRam => "via-ram",
            Side::NbdServer => "nbd-server",
            Side::Export => "export",
            Side::NbdkitMemory => "nbdkit-memory",
            Side::NbdkitFile => "nbdkit-file",
            Side::Stripe(1) => "stripe-1",
            Side::Stripe(2) => "stripe-2",
            Side::Stripe(_) => "stripe-4",
            Side::Corunner(n) => n.name(),
        }
    }
}

/// One side's figures in one round.
#[derive(Clone, Copy, Debug)]
struct Figures {
    mb_s: f64,
    cpu_s_per_gib: f64,
    host_ram_bytes_per_byte: Option<f64>,
    /// The co-runner's copy rate while the side ran (GB/s), on the co-runner's sides.
    corunner_gb_s: Option<f64>,
}

struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn udp_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0").map(|s| s.local_addr()).and_then(|a| a).expect("a free UDP port")
}

/// CPU seconds of a process and of its reaped children (/proc/PID/stat fields 14–17).
fn cpu_of(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("malformed /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11..15).context("short /proc stat")?.iter().map(|v| v.parse::<u64>().unwrap_or(0)).sum();
    // The kernel's USER_HZ is 100 on Linux for /proc times.
    Ok(ticks as f64 / 100.0)
}

/// Drop `file`'s pages from the page cache.
fn evict(file: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::open(file)?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// Fill the file with a pattern (not sparse: every block is on the disk).
fn make_file(dir: &Path, mib: u64) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join("gmblock-bench.vol");
    if std::fs::metadata(&p).is_ok_and(|m| m.len() == mib << 20) {
        return Ok(p);
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(&p)?);
    let mut block = vec![0u8; 1 << 20];
    for m in 0..mib {
        for (i, b) in block.iter_mut().enumerate() {
            *b = pattern(m << 20 | i as u64);
        }
        f.write_all(&block)?;
    }
    f.into_inner()?.sync_all()?;
    Ok(p)
}

fn pattern(at: u64) -> u8 {
    (at.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u8
}

/// Start gmblockd as `node` on a free UDP port, its one peer `peer` (node id, address)
/// and the rest of its command line from `args`, and wait for its ready line; its child
/// and address.
fn start_gmblockd(
    node: u16,
    peer: (u16, SocketAddr),
    args: impl FnOnce(&mut Command) -> &mut Command,
) -> anyhow::Result<(Reaped, SocketAddr)> {
    let addr = udp_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gmblockd"));
    cmd.args(["--node", &node.to_string(), "--listen", &addr.to_string(), "--peer", &format!("{}={}", peer.0, peer.1)]);
    let mut child = args(&mut cmd).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().context("starting gmblockd")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("gmblockd stdout")?).read_line(&mut line)?;
    ensure!(line.starts_with("gmblockd ready"), "gmblockd did not start: {line:?}");
    Ok((Reaped(child), addr))
}

/// Start gmblockd on `file` with `path` for `client`, writing its stats to `stats`.
fn gmblockd(file: &Path, path: &str, client: SocketAddr, stats: &Path) -> anyhow::Result<(Reaped, SocketAddr)> {
    start_gmblockd(1, (2, client), |c| {
        c.args(["--path", path, "--read-only", "--region-mb", "16", "--export"])
            .arg(file)
            .arg("--stats-json")
            .arg(stats)
    })
}

/// Read the whole volume in 1 MiB requests, checking a few bytes of each.
fn scan(c: &mut Client) -> anyhow::Result<u64> {
    let mut buf = vec![0u8; MAX_REQUEST_BYTES as usize];
    let size = c.info.size;
    for at in (0..size).step_by(buf.len()) {
        let n = (size - at).min(buf.len() as u64) as usize;
        c.read(at, &mut buf[..n])?;
        for i in [0, n / 2, n - 1] {
            ensure!(buf[i] == pattern(at + i as u64), "wrong byte at {}", at + i as u64);
        }
    }
    Ok(size)
}

fn run_gmblock(file: &Path, side: Side, dir: &Path) -> anyhow::Result<Figures> {
    let me = udp_port();
    let stats = dir.join(format!("gmblock-bench-{}.json", side.name()));
    let _ = std::fs::remove_file(&stats);
    let (mut server, addr) = gmblockd(file, side.name(), me, &stats)?;
    let cfg = StationConfig {
        node: 2,
        listen: me,
        peers: vec![(1, addr)],
        region_bytes: 0,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    };
    let mut c = Client::connect(cfg, 1, WINDOW)?;
    let pid = server.0.id();
    let cpu0 = cpu_of(pid)?;
    let t = Instant::now();
    let bytes = scan(&mut c)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_of(pid)? - cpu0;
    drop(c);
    let host = stop_gmblockd(&mut server, &stats)?;
    Ok(Figures {
        mb_s: bytes as f64 / 1e6 / secs,
        cpu_s_per_gib: cpu / (bytes as f64 / f64::from(1u32 << 30)),
        host_ram_bytes_per_byte: Some(host as f64 / bytes as f64),
        corunner_gb_s: None,
    })
}

/// Stop gmblockd; the host-RAM bytes its report counts (NIC DMA and disk DMA).
fn stop_gmblockd(server: &mut Reaped, stats: &Path) -> anyhow::Result<u64> {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server.0.id() as i32).context("pid")?,
        rustix::process::Signal::INT,
    )?;
    ensure!(server.0.wait()?.success(), "gmblockd failed");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(stats)?)?;
    Ok(r["nic_bytes"]["host_ram"].as_u64().unwrap_or(0) + r["disk_host_ram_bytes"].as_u64().unwrap_or(0))
}

/// Start `nbdkit ARGS` on a free port; return once an NBD client is served (nbdinfo).
fn nbdkit(args: &[std::ffi::OsString]) -> anyhow::Result<(Reaped, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("nbdkit")
        .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .context("starting nbdkit")?;
    let mut k = Reaped(child);
    let uri = format!("nbd://127.0.0.1:{port}");
    let t = Instant::now();
    loop {
        if let Some(st) = k.0.try_wait()? {
            bail!("nbdkit {args:?} exited: {st}");
        }
        if Command::new("nbdinfo")
            .args(["--size", &uri])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?
            .success()
        {
            return Ok((k, uri));
        }
        ensure!(t.elapsed() < Duration::from_secs(20), "nbdkit {args:?} served no client in 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `nbdcopy URI null:`, timed: seconds.
fn nbdcopy_read(uri: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let out = Command::new("nbdcopy").arg(uri).arg("null:").output().context("nbdcopy")?;
    let secs = t.elapsed().as_secs_f64();
    ensure!(out.status.success(), "nbdcopy {uri}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(secs)
}

/// One of the NBD sides served by nbdkit, read by nbdcopy: the export (gmblockd behind the
/// plugin), nbdkit memory (the file copied in first, untimed) or nbdkit file.
fn run_nbdkit(file: &Path, side: Side, plugin: &Path, dir: &Path, bytes: u64) -> anyhow::Result<Figures> {
    let mut gmblockd_run = None;
    let args: Vec<std::ffi::OsString> = match side {
        Side::Export => {
            let me = udp_port();
            let stats = dir.join("gmblock-bench-export.json");
            let _ = std::fs::remove_file(&stats);
            let (server, addr) = gmblockd(file, "direct", me, &stats)?;
            gmblockd_run = Some((server, stats));
            let p = [format!("server=1={addr}"), "node=2".into(), format!("listen={me}")];
            std::iter::once(plugin.as_os_str().to_owned()).chain(p.into_iter().map(Into::into)).collect()
        }
        Side::NbdkitMemory => vec!["memory".into(), bytes.to_string().into()],
        _ => vec!["--readonly".into(), "file".into(), file.as_os_str().to_owned()],
    };
    let (k, uri) = nbdkit(&args)?;
    if side == Side::NbdkitMemory {
        let out = Command::new("nbdcopy").arg(file).arg(&uri).output().context("nbdcopy")?;
        ensure!(out.status.success(), "filling nbdkit memory: {}", String::from_utf8_lossy(&out.stderr));
    }
    let pids: Vec<u32> = std::iter::once(k.0.id()).chain(gmblockd_run.as_ref().map(|g| g.0 .0.id())).collect();
    let cpu0: f64 = pids.iter().map(|&p| cpu_of(p)).sum::<anyhow::Result<f64>>()?;
    let secs = nbdcopy_read(&uri)?;
    let cpu = pids.iter().map(|&p| cpu_of(p)).sum::<anyhow::Result<f64>>()? - cpu0;
    drop(k);
    let host = match gmblockd_run {
        Some((mut server, stats)) => Some(stop_gmblockd(&mut server, &stats)? as f64 / bytes as f64),
        None => None,
    };
    Ok(Figures {
        mb_s: bytes as f64 / 1e6 / secs,
        cpu_s_per_gib: cpu / (bytes as f64 / f64::from(1u32 << 30)),
        host_ram_bytes_per_byte: host,
        corunner_gb_s: None,
    })
}

fn run_nbd(file: &Path, dir: &Path, bytes: u64) -> anyhow::Result<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let conf = dir.join("gmblock-bench-nbd.conf");
    let pidf = dir.join("gmblock-bench-nbd.pid");
    let _ = std::fs::remove_file(&pidf);
    let text = format!(
        "[generic]\n    port = {port}\n    listenaddr = 127.0.0.1\n[vol]\n    exportname = {}\n    readonly = true\n",
        file.display()
    );
    std::fs::write(&conf, text)?;
    let st = Command::new("nbd-server").arg("-C").arg(&conf).arg("-p").arg(&pidf).status().context("nbd-server")?;
    ensure!(st.success(), "nbd-server failed to start");
    // The daemon creates its pid file, then writes it: wait for a number.
    let t = Instant::now();
    let pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidf).ok().and_then(|s| s.trim().parse().ok()) {
            break pid;
        }
        ensure!(t.elapsed() < Duration::from_secs(10), "nbd-server wrote no pid to {} in 10 s", pidf.display());
        std::thread::sleep(Duration::from_millis(10));
    };
    let cpu0 = cpu_of(pid)?;
    let t = Instant::now();
    let out = Command::new("nbdcopy").arg(format!("nbd://127.0.0.1:{port}/vol")).arg("null:").output()?;
    let secs = t.elapsed().as_secs_f64();
    // The per-connection children have exited; give the parent a moment to reap them.
    std::thread::sleep(Duration::from_millis(50));
    let cpu = cpu_of(pid)? - cpu0;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).context("pid")?,
        rustix::process::Signal::TERM,
    )?;
    if !out.status.success() {
        bail!("nbdcopy failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(Figures {
        mb_s: bytes as f64 / 1e6 / secs,
        cpu_s_per_gib: cpu / (bytes as f64 / f64::from(1u32 << 30)),
        host_ram_bytes_per_byte: None,
        corunner_gb_s: None,
    })
}

/// What the striping sides share: four modelled servers, started once and warmed up (a
/// first round, not counted: fresh processes and cold file ranges made the first
/// requests take ~100 ms), and the client's address they all know.
struct StripeSetup {
    servers: Vec<(Reaped, SocketAddr)>,
    me: SocketAddr,
    bytes: u64,
    mbps: f64,
    latency_us: u64,
}

/// Start gmblockd `node` on `file` (direct path, read-only, modelled disk) for `client`.
fn modelled_gmblockd(
    node: u16,
    file: &Path,
    client: SocketAddr,
    mbps: f64,
    us: u64,
) -> anyhow::Result<(Reaped, SocketAddr)> {
    start_gmblockd(node, (100, client), |c| {
        c.args(["--read-only", "--model-mbps", &mbps.to_string(), "--model-latency-us", &us.to_string()])
            .arg("--export")
            .arg(file)
    })
}

impl StripeSetup {
    /// Files of `mib` MiB under `dir`, a server on each, and the warm-up round.
    fn start(dir: &Path, mib: u64, mbps: f64, latency_us: u64) -> anyhow::Result<StripeSetup> {
        let me = udp_port();
        let mut servers = Vec::new();
        for k in 1..=STRIPES[STRIPES.len() - 1] {
            let file = make_file(&dir.join(k.to_string()), mib)?;
            servers.push(modelled_gmblockd(k, &file, me, mbps, latency_us)?);
        }
        let st = StripeSetup { servers, me, bytes: mib << 20, mbps, latency_us };
        for n in STRIPES {
            st.run(n)?;
        }
        Ok(st)
    }

    /// Read `bytes` of a volume striped over the first `n` servers, checking a few bytes of
    /// each request against the files' pattern where the layout puts them.
    fn run(&self, n: u16) -> anyhow::Result<Figures> {
        let cfg = StationConfig {
            node: 100,
            listen: self.me,
            peers: self.servers.iter().enumerate().map(|(k, s)| (k as u16 + 1, s.1)).collect(),
            region_bytes: 0,
            placement: Placement::HostRam,
            call_timeout: Duration::from_secs(2),
        };
        let ids: Vec<u16> = (1..=n).collect();
        let mut c = StripedClient::connect(cfg, &ids, StripeConfig::default())?;
        let pids: Vec<u32> = self.servers[..usize::from(n)].iter().map(|s| s.0 .0.id()).collect();
        let cpu = || pids.iter().map(|&p| cpu_of(p)).sum::<anyhow::Result<f64>>().map(|s| s + gmblock::cpu_seconds());
        let cpu0 = cpu()?;
        let mut buf = vec![0u8; MAX_REQUEST_BYTES as usize];
        let layout = *c.layout();
        let t = Instant::now();
        for at in (0..self.bytes).step_by(buf.len()) {
            let len = (self.bytes - at).min(buf.len() as u64) as usize;
            c.read(at, &mut buf[..len])?;
            for i in [0, len / 3, len - 1] {
                let (_, o) = layout.locate(at + i as u64);
                ensure!(buf[i] == pattern(o), "striped over {n}: wrong byte at {}", at + i as u64);
            }
        }
        let secs = t.elapsed().as_secs_f64();
        let cpu = cpu()? - cpu0;
        let s = c.stats();
        if s.retries + s.timeouts > 0 {
            eprintln!("striped over {n}: {secs:.3} s, {s:?}");
        }
        Ok(Figures {
            mb_s: self.bytes as f64 / 1e6 / secs,
            cpu_s_per_gib: cpu / (self.bytes as f64 / f64::from(1u32 << 30)),
            host_ram_bytes_per_byte: None,
            corunner_gb_s: None,
        })
    }
}

/// The summary's `stripe_scaling`: MB/s per server count (medians) and each count over
/// one server in the same round (median over rounds).
fn stripe_summary(got: &[(u32, Side, Figures)], st: &StripeSetup) -> serde_json::Value {
    let rounds: Vec<u32> = got.iter().map(|g| g.0).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let mb_in = |r: u32, n: u16| got.iter().find(|g| g.0 == r && g.1 == Side::Stripe(n)).map(|g| g.2.mb_s);
    let over = |n: u16| median(rounds.iter().filter_map(|&r| Some(mb_in(r, n)? / mb_in(r, 1)?)).collect());
    let mb = |n: u16| median(got.iter().filter(|g| g.1 == Side::Stripe(n)).map(|g| g.2.mb_s).collect());
    let piece = 32768.0;
    let ideal = piece / (st.latency_us as f64 * 1e-6 + piece / (st.mbps * 1e6)) / 1e6;
    json!({
        "servers": STRIPES, "mb_s": STRIPES.map(mb), "over_one_server": STRIPES.map(over),
        "ratio_4_over_1": over(4), "target_4_over_1": 3.0,
        "client_and_servers_cpu_s_per_gib": STRIPES.map(|n| median(got.iter().filter(|g| g.1 == Side::Stripe(n)).map(|g| g.2.cpu_s_per_gib).collect())),
        "model": {"mbps": st.mbps, "latency_us": st.latency_us, "grain_bytes": 32768, "ideal_mb_s_per_server": ideal},
        "bytes_per_side": st.bytes,
    })
}

/// The summary's `cached`: MB/s per side (medians) and the cached sides over gmblock's
/// own client in the same round (medians over rounds).
fn cached_summary(got: &[(u32, cached::Way, cached::Cached)], blocks: u64, mbps: f64, us: u64) -> serde_json::Value {
    use cached::Way;
    let rounds: std::collections::BTreeSet<u32> = got.iter().map(|g| g.0).collect();
    let fig =
        |r: u32, w: Way, f: fn(&cached::Cached) -> f64| got.iter().find(|g| g.0 == r && g.1 == w).map(|g| f(&g.2));
    let over = |a: Way, b: Way, f: fn(&cached::Cached) -> f64| {
        median(rounds.iter().filter_map(|&r| Some(fig(r, a, f)? / fig(r, b, f)?)).collect())
    };
    let mb = |w: Way, f: fn(&cached::Cached) -> f64| median(got.iter().filter(|g| g.1 == w).map(|g| f(&g.2)).collect());
    fn ack(c: &cached::Cached) -> f64 {
        c.ack_mb_s
    }
    fn flushed(c: &cached::Cached) -> f64 {
        c.flushed_mb_s
    }
    json!({
        "ack_mb_s": {"block": mb(Way::Block, ack), "write_through": mb(Way::Through, ack), "write_back": mb(Way::Back, ack)},
        "flushed_mb_s": {"block": mb(Way::Block, flushed), "write_through": mb(Way::Through, flushed), "write_back": mb(Way::Back, flushed)},
        "write_back_ack_over_block": over(Way::Back, Way::Block, ack),
        "write_back_flushed_over_block": over(Way::Back, Way::Block, flushed),
        "write_through_flushed_over_block": over(Way::Through, Way::Block, flushed),
        "write_back_flushed_over_write_through": over(Way::Back, Way::Through, flushed),
        "blocks_per_side": blocks, "model": {"mbps": mbps, "latency_us": us},
    })
}

/// One co-runner side: the job beside `n` (the side's own figures, the job's rate added).
fn run_corunner(n: Neighbour, file: &Path, dir: &Path, bytes: u64) -> anyhow::Result<Figures> {
    let (f, gb_s) = corunner::beside(|| match n {
        Neighbour::Alone => {
            std::thread::sleep(corunner::ALONE);
            Ok(Figures { mb_s: 0.0, cpu_s_per_gib: 0.0, host_ram_bytes_per_byte: None, corunner_gb_s: None })
        }
        Neighbour::Direct => run_gmblock(file, Side::Direct, dir),
        Neighbour::ViaRam => run_gmblock(file, Side::ViaRam, dir),
        Neighbour::NbdServer => run_nbd(file, dir, bytes),
    })?;
    Ok(Figures { corunner_gb_s: Some(gb_s), ..f })
}

/// The summary's `corunner_slowdown`: the job's rate alone and beside each side (medians),
/// and its slowdown beside each side against its rate alone in the same round (median over
/// rounds).
fn corunner_summary(got: &[(u32, Side, Figures)]) -> serde_json::Value {
    let rounds: std::collections::BTreeSet<u32> = got.iter().map(|g| g.0).collect();
    let rate = |r: u32, n: Neighbour| got.iter().find(|g| g.0 == r && g.1 == Side::Corunner(n))?.2.corunner_gb_s;
    let slowdown =
        |n| median(rounds.iter().filter_map(|&r| Some(rate(r, Neighbour::Alone)? / rate(r, n)? - 1.0)).collect());
    let gb_s = |n| median(rounds.iter().filter_map(|&r| rate(r, n)).collect());
    let (d, v, nbd) = (slowdown(Neighbour::Direct), slowdown(Neighbour::ViaRam), slowdown(Neighbour::NbdServer));
    json!({
        "alone_gb_s": gb_s(Neighbour::Alone),
        "beside_gb_s": {"direct": gb_s(Neighbour::Direct), "via_ram": gb_s(Neighbour::ViaRam), "nbd_server": gb_s(Neighbour::NbdServer)},
        "direct": d, "via_ram": v, "nbd_server": nbd,
        "direct_over_nbd_server": d / nbd, "via_ram_over_nbd_server": v / nbd, "target_direct_over_nbd_server": 1.0 / 3.0,
        "job": "a copy between two 64 MiB buffers on CPU 1; each side on CPU 0",
    })
}

/// The median; NaN (JSON `null`) for no figures (a phase left out by a flag).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dir = match a.dir {
        Some(d) => d,
        None => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cache/trapeze/bench"),
    };
    let file = make_file(&dir, a.mib)?;
    let bytes = a.mib << 20;
    let mut sides = vec![Side::Direct, Side::ViaRam, Side::NbdServer];
    if a.plugin.is_some() {
        sides.extend([Side::Export, Side::NbdkitMemory, Side::NbdkitFile]);
    } else {
        eprintln!("no --plugin: the NBD export's sides are left out (cargo xtask bench block builds and passes it)");
    }
    if !a.no_corunner {
        sides.extend(Neighbour::ALL.map(Side::Corunner));
    }
    if a.stripe_only || a.cached_only {
        sides.clear();
    }
    if !a.cached_only {
        sides.extend(STRIPES.map(Side::Stripe));
    }
    let st = StripeSetup::start(
        &dir.join("stripe"),
        if a.cached_only { 1 } else { a.stripe_mib },
        a.model_mbps,
        a.model_latency_us,
    )?;
    let ways = if a.stripe_only || a.cached_blocks == 0 {
        vec![]
    } else {
        vec![cached::Way::Block, cached::Way::Through, cached::Way::Back]
    };
    let mut cached_got: Vec<(u32, cached::Way, cached::Cached)> = Vec::new();
    let mut got: Vec<(Side, Figures)> = Vec::new();
    let mut by_round: Vec<(u32, Side, Figures)> = Vec::new();
    for round in 0..a.rounds {
        for k in 0..sides.len() {
            let side = sides[(k + round as usize) % sides.len()];
            evict(&file)?;
            let f = match side {
                Side::Stripe(n) => st.run(n)?,
                Side::NbdServer => run_nbd(&file, &dir, bytes)?,
                Side::Direct | Side::ViaRam => run_gmblock(&file, side, &dir)?,
                Side::Corunner(n) => run_corunner(n, &file, &dir, bytes)?,
                s => run_nbdkit(&file, s, a.plugin.as_deref().context("--plugin")?, &dir, bytes)?,
            };
            let row = json!({"row": "round", "round": round, "side": side.name(), "mb_s": f.mb_s,
                "server_cpu_s_per_gib": f.cpu_s_per_gib, "host_ram_bytes_per_byte": f.host_ram_bytes_per_byte,
                "corunner_gb_s": f.corunner_gb_s});
            if a.json {
                println!("{row}");
            } else {
                eprintln!("round {round}: {:>10} {:8.1} MB/s, {:6.3} CPU-s/GiB", side.name(), f.mb_s, f.cpu_s_per_gib);
            }
            got.push((side, f));
            if let Side::Stripe(_) | Side::Corunner(_) = side {
                by_round.push((round, side, f));
            }
        }
        for k in 0..ways.len() {
            let way = ways[(k + round as usize) % ways.len()];
            let f = cached::run(way, &dir, a.cached_blocks, a.model_mbps, a.model_latency_us, round as u8)?;
            let row = json!({"row": "round", "round": round, "side": format!("cached-{way:?}").to_lowercase(),
                "ack_mb_s": f.ack_mb_s, "flushed_mb_s": f.flushed_mb_s});
            if a.json {
                println!("{row}");
            } else {
                eprintln!(
                    "round {round}: cached {way:?}: {:8.2} MB/s acknowledged, {:8.2} MB/s flushed",
                    f.ack_mb_s, f.flushed_mb_s
                );
            }
            cached_got.push((round, way, f));
        }
    }
    let cached_summary = cached_summary(&cached_got, a.cached_blocks, a.model_mbps, a.model_latency_us);
    if a.cached_only {
        let date = rustix::time::clock_gettime(rustix::time::ClockId::Realtime).tv_sec;
        println!("{}", json!({"row": "summary", "date": date, "rounds": a.rounds, "cached": cached_summary}));
        return Ok(());
    }
    let stripe_scaling = stripe_summary(&by_round, &st);
    if a.stripe_only {
        let date = rustix::time::clock_gettime(rustix::time::ClockId::Realtime).tv_sec;
        println!("{}", json!({"row": "summary", "date": date, "rounds": a.rounds, "stripe_scaling": stripe_scaling}));
        return Ok(());
    }
    let med = |s: Side, f: fn(&Figures) -> f64| median(got.iter().filter(|g| g.0 == s).map(|g| f(&g.1)).collect());
    let mb = |s| med(s, |f| f.mb_s);
    let cpu = |s| med(s, |f| f.cpu_s_per_gib);
    let host = |s| med(s, |f| f.host_ram_bytes_per_byte.unwrap_or(f64::NAN));
    let export = a.plugin.is_some().then(|| {
        json!({"export_mb_s": mb(Side::Export), "nbdkit_memory_mb_s": mb(Side::NbdkitMemory),
            "nbdkit_file_mb_s": mb(Side::NbdkitFile),
            "export_over_nbdkit": mb(Side::Export) / mb(Side::NbdkitFile),
            "export_over_nbdkit_memory": mb(Side::Export) / mb(Side::NbdkitMemory),
            "export_over_direct": mb(Side::Export) / mb(Side::Direct),
            "nbd_server_cpu_s_per_gib": {"export_gmblockd_and_nbdkit": cpu(Side::Export),
                "nbdkit_memory": cpu(Side::NbdkitMemory), "nbdkit_file": cpu(Side::NbdkitFile)}})
    });
    let mut summary = json!({
        "row": "summary", "date": rustix::time::clock_gettime(rustix::time::ClockId::Realtime).tv_sec,
        "rounds": a.rounds, "file_mib": a.mib,
        "direct_mb_s": mb(Side::Direct), "via_ram_mb_s": mb(Side::ViaRam), "nbd_server_mb_s": mb(Side::NbdServer),
        "direct_over_via_ram": mb(Side::Direct) / mb(Side::ViaRam),
        "direct_over_nbd_server": mb(Side::Direct) / mb(Side::NbdServer),
        "server_cpu_s_per_gib": {"direct": cpu(Side::Direct), "via_ram": cpu(Side::ViaRam), "nbd_server": cpu(Side::NbdServer)},
        "cpu_per_gib_direct_over_via_ram": cpu(Side::Direct) / cpu(Side::ViaRam),
        "host_ram_bytes_per_byte": {"direct": host(Side::Direct), "via_ram": host(Side::ViaRam)},
    });
    if let (Some(serde_json::Value::Object(e)), Some(m)) = (export, summary.as_object_mut()) {
        m.extend(e);
    }
    if let Some(m) = summary.as_object_mut() {
        m.insert("stripe_scaling".into(), stripe_scaling);
        m.insert("cached".into(), cached_summary);
        if !a.no_corunner {
            m.insert("corunner_slowdown".into(), corunner_summary(&by_round));
        }
    }
    println!("{summary}");
    Ok(())
}
