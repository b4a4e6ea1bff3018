// SPDX-License-Identifier: GPL-2.0-only
//! The NetRPC benchmark run by `cargo xtask bench rpc`: the shape of Table 1 of the GMS
//! RPC-variants paper over virtual NICs (native firmware, in-process link), with the
//! baselines measured in the same run.
//!
//! Each node drives its host API, its NetRPC and its NIC's firmware (inline) from one
//! thread; the client is one thread, pinned to CPU 0, and the server nodes (one, or
//! directory + holder in 3-way runs) share another, pinned to CPU 1: on this 2-core
//! machine a thread per NIC and per host would measure the scheduler, and so would two
//! spinning threads it sometimes put on one core. Rows: 2-way (node 0 → node 1) and 3-way (node 0 → directory node 1 →
//! holder node 2 → node 0) × wait / cont (nonblocking continuation) / defer (the
//! continuation finds its "lock" held once and runs from the deferred queue) × reply
//! payload 0 / 4 KB / 8 KB × solicited (IPT, zero-copy) / unsolicited (receive buffer
//! detached) / unsolicited + copy. Latency: one call at a time, p50/p99. Bandwidth: one
//! call at a time for wait; `--window` calls outstanding for cont/defer. Baselines: raw
//! Trapeze with the same request / 8 KB reply traffic and window but no NetRPC (the NIC
//! path's ceiling, same execution model), and a 16 B request / 8 KB reply over
//! UDP and TCP (NODELAY) loopback with blocking sockets (the usual way) and busy-polled
//! non-blocking sockets (the same no-sleep model as ours), and a raw Trapeze round trip
//! (0 B and 8 KB reply, one at a time) that splits NetRPC's latency into the NIC path's
//! share and the RPC layer's.
//!
//! Two ratios are measured apart from the table, each between two setups that live side
//! by side and take turns in short stretches on the one client thread and the one server
//! thread (`SharedServer`): nonblocking NetRPC against raw Trapeze bandwidth
//! (`--bw-chunks` pairs of stretches of `--bw-chunk-calls` replies) and 3-way against
//! 2-way latency (`--ways-blocks` pairs of `--ways-block-calls` calls). This VM moves
//! between phases tens of percent apart that last about a second; stretches of a few
//! milliseconds, alternating, put both sides of a ratio in the same phases. The spread
//! of the per-pair ratios is printed beside each headline. The same-core socket
//! comparison takes turns the same way (`--same-stretches` rounds of NetRPC, UDP and TCP,
//! `--same-stretch-calls` round trips each).

use anyhow::Context;
use netrpc::prelude::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_host::endpoint::{EndpointConfig, SendMsg};
use trapeze_node::host::DEFAULT_REGION_BASE;
use trapeze_node::rpc::{Frame, Frames, RpcPort, Service, FRAME_BYTES};
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::shm::Mapping;

#[derive(clap::Parser)]
#[command(about = "NetRPC benchmark over virtual NICs (Table 1 of the RPC-variants paper)")]
struct Args {
    #[arg(long)]
    json: bool,
    /// Calls per latency measurement.
    #[arg(long, default_value_t = 2000)]
    calls: u32,
    /// Calls in each bandwidth measurement.
    #[arg(long, default_value_t = 5000)]
    bw_calls: u32,
    /// Calls outstanding in the nonblocking bandwidth runs.
    #[arg(long, default_value_t = 16)]
    window: u32,
    /// Pairs of stretches (NetRPC, raw NIC) per payload kind in the nonblocking-bandwidth
    /// comparison (the two setups take turns; see `BwSeries`).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    bw_chunks: u32,
    /// 8 KB replies per stretch in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    bw_chunk_calls: u32,
    /// Pairs of stretches (2-way, 3-way) in the 3-way / 2-way latency comparison.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    ways_blocks: u32,
    /// Blocking 8 KB calls per stretch in that comparison.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    ways_block_calls: u32,
    /// Rounds of the same-core comparison (NetRPC on one thread, UDP and TCP on CPU 0,
    /// taking turns).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    same_stretches: u32,
    /// Round trips per side per round in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    same_stretch_calls: u32,
    /// Only run `--case` (`--calls` calls) with every node polled by this thread, and print
    /// its time per call: the mode to profile (or count instructions of) a path with.
    #[arg(long)]
    same_thread_only: bool,
    /// What `--same-thread-only` runs.
    #[arg(long, value_enum, default_value = "wait2")]
    case: SameThreadCase,
    /// Only run the nonblocking-NetRPC / raw-NIC bandwidth comparison and print it: the
    /// mode to profile the nonblocking path with.
    #[arg(long)]
    bw_only: bool,
    /// Only run the 3-way / 2-way latency comparison and print it: the mode to profile
    /// delegation with.
    #[arg(long)]
    ways_only: bool,
}

/// get(len): reply with `len` bytes of the server's page (2-way), or delegated by the
/// directory (node 1) to the holder (node 2) in 3-way runs.
struct Get2;
impl Operation for Get2 {
    const OP: u16 = 0x10;
    type Request = Bytes<16>;
    type Reply = ();
}
struct Get3;
impl Operation for Get3 {
    const OP: u16 = 0x11;
    type Request = Bytes<16>;
    type Reply = ();
}

fn req(len: u32) -> Bytes<16> {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&len.to_le_bytes());
    Bytes(b)
}

/// Server stubs: a page to send, and whether this node is a directory.
struct Server {
    page: Frame,
    directory: bool,
    /// Client side: nonblocking calls completed.
    done: u64,
    /// Deferred variant: the "lock" is busy once per call.
    busy_once: bool,
}

impl Service for Server {
    // The stubs never look at `inc.now`: no clock read per request.
    const READS_CLOCK: bool = false;

    fn serve(&mut self, inc: &Incoming<'_, Frame>, _frames: &mut Frames) -> Action<Frame> {
        let len = match inc.decode::<Get2>() {
            Ok(r) => u32::from_le_bytes(r.0[..4].try_into().unwrap_or_default()).min(FRAME_BYTES),
            Err(e) => return Action::Error(e),
        };
        match inc.op {
            Get3::OP if self.directory => Action::delegate(2, inc),
            Get2::OP | Get3::OP => Action::reply(&(), (len > 0).then_some((self.page, len))),
            _ => Action::Error(RpcError::UnknownOp),
        }
    }
}

type Port = RpcPort<Server>;

fn cont(ctx: &mut trapeze_node::rpc::Node<Server>, o: &Outcome<Frame>, _arg: u64) -> bool {
    if ctx.service.busy_once {
        // A "lock" held: refuse once without side effects; the retry runs deferred.
        ctx.service.busy_once = false;
        return false;
    }
    ctx.service.busy_once = ctx.service.directory; // re-armed per call by the client (see below)
    ctx.service.done += 1;
    if let Ok(r) = o {
        if let Payload::Frame { frame, .. } | Payload::Buffer { frame, .. } = r.payload {
            use netrpc::types::Runtime;
            ctx.release(frame);
        }
    }
    true
}

fn node(sw: &InProcSwitch, id: u16, directory: bool) -> anyhow::Result<Port> {
    let nic = Arc::new(Nic::new(
        &format!("b{id}"),
        Link::new(id, Box::new(sw.port(id)), FaultConfig::default()),
        Duration::ZERO,
    )?);
    let inline = nic.start_inline()?;
    let region = Arc::new(Mapping::create_memfd("bench-frames", 16 << 20)?);
    nic.shared()
        .dma
        .register("bench", DEFAULT_REGION_BASE, region.clone(), 0, 16 << 20)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = EndpointConfig { node_id: id, mtu: FRAME_BYTES, ..EndpointConfig::default() };
    let service = Server { page: 0, directory, done: 0, busy_once: false };
    let rcfg = Config { call_timeout: 2_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
    let mut p = RpcPort::new(
        nic.mem(),
        region,
        DEFAULT_REGION_BASE,
        cfg,
        [id as u64 + 1, 99],
        service,
        rcfg,
        Some(inline),
        None,
    )?;
    let page = p.node.frames.alloc().context("no frame for the page")?;
    p.node.frames.write(page, &vec![0x5Au8; FRAME_BYTES as usize]);
    p.node.service.page = page;
    Ok(p)
}

/// Idle passes a polling thread spins before it yields its core (a `sched_yield` costs
/// ~0.3 µs here, longer than a pass; yielding now and then keeps a busy machine fair).
const SPIN_PASSES: u32 = 256;

/// Where the two ends of a round trip run: `Unpinned` (where the scheduler puts them),
/// `SameCore` (both on CPU 0: a blocking socket round trip then never moves data across
/// cores and its wakeups are cheap) or `CrossCore` (client on CPU 0, server on CPU 1).
/// Comparisons are only fair between matching placements, so the summary pairs them.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Placement {
    Unpinned,
    SameCore,
    CrossCore,
}

impl Placement {
    /// Pin the calling thread as this placement's `server` or client end.
    fn pin(self, server: bool) -> anyhow::Result<()> {
        let cpu = match self {
            Placement::Unpinned => return Ok(()),
            Placement::SameCore => 0,
            Placement::CrossCore => usize::from(server),
        };
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).with_context(|| format!("pinning a thread to CPU {cpu}"))
    }

    /// Undo [`Self::pin`] for the calling thread: back to the CPUs the process started
    /// with. (Not "as many CPUs as available_parallelism says": that reads the calling
    /// thread's current mask, which after a pin is one CPU, so the thread stayed pinned
    /// and every thread it spawned later inherited the pin.)
    fn unpin() -> anyhow::Result<()> {
        rustix::thread::sched_setaffinity(None, start_cpus()).context("unpinning")
    }
}

/// The CPUs the process may run on, as it started (read at the first call, which `run`
/// makes before any pin).
fn start_cpus() -> &'static rustix::thread::CpuSet {
    static CPUS: std::sync::OnceLock<rustix::thread::CpuSet> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        rustix::thread::sched_getaffinity(None).unwrap_or_else(|_| {
            let mut all = rustix::thread::CpuSet::new();
            for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
                all.set(cpu);
            }
            all
        })
    })
}

/// What `--same-thread-only` runs, every node polled by the calling thread: a
/// deterministic amount of work per call, so an instruction count (callgrind) divided by
/// the calls is the CPU cost of that path.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum SameThreadCase {
    /// 2-way blocking 8 KB solicited call (p50 µs).
    Wait2,
    /// 3-way blocking 8 KB solicited call, delegated by node 1 to node 2 (p50 µs).
    Wait3,
    /// Nonblocking 2-way 8 KB solicited calls, `--window` outstanding (µs per call).
    Cont,
    /// Raw Trapeze request / 8 KB solicited reply, `--window` outstanding (µs per reply).
    Raw,
}

fn same_thread_on(case: SameThreadCase, calls: u32, window: u32) -> anyhow::Result<f64> {
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, case == SameThreadCase::Wait3)?;
    Ok(match case {
        SameThreadCase::Wait2 => wait_8k_p50_on(&mut client, 2, calls, || {
            server.poll();
        })?,
        SameThreadCase::Wait3 => {
            let mut holder = node(&sw, 2, false)?;
            wait_8k_p50_on(&mut client, 3, calls, || {
                server.poll();
                holder.poll();
            })?
        }
        SameThreadCase::Cont => {
            let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
                let rt = p.solicit()?;
                p.rpc
                    .call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, mode)
                    .map_err(|e| anyhow::anyhow!("call: {e:?}"))
            };
            let secs = bandwidth(&mut client, "cont", FRAME_BYTES, calls, window, &issue, &mut || {
                server.poll();
            })?;
            secs * 1e6 / calls as f64
        }
        SameThreadCase::Raw => {
            let mut raw = RawClient { port: client, solicited: true, armed: Default::default() };
            let mut srv = RawServer { port: server, owed: Default::default() };
            let secs = raw.run(calls, window, &mut || {
                srv.poll();
            })?;
            secs * 1e6 / calls as f64
        }
    })
}

/// p50 (µs) of `calls` blocking 8 KB solicited calls from `p`, `ways` = 2 (to node 1) or 3
/// (node 1 delegates to node 2); `also` runs beside each poll of `p` (a same-thread
/// server). The clock is read only now and then while waiting: it is not part of the
/// round trip measured.
fn wait_8k_p50_on(p: &mut Port, ways: u32, calls: u32, also: impl FnMut()) -> anyhow::Result<f64> {
    Ok(pct(&mut wait_8k_latencies(p, ways, calls, also)?, 0.5))
}

/// The latencies (ns) behind [`wait_8k_p50_on`].
fn wait_8k_latencies(p: &mut Port, ways: u32, calls: u32, mut also: impl FnMut()) -> anyhow::Result<Vec<u64>> {
    let mut lat = Vec::with_capacity(calls as usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..calls {
        let t0 = Instant::now();
        let rt = p.solicit()?;
        // The call's start time is the one read for the latency (a socket round trip
        // below reads the clock twice per call too).
        let now = p.now_at(t0);
        let r = if ways == 2 {
            p.rpc.call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, Mode::Wait)
        } else {
            p.rpc.call::<Get3>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, Mode::Wait)
        };
        let id = r.map_err(|e| anyhow::anyhow!("call: {e:?}"))?;
        let mut spins = 0u32;
        let o = loop {
            p.poll();
            also();
            if let Some(o) = p.rpc.take_outcome(id) {
                break o;
            }
            spins = spins.wrapping_add(1);
            anyhow::ensure!(!spins.is_multiple_of(1024) || Instant::now() < deadline, "{ways}-way call did not finish");
        };
        lat.push(t0.elapsed().as_nanos() as u64);
        finish(p, o, FRAME_BYTES)?;
    }
    Ok(lat)
}

/// A thread with a name (profiles tell the sides apart by it).
fn spawn_named<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new().name(name.into()).spawn(f).expect("spawning a bench thread")
}

/// Run `f` on a fresh client (node 0) facing `ways - 1` server nodes (node 1, the
/// directory when `ways` is 3, and holder node 2) polled by one thread of their own (a
/// thread per node would put three spinning threads on two cores in 3-way runs). Client
/// on CPU 0, servers on CPU 1, as the socket baselines are placed (left to the scheduler,
/// the two spinning threads sometimes shared a core). Afterwards, whatever `f` returned,
/// the servers stop and the client is unpinned.
fn with_servers<T>(ways: u32, f: impl FnOnce(&mut Port) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let (mut client, side) = rpc_setup(ways)?;
    SharedServer::serve(vec![side], |_| f(&mut client))
}

/// A fresh NetRPC setup on its own switch: the client (node 0) and its server side (node
/// 1; with `ways` = 3 node 1 is the directory and delegates to holder node 2).
fn rpc_setup(ways: u32) -> anyhow::Result<(Port, ServerSide)> {
    let sw = InProcSwitch::new();
    let client = node(&sw, 0, false)?;
    let mut servers = vec![node(&sw, 1, ways == 3)?];
    if ways == 3 {
        servers.push(node(&sw, 2, false)?);
    }
    Ok((client, ServerSide::Rpc(servers)))
}

/// The server end of one setup, as the server thread drives it.
enum ServerSide {
    /// NetRPC server nodes, each polled in turn.
    Rpc(Vec<Port>),
    /// A raw Trapeze server (no NetRPC).
    Raw(Box<RawServer>),
}

impl ServerSide {
    /// One pass; true if anything moved.
    fn poll(&mut self) -> bool {
        match self {
            ServerSide::Rpc(ports) => ports.iter_mut().fold(false, |busy, p| p.poll() | busy),
            ServerSide::Raw(r) => r.poll(),
        }
    }
}

/// The one server thread, pinned to CPU 1, polling the setup `active` names: setups
/// compared with each other take turns on it in short stretches, so the phases of this VM
/// (tens of percent apart, lasting about a second) fall on both alike, and an idle setup
/// never spins beside the measured one.
struct SharedServer {
    active: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// `SharedServer::active` value that ends the thread.
const STOP: usize = usize::MAX;

impl SharedServer {
    fn spawn(mut sides: Vec<ServerSide>) -> Self {
        let active = Arc::new(AtomicUsize::new(0));
        let a = active.clone();
        let thread = spawn_named("rpc-server", move || {
            // Best effort: an unpinned server still answers.
            let _ = Placement::CrossCore.pin(true);
            let mut idle = 0u32;
            while let Some(side) = sides.get_mut(a.load(Ordering::Relaxed)) {
                if side.poll() {
                    idle = 0;
                } else {
                    idle += 1;
                    if idle >= SPIN_PASSES {
                        idle = 0;
                        std::thread::yield_now();
                    }
                }
            }
        });
        SharedServer { active, thread }
    }

    /// Serve setup `i` from the next pass on. The caller has nothing outstanding on the
    /// setup it leaves (its calls all finished).
    fn switch_to(&self, i: usize) {
        self.active.store(i, Ordering::Relaxed);
    }

    /// Serve `sides` (setup 0 first) while `f` runs as the client, pinned to CPU 0;
    /// afterwards, whatever `f` returned, the client is unpinned and the server stops.
    fn serve<T>(sides: Vec<ServerSide>, f: impl FnOnce(&SharedServer) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let server = SharedServer::spawn(sides);
        let result = Placement::CrossCore.pin(false).and_then(|()| f(&server));
        let unpinned = Placement::unpin();
        let stopped = server.stop();
        let r = result?;
        unpinned?;
        stopped?;
        Ok(r)
    }

    fn stop(self) -> anyhow::Result<()> {
        self.active.store(STOP, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("server panicked"))
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    None,
    Solicited,
    Unsolicited,
    Copy,
}

fn reply_to(p: &mut Port, kind: Kind) -> anyhow::Result<ReplyTo<Frame>> {
    Ok(match kind {
        Kind::None => ReplyTo::None,
        Kind::Solicited => p.solicit()?,
        Kind::Unsolicited => ReplyTo::Unsolicited,
        Kind::Copy => ReplyTo::UnsolicitedCopy { frame: p.node.frames.alloc().context("no free frame")? },
    })
}

fn finish(p: &mut Port, o: Outcome<Frame>, len: u32) -> anyhow::Result<()> {
    let r = o.map_err(|e| anyhow::anyhow!("call failed: {e:?}"))?;
    match r.payload {
        Payload::Frame { frame, len: l } | Payload::Buffer { frame, len: l } => {
            anyhow::ensure!(l == len, "reply payload {l} bytes, expected {len}");
            p.done_with(frame);
        }
        Payload::None => anyhow::ensure!(len == 0, "reply without payload"),
    }
    Ok(())
}

struct Row {
    variant: &'static str,
    ways: u32,
    payload: u32,
    kind: &'static str,
    p50: f64,
    p99: f64,
    mb_s: f64,
    calls_s: f64,
    /// Latency (µs) at each of `CDF_Q`.
    cdf: Vec<f64>,
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// The quantiles the JSON gives of each latency distribution (`cdf_us`): a compact
/// stand-in for the samples, enough to draw their CDF (`cargo xtask bench rpc --plot`).
const CDF_Q: [f64; 18] =
    [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0];

/// Latencies (ns) at each of `CDF_Q`, in µs to 0.01.
fn cdf(v: &mut [u64]) -> Vec<f64> {
    CDF_Q.iter().map(|&q| (pct(v, q) * 100.0).round() / 100.0).collect()
}

fn run_row(p: &mut Port, ways: u32, variant: &'static str, payload: u32, kind: Kind, a: &Args) -> anyhow::Result<Row> {
    let dst = 1;
    let mut lat = Vec::with_capacity(a.calls as usize);
    let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
        let rt = reply_to(p, kind)?;
        let r = if ways == 2 {
            p.rpc.call::<Get2>(now, &mut p.node, dst, &req(payload), rt, mode)
        } else {
            p.rpc.call::<Get3>(now, &mut p.node, dst, &req(payload), rt, mode)
        };
        r.map_err(|e| anyhow::anyhow!("call: {e:?}"))
    };
    let deferred = variant == "defer";
    // Latency: one call at a time.
    for _ in 0..a.calls {
        let t0 = Instant::now();
        if variant == "wait" {
            let id = issue(p, Mode::Wait, p.now_at(t0))?;
            let o = loop {
                p.poll();
                if let Some(o) = p.rpc.take_outcome(id) {
                    break o;
                }
            };
            lat.push(t0.elapsed().as_nanos() as u64);
            finish(p, o, payload)?;
        } else {
            let before = p.node.service.done;
            p.node.service.busy_once = deferred;
            let id = issue(p, Mode::NonBlocking, p.now_at(t0))?;
            p.rpc.push_continuation(id, cont, 0).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            while p.node.service.done == before {
                p.poll();
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let n = a.bw_calls;
    let secs = bandwidth(p, variant, payload, n, a.window, &issue, &mut || {})?;
    let kind_name = match kind {
        Kind::None => "none",
        Kind::Solicited => "solicited",
        Kind::Unsolicited => "unsolicited",
        Kind::Copy => "unsolicited+copy",
    };
    Ok(Row {
        variant,
        ways,
        payload,
        kind: kind_name,
        p50: pct(&mut lat, 0.5),
        p99: pct(&mut lat, 0.99),
        cdf: cdf(&mut lat),
        mb_s: n as f64 * payload as f64 / secs / 1e6,
        calls_s: n as f64 / secs,
    })
}

/// Seconds for `n` calls made by `issue`: one at a time (`wait`, each reply checked to
/// carry `payload` bytes), or with `window` nonblocking calls outstanding, finished by
/// continuations (`cont`, `defer`).
fn bandwidth(
    p: &mut Port,
    variant: &str,
    payload: u32,
    n: u32,
    window: u32,
    issue: &dyn Fn(&mut Port, Mode, u64) -> anyhow::Result<CallId>,
    also: &mut dyn FnMut(),
) -> anyhow::Result<f64> {
    let deferred = variant == "defer";
    let t0 = Instant::now();
    if variant == "wait" {
        for _ in 0..n {
            let id = issue(p, Mode::Wait, p.now())?;
            let o = loop {
                p.poll();
                also();
                if let Some(o) = p.rpc.take_outcome(id) {
                    break o;
                }
            };
            finish(p, o, payload)?;
        }
    } else {
        let start_done = p.node.service.done;
        let mut issued = 0;
        while p.node.service.done - start_done < n as u64 {
            // One clock reading per burst of calls (their timeouts need no finer time),
            // none while the window is full.
            let mut now = None;
            while issued < n && issued as u64 - (p.node.service.done - start_done) < window as u64 {
                p.node.service.busy_once = deferred;
                let t = *now.get_or_insert_with(|| p.now());
                let id = issue(p, Mode::NonBlocking, t)?;
                p.rpc.push_continuation(id, cont, 0).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                issued += 1;
            }
            p.poll();
            also();
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Replies each side of a comparison moves untimed before its first timed stretch (first
/// touches of a fresh node's frames, lanes filling).
const WARM_REPLIES: u32 = 4000;

/// Nonblocking 8 KB bandwidth of NetRPC (2-way `cont`, the table's traffic) against raw
/// Trapeze moving the same payloads the same way (solicited replies into IPT-armed
/// frames, unsolicited ones into receive buffers), `window` calls outstanding. Both
/// setups live side by side and take turns, `chunks` pairs of stretches of `chunk_calls`
/// replies each (order alternating, nothing outstanding at a switch), on the one client
/// thread (CPU 0) and the one server thread (CPU 1): this VM's phases, tens of percent
/// apart and about a second long, then fall on both sides alike. Seconds per stretch.
struct BwSeries {
    rpc: Vec<f64>,
    raw: Vec<f64>,
    chunk_calls: u32,
}

impl BwSeries {
    fn measure(kind: Kind, chunks: u32, chunk_calls: u32, window: u32) -> anyhow::Result<Self> {
        let (mut rpc, rpc_side) = rpc_setup(2)?;
        let sw = InProcSwitch::new();
        let mut raw =
            RawClient { port: node(&sw, 0, false)?, solicited: kind == Kind::Solicited, armed: Default::default() };
        let raw_side = ServerSide::Raw(Box::new(RawServer { port: node(&sw, 1, false)?, owed: Default::default() }));
        let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
            let rt = reply_to(p, kind)?;
            p.rpc
                .call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, mode)
                .map_err(|e| anyhow::anyhow!("call: {e:?}"))
        };
        let mut s = BwSeries { rpc: Vec::new(), raw: Vec::new(), chunk_calls };
        SharedServer::serve(vec![rpc_side, raw_side], |server| {
            server.switch_to(0);
            bandwidth(&mut rpc, "cont", FRAME_BYTES, WARM_REPLIES, window, &issue, &mut || {})?;
            server.switch_to(1);
            raw.run(WARM_REPLIES, window, &mut || {})?;
            for i in 0..chunks {
                for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                    server.switch_to(side);
                    if side == 0 {
                        s.rpc.push(bandwidth(&mut rpc, "cont", FRAME_BYTES, chunk_calls, window, &issue, &mut || {})?);
                    } else {
                        s.raw.push(raw.run(chunk_calls, window, &mut || {})?);
                    }
                }
            }
            Ok(())
        })?;
        Ok(s)
    }

    fn mb_s(&self, secs: &[f64]) -> f64 {
        secs.len() as f64 * self.chunk_calls as f64 * FRAME_BYTES as f64 / secs.iter().sum::<f64>() / 1e6
    }
    /// NetRPC's MB/s over all its stretches.
    fn rpc_mb_s(&self) -> f64 {
        self.mb_s(&self.rpc)
    }
    /// Raw Trapeze's MB/s over all its stretches.
    fn raw_mb_s(&self) -> f64 {
        self.mb_s(&self.raw)
    }
    /// NetRPC / raw over all stretches: the headline.
    fn ratio(&self) -> f64 {
        self.rpc_mb_s() / self.raw_mb_s()
    }
    /// NetRPC / raw of each pair of stretches, sorted.
    fn pair_ratios(&self) -> Vec<f64> {
        // Equal bytes per stretch: MB/s NetRPC / raw = raw seconds / NetRPC seconds.
        sorted_ratios(&self.raw, &self.rpc)
    }
}

/// Raw Trapeze's client in the bandwidth comparison (no NetRPC): keeps `window` small
/// requests outstanding; solicited, it arms an IPT frame per request and sends its
/// payload token, and frees the frame when the reply has landed in it.
struct RawClient {
    port: Port,
    solicited: bool,
    /// The frames armed for outstanding requests, in request order (one server answers
    /// in order).
    armed: std::collections::VecDeque<Frame>,
}

impl RawClient {
    /// Seconds for `count` 8 KB replies; nothing is outstanding before or after.
    fn run(&mut self, count: u32, window: u32, also: &mut dyn FnMut()) -> anyhow::Result<f64> {
        let p = &mut self.port;
        let t0 = Instant::now();
        let (mut sent, mut got, mut passes) = (0u32, 0u32, 0u32);
        while got < count {
            while sent < count && sent - got < window {
                let mut ctrl = [0u8; 8];
                if self.solicited {
                    let ReplyTo::Solicited { token, frame } = p.solicit()? else { unreachable!() };
                    ctrl = token.to_le_bytes();
                    self.armed.push_back(frame);
                }
                let request =
                    SendMsg { peer: 1, ctrl: &ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE };
                if !p.raw_send(&request) {
                    if let Some(f) = self.armed.pop_back().filter(|_| self.solicited) {
                        p.done_with(f);
                    }
                    break;
                }
                sent += 1;
            }
            let mut replies = 0;
            also();
            p.raw_recv_each(|payload, _| replies += (payload == FRAME_BYTES) as u32);
            for _ in 0..replies {
                if let Some(f) = self.armed.pop_front() {
                    p.done_with(f);
                }
            }
            got += replies;
            // The stall check reads the clock now and then, not on every pass (a clock read
            // costs more than an idle pass; NetRPC's loop reads it once per burst of calls).
            passes = passes.wrapping_add(1);
            anyhow::ensure!(
                !passes.is_multiple_of(1024) || t0.elapsed() < Duration::from_secs(30),
                "raw request/reply stalled at {got}/{count}"
            );
        }
        Ok(t0.elapsed().as_secs_f64())
    }
}

/// Raw Trapeze's server: answers each request with 8 KB of its page, into the frame whose
/// payload token the request carries, or a receive buffer when it carries none.
struct RawServer {
    port: Port,
    /// The payload token of each request owed a reply (NONE: unsolicited).
    owed: std::collections::VecDeque<PayloadToken>,
}

impl RawServer {
    fn poll(&mut self) -> bool {
        let seg = [Segment { addr: DEFAULT_REGION_BASE + self.port.node.service.page, len: FRAME_BYTES }];
        let (owed, mut busy) = (&mut self.owed, false);
        self.port.raw_recv_each(|_, ctrl| {
            let token = ctrl.get(..8).map_or(0, |t| u64::from_le_bytes(t.try_into().unwrap_or_default()));
            owed.push_back(PayloadToken(token));
            busy = true;
        });
        while let Some(&token) = owed.front() {
            let reply = SendMsg { peer: 0, ctrl: b"page", payload_len: FRAME_BYTES, segments: &seg, token };
            if !self.port.raw_send(&reply) {
                break;
            }
            owed.pop_front();
            busy = true;
        }
        busy
    }
}

/// `a[i] / b[i]` for each pair, sorted.
fn sorted_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    r.sort_by(f64::total_cmp);
    r
}

/// Blocking 8 KB solicited call latencies (ns), 2-way (node 0 → 1) and 3-way (node 0 →
/// directory 1 → holder 2 → node 0), on two setups alive side by side that take turns on
/// the client and server threads in `blocks` pairs of stretches of `block_calls` calls
/// (order alternating), as [`BwSeries`] does and for the same reason.
struct WaysSeries {
    two: Vec<u64>,
    three: Vec<u64>,
    /// Per pair of stretches, 3-way p50 / 2-way p50, sorted.
    pair_ratios: Vec<f64>,
}

impl WaysSeries {
    fn measure(blocks: u32, block_calls: u32) -> anyhow::Result<Self> {
        let (mut two, two_side) = rpc_setup(2)?;
        let (mut three, three_side) = rpc_setup(3)?;
        let mut s = WaysSeries { two: Vec::new(), three: Vec::new(), pair_ratios: Vec::new() };
        SharedServer::serve(vec![two_side, three_side], |server| {
            for (i, p) in [&mut two, &mut three].into_iter().enumerate() {
                server.switch_to(i);
                wait_8k_latencies(p, i as u32 + 2, block_calls, || {})?;
            }
            for i in 0..blocks {
                let mut p50 = [0.0; 2];
                for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                    server.switch_to(side);
                    let (p, all) = if side == 0 { (&mut two, &mut s.two) } else { (&mut three, &mut s.three) };
                    let mut lat = wait_8k_latencies(p, side as u32 + 2, block_calls, || {})?;
                    all.extend_from_slice(&lat);
                    p50[side] = pct(&mut lat, 0.5);
                }
                s.pair_ratios.push(p50[1] / p50[0]);
            }
            Ok(())
        })?;
        s.pair_ratios.sort_by(f64::total_cmp);
        Ok(s)
    }

    /// p50 of all 3-way calls / p50 of all 2-way calls: the headline.
    fn ratio(&mut self) -> f64 {
        pct(&mut self.three, 0.5) / pct(&mut self.two, 0.5)
    }
}

/// The same-core comparison: NetRPC with both nodes polled by the calling thread against
/// blocking UDP and TCP with both ends on CPU 0 (their server ends block while the
/// others run, so all three setups can live side by side). They take turns in
/// `stretches` rounds of `calls` round trips each (order rotating), as the other
/// ratios do, so this VM's phases fall on all three alike. All latencies (ns) of each,
/// and each round's p50 ratios.
struct SameCore {
    rpc: Vec<u64>,
    udp: Vec<u64>,
    tcp: Vec<u64>,
    /// Per round, NetRPC p50 / UDP p50 and NetRPC p50 / TCP p50, sorted.
    over_udp: Vec<f64>,
    over_tcp: Vec<f64>,
}

impl SameCore {
    fn measure(stretches: u32, calls: u32) -> anyhow::Result<Self> {
        let mut udp = SocketPair::udp(false, Placement::SameCore)?;
        let mut tcp = SocketPair::tcp(false, Placement::SameCore)?;
        let sw = InProcSwitch::new();
        let mut client = node(&sw, 0, false)?;
        let mut server = node(&sw, 1, false)?;
        let mut s =
            SameCore { rpc: Vec::new(), udp: Vec::new(), tcp: Vec::new(), over_udp: Vec::new(), over_tcp: Vec::new() };
        let mut run = || -> anyhow::Result<()> {
            Placement::SameCore.pin(false)?;
            // Untimed warm-up of each.
            wait_8k_latencies(&mut client, 2, calls, || {
                server.poll();
            })?;
            udp.latencies(calls)?;
            tcp.latencies(calls)?;
            for i in 0..stretches {
                let mut p50 = [0.0; 3];
                for k in 0..3 {
                    let which = (i as usize + k) % 3;
                    let mut lat = match which {
                        0 => wait_8k_latencies(&mut client, 2, calls, || {
                            server.poll();
                        })?,
                        1 => udp.latencies(calls)?,
                        _ => tcp.latencies(calls)?,
                    };
                    [&mut s.rpc, &mut s.udp, &mut s.tcp][which].extend_from_slice(&lat);
                    p50[which] = pct(&mut lat, 0.5);
                }
                s.over_udp.push(p50[0] / p50[1]);
                s.over_tcp.push(p50[0] / p50[2]);
            }
            Ok(())
        };
        let result = run();
        let unpinned = Placement::unpin();
        let closed = udp.close().and(tcp.close());
        result?;
        unpinned?;
        closed?;
        s.over_udp.sort_by(f64::total_cmp);
        s.over_tcp.sort_by(f64::total_cmp);
        Ok(s)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Raw Trapeze round trip, one at a time, no NetRPC: node 0 sends a small request, node
/// 1 answers with `reply` bytes of its page; p50 in µs. Splits NetRPC's latency into the
/// NIC path's share and the RPC layer's.
fn raw_round_trip(calls: u32, reply: u32) -> anyhow::Result<f64> {
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let srv = std::thread::spawn(move || {
        let seg = [Segment { addr: DEFAULT_REGION_BASE + server.node.service.page, len: reply }];
        let segs: &[Segment] = if reply > 0 { &seg } else { &[] };
        let msg = SendMsg { peer: 0, ctrl: b"page", payload_len: reply, segments: segs, token: PayloadToken::NONE };
        let (mut owed, mut idle) = (0u32, 0u32);
        while !st.load(Ordering::Relaxed) {
            let (a, b) = server.raw_recv();
            owed += a + b;
            while owed > 0 && server.raw_send(&msg) {
                owed -= 1;
            }
            idle += 1;
            if idle >= SPIN_PASSES {
                idle = 0;
                std::thread::yield_now();
            }
        }
    });
    let request = SendMsg { peer: 1, ctrl: b"get", payload_len: 0, segments: &[], token: PayloadToken::NONE };
    let mut lat = Vec::with_capacity(calls as usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..calls {
        let t0 = Instant::now();
        while !client.raw_send(&request) {}
        for pass in 0u32.. {
            let (a, b) = client.raw_recv();
            if a + b > 0 {
                break;
            }
            if pass % 1024 == 1023 && Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                anyhow::bail!("raw round trip stalled");
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    stop.store(true, Ordering::Relaxed);
    srv.join().map_err(|_| anyhow::anyhow!("server panicked"))?;
    Ok(pct(&mut lat, 0.5))
}

/// The latencies (ns) of `n` UDP loopback round trips (16 B request, 8 KB reply), the ends
/// placed by `place`, blocking or busy-polled (`spin`).
fn udp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<Vec<u64>> {
    socket_baseline(SocketPair::udp(spin, place)?, n, place)
}

/// The same over TCP loopback (NODELAY).
fn tcp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<Vec<u64>> {
    socket_baseline(SocketPair::tcp(spin, place)?, n, place)
}

fn socket_baseline(mut pair: SocketPair, n: u32, place: Placement) -> anyhow::Result<Vec<u64>> {
    let lat = place.pin(false).and_then(|()| pair.latencies(n));
    let unpinned = Placement::unpin();
    let closed = pair.close();
    let lat = lat?;
    unpinned?;
    closed?;
    Ok(lat)
}

/// A loopback socket pair for the baselines: its server end, on a thread of its own
/// placed by `place`, answers each 16 B request with 8 KB; the client end is the
/// caller's. Blocking sockets, or non-blocking ones both ends busy-poll (`spin`).
struct SocketPair {
    client: SocketClient,
    stop: Arc<AtomicBool>,
    server: std::thread::JoinHandle<std::io::Result<()>>,
    buf: Vec<u8>,
}

enum SocketClient {
    Udp { socket: UdpSocket, server: std::net::SocketAddr },
    Tcp(TcpStream),
}

/// Retry an operation on a non-blocking socket until it stops saying "would block".
fn spin_io<T>(mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            r => return r,
        }
    }
}

impl SocketPair {
    fn udp(spin: bool, place: Placement) -> anyhow::Result<Self> {
        let srv = UdpSocket::bind("127.0.0.1:0")?;
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let server = srv.local_addr()?;
        srv.set_nonblocking(spin)?;
        socket.set_nonblocking(spin)?;
        // Blocking, the server wakes now and then to see `stop`.
        srv.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let _ = place.pin(true);
            let mut buf = [0u8; 64];
            let reply = vec![0x5Au8; 8192];
            while !st.load(Ordering::Relaxed) {
                match srv.recv_from(&mut buf) {
                    Ok((_, from)) => {
                        let _ = srv.send_to(&reply, from);
                    }
                    Err(_) => std::thread::yield_now(),
                }
            }
            Ok(())
        });
        Ok(SocketPair { client: SocketClient::Udp { socket, server }, stop, server: thread, buf: vec![0; 9000] })
    }

    fn tcp(spin: bool, place: Placement) -> anyhow::Result<Self> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let thread = std::thread::spawn(move || -> std::io::Result<()> {
            let _ = place.pin(true);
            let (mut s, _) = l.accept()?;
            s.set_nodelay(true)?;
            s.set_nonblocking(spin)?;
            let reply = vec![0x5Au8; 8192];
            let mut buf = [0u8; 16];
            loop {
                let mut got = 0;
                while got < 16 {
                    match spin_io(|| s.read(&mut buf[got..]))? {
                        // The client closed: done.
                        0 => return Ok(()),
                        k => got += k,
                    }
                }
                let mut off = 0;
                while off < reply.len() {
                    off += spin_io(|| s.write(&reply[off..]))?;
                }
            }
        });
        let c = TcpStream::connect(addr)?;
        c.set_nodelay(true)?;
        c.set_nonblocking(spin)?;
        Ok(SocketPair {
            client: SocketClient::Tcp(c),
            stop: Arc::new(AtomicBool::new(false)),
            server: thread,
            buf: vec![0; 8192],
        })
    }

    /// `n` round trips from the calling thread: their latencies (ns).
    fn latencies(&mut self, n: u32) -> anyhow::Result<Vec<u64>> {
        let mut lat = Vec::with_capacity(n as usize);
        let buf = &mut self.buf;
        for _ in 0..n {
            let t0 = Instant::now();
            match &mut self.client {
                SocketClient::Udp { socket, server } => {
                    spin_io(|| socket.send_to(&[1u8; 16], *server))?;
                    // Anything but a whole reply (a stray datagram) is skipped.
                    while spin_io(|| socket.recv(buf))? != 8192 {}
                }
                SocketClient::Tcp(c) => {
                    let mut off = 0;
                    while off < 16 {
                        off += spin_io(|| c.write(&[1u8; 16][off..]))?;
                    }
                    let mut got = 0;
                    while got < 8192 {
                        match spin_io(|| c.read(&mut buf[got..8192]))? {
                            0 => anyhow::bail!("tcp server closed"),
                            k => got += k,
                        }
                    }
                }
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
        Ok(lat)
    }

    /// Stop the server end and wait for it.
    fn close(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        // A TCP server ends when the client end closes.
        drop(self.client);
        self.server.join().map_err(|_| anyhow::anyhow!("socket server panicked"))?.context("socket server")
    }
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(a) {
        eprintln!("bench_rpc: error: {e:#}");
        std::process::exit(1);
    }
}

/// `q`-quantile of `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN)
}

/// The bandwidth comparison for both payload kinds.
fn bw_compare(a: &Args) -> anyhow::Result<[BwSeries; 2]> {
    Ok([
        BwSeries::measure(Kind::Solicited, a.bw_chunks, a.bw_chunk_calls, a.window)?,
        BwSeries::measure(Kind::Unsolicited, a.bw_chunks, a.bw_chunk_calls, a.window)?,
    ])
}

/// One line per payload kind of the bandwidth comparison.
fn print_bw(bw: &[BwSeries; 2]) {
    for (name, s) in ["solicited", "unsolicited"].iter().zip(bw) {
        let r = s.pair_ratios();
        println!(
            "    {name}: NetRPC {:.0} MB/s, raw {:.0} MB/s: {:.2} (pairs of stretches: median {:.2}, p10 {:.2}, p90 {:.2}, min {:.2}, max {:.2})",
            s.rpc_mb_s(),
            s.raw_mb_s(),
            s.ratio(),
            median(&r),
            quantile(&r, 0.1),
            quantile(&r, 0.9),
            r.first().copied().unwrap_or(f64::NAN),
            r.last().copied().unwrap_or(f64::NAN),
        );
    }
}

/// The 3-way / 2-way comparison's line.
fn print_ways(ways: &mut WaysSeries, a: &Args) {
    println!(
        "3-way / 2-way (wait, 8 KB solicited, {} pairs of interleaved stretches of {} calls): {:.2} (p50 {:.2} / {:.2} µs; per pair median {:.2}, p10 {:.2}, p90 {:.2})",
        a.ways_blocks,
        a.ways_block_calls,
        ways.ratio(),
        pct(&mut ways.three, 0.5),
        pct(&mut ways.two, 0.5),
        median(&ways.pair_ratios),
        quantile(&ways.pair_ratios, 0.1),
        quantile(&ways.pair_ratios, 0.9),
    );
}

fn run(a: Args) -> anyhow::Result<()> {
    start_cpus();
    if a.same_thread_only {
        Placement::SameCore.pin(false)?;
        let r = same_thread_on(a.case, a.calls, a.window);
        Placement::unpin()?;
        let what = match a.case {
            SameThreadCase::Wait2 | SameThreadCase::Wait3 => "p50",
            SameThreadCase::Cont | SameThreadCase::Raw => "per call",
        };
        println!("same thread {:?} 8 KB solicited: {what} {:.2} us ({} calls)", a.case, r?, a.calls);
        return Ok(());
    }
    if a.bw_only {
        let bw = bw_compare(&a)?;
        println!(
            "nonblocking 8 KB bandwidth, NetRPC / raw NIC ({} pairs of stretches of {} replies):",
            a.bw_chunks, a.bw_chunk_calls
        );
        print_bw(&bw);
        return Ok(());
    }
    if a.ways_only {
        let mut ways = WaysSeries::measure(a.ways_blocks, a.ways_block_calls)?;
        print_ways(&mut ways, &a);
        return Ok(());
    }
    let mut rows = Vec::new();
    for ways in [2u32, 3] {
        with_servers(ways, |client| {
            for variant in ["wait", "cont", "defer"] {
                rows.push(run_row(client, ways, variant, 0, Kind::None, &a)?);
                for payload in [4096u32, 8192] {
                    for kind in [Kind::Solicited, Kind::Unsolicited, Kind::Copy] {
                        let r = run_row(client, ways, variant, payload, kind, &a).with_context(|| {
                            format!(
                                "{ways}-way {variant} {payload} B kind {}: frames free {}, starved {}, stats {:?}",
                                kind as u8,
                                client.node.frames.available(),
                                client.node.frames.stats.starved,
                                client.rpc.stats()
                            )
                        })?;
                        rows.push(r);
                    }
                }
            }
            Ok(())
        })?;
    }
    let bw = bw_compare(&a)?;
    let [sol, unsol] = &bw;
    let (sol_ratios, unsol_ratios) = (sol.pair_ratios(), unsol.pair_ratios());
    let mut ways = WaysSeries::measure(a.ways_blocks, a.ways_block_calls)?;
    let three_over_two = ways.ratio();
    let raw_rt0 = raw_round_trip(a.calls, 0)?;
    let raw_rt8 = raw_round_trip(a.calls, FRAME_BYTES)?;
    let udp = pct(&mut udp_baseline(a.calls, false, Placement::Unpinned)?, 0.5);
    let tcp = pct(&mut tcp_baseline(a.calls, false, Placement::Unpinned)?, 0.5);
    let udp_spin = pct(&mut udp_baseline(a.calls, true, Placement::Unpinned)?, 0.5);
    let tcp_spin = pct(&mut tcp_baseline(a.calls, true, Placement::Unpinned)?, 0.5);
    // Matched placements: NetRPC with both nodes on one thread against blocking sockets
    // with both ends on CPU 0; NetRPC's usual two threads against sockets on CPU 0 / 1.
    let mut same = SameCore::measure(a.same_stretches, a.same_stretch_calls)?;
    let (rpc_same, udp_same, tcp_same) = (pct(&mut same.rpc, 0.5), pct(&mut same.udp, 0.5), pct(&mut same.tcp, 0.5));
    let (same_over_udp, same_over_tcp) = (rpc_same / udp_same, rpc_same / tcp_same);
    let mut udp_cross_lat = udp_baseline(a.calls, false, Placement::CrossCore)?;
    let mut tcp_cross_lat = tcp_baseline(a.calls, false, Placement::CrossCore)?;
    let (udp_cross, tcp_cross) = (pct(&mut udp_cross_lat, 0.5), pct(&mut tcp_cross_lat, 0.5));
    let find = |v: &str, w: u32, p: u32, k: &str| {
        rows.iter().find(|r| r.variant == v && r.ways == w && r.payload == p && r.kind == k)
    };
    let two = find("wait", 2, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let three = find("wait", 3, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let cont_bw = find("cont", 2, 8192, "solicited").map_or(f64::NAN, |r| r.mb_s);
    if a.json {
        for r in &rows {
            println!(
                "{}",
                json!({ "variant": r.variant, "ways": r.ways, "payload": r.payload, "kind": r.kind,
                        "p50_us": (r.p50 * 10.0).round() / 10.0, "p99_us": (r.p99 * 10.0).round() / 10.0,
                        "mb_s": (r.mb_s * 10.0).round() / 10.0, "calls_s": r.calls_s.round(), "cdf_us": r.cdf,
                        // The rows' nodes run on two threads, one per core: their like is
                        // sockets with an end on each core. Unpinned, the scheduler often puts
                        // both socket ends on one core instead (see the summary).
                        "udp_8k_p50_us": (udp_cross * 10.0).round() / 10.0, "tcp_8k_p50_us": (tcp_cross * 10.0).round() / 10.0,
                        "udp_8k_unpinned_p50_us": (udp * 10.0).round() / 10.0, "tcp_8k_unpinned_p50_us": (tcp * 10.0).round() / 10.0 })
            );
        }
        let mut summary = json!({ "summary": true, "udp_8k_unpinned_p50_us": udp, "tcp_8k_unpinned_p50_us": tcp,
                    "udp_8k_spin_unpinned_p50_us": udp_spin, "tcp_8k_spin_unpinned_p50_us": tcp_spin, "raw_rt_0_p50_us": raw_rt0, "raw_rt_8k_p50_us": raw_rt8,
                    "wait_2way_8k_solicited_p50_us": two, "wait_3way_8k_solicited_p50_us": three,
                    // Headline: the interleaved stretches (`WaysSeries`); the table rows
                    // were measured seconds apart.
                    "three_over_two": three_over_two, "three_over_two_table_rows": three / two,
                    "ways_3way_p50_us": pct(&mut ways.three, 0.5), "ways_2way_p50_us": pct(&mut ways.two, 0.5),
                    "three_over_two_pairs": { "median": median(&ways.pair_ratios), "p10": quantile(&ways.pair_ratios, 0.1),
                                              "p90": quantile(&ways.pair_ratios, 0.9), "pairs": a.ways_blocks, "calls_each": a.ways_block_calls },
                    "cont_2way_8k_solicited_mb_s": cont_bw,
                    // Headline: NetRPC / raw over all interleaved stretches (`BwSeries`).
                    "raw_nic_8k_mb_s": sol.raw_mb_s(), "rpc_cont_8k_mb_s": sol.rpc_mb_s(), "cont_over_raw": sol.ratio(),
                    "raw_nic_8k_unsolicited_mb_s": unsol.raw_mb_s(), "rpc_cont_8k_unsolicited_mb_s": unsol.rpc_mb_s(),
                    "cont_unsolicited_over_raw_unsolicited": unsol.ratio(),
                    "cont_over_raw_pairs": { "median": median(&sol_ratios), "p10": quantile(&sol_ratios, 0.1), "p90": quantile(&sol_ratios, 0.9),
                                             "pairs": a.bw_chunks, "replies_each": a.bw_chunk_calls },
                    "cont_unsolicited_over_raw_pairs": { "median": median(&unsol_ratios), "p10": quantile(&unsol_ratios, 0.1),
                                                         "p90": quantile(&unsol_ratios, 0.9), "pairs": a.bw_chunks, "replies_each": a.bw_chunk_calls },
                    "over_udp_unpinned": two / udp, "over_tcp_unpinned": two / tcp,
                    "same_core": { "rpc_2way_8k_p50_us": rpc_same, "udp_8k_p50_us": udp_same, "tcp_8k_p50_us": tcp_same,
                                   "over_udp": same_over_udp, "over_tcp": same_over_tcp,
                                   "rounds": a.same_stretches, "calls_each": a.same_stretch_calls,
                                   "over_udp_rounds": { "median": median(&same.over_udp), "p10": quantile(&same.over_udp, 0.1), "p90": quantile(&same.over_udp, 0.9) },
                                   "over_tcp_rounds": { "median": median(&same.over_tcp), "p10": quantile(&same.over_tcp, 0.1), "p90": quantile(&same.over_tcp, 0.9) } },
                    "cross_core": { "rpc_2way_8k_p50_us": two, "udp_8k_p50_us": udp_cross, "tcp_8k_p50_us": tcp_cross,
                                    "over_udp": two / udp_cross, "over_tcp": two / tcp_cross },
                    // Each placement compared with its like: one third or less of both
                    // socket baselines on one core and across two.
                    "third_of_sockets_in_matched_placements": same_over_udp <= 1.0 / 3.0 && same_over_tcp <= 1.0 / 3.0
                        && two / udp_cross <= 1.0 / 3.0 && two / tcp_cross <= 1.0 / 3.0 });
        // The latency distributions behind the socket comparisons, as quantiles (`cdf`).
        summary["cdf_quantiles"] = json!(CDF_Q);
        summary["same_core"]["rpc_2way_8k_cdf_us"] = json!(cdf(&mut same.rpc));
        summary["same_core"]["udp_8k_cdf_us"] = json!(cdf(&mut same.udp));
        summary["same_core"]["tcp_8k_cdf_us"] = json!(cdf(&mut same.tcp));
        summary["cross_core"]["udp_8k_cdf_us"] = json!(cdf(&mut udp_cross_lat));
        summary["cross_core"]["tcp_8k_cdf_us"] = json!(cdf(&mut tcp_cross_lat));
        println!("{summary}");
        return Ok(());
    }
    println!("NetRPC over virtual NICs (native firmware, in-process link; one thread per node)");
    println!(
        "{:<6} {:<6} {:>8} {:<18} {:>9} {:>9} {:>10} {:>10}",
        "ways", "mode", "payload", "kind", "p50 µs", "p99 µs", "MB/s", "calls/s"
    );
    for r in &rows {
        println!(
            "{:<6} {:<6} {:>8} {:<18} {:>9.1} {:>9.1} {:>10.1} {:>10.0}",
            format!("{}-way", r.ways),
            r.variant,
            r.payload,
            r.kind,
            r.p50,
            r.p99,
            r.mb_s,
            r.calls_s
        );
    }
    println!("\nbaselines (same run): 16 B request / 8 KB reply, p50");
    println!("  UDP loopback {udp:.1} µs (busy-polled {udp_spin:.1} µs), TCP NODELAY {tcp:.1} µs (busy-polled {tcp_spin:.1} µs)");
    println!("  raw Trapeze round trip (no NetRPC), one at a time: 0 B {raw_rt0:.1} µs, 8 KB reply {raw_rt8:.1} µs");
    println!(
        "\n2-way wait 8 KB solicited p50 {two:.1} µs against sockets placed by the scheduler: {:.2}x UDP, {:.2}x TCP (busy-polled: {:.2}x, {:.2}x)",
        two / udp,
        two / tcp,
        two / udp_spin,
        two / tcp_spin
    );
    println!("matched placements, 2-way 8 KB p50 (blocking sockets):");
    println!(
        "  same core (NetRPC: both nodes on one thread; sockets: both ends on CPU 0): NetRPC {rpc_same:.2} µs, UDP {udp_same:.1} µs ({same_over_udp:.2}x), TCP {tcp_same:.1} µs ({same_over_tcp:.2}x)"
    );
    println!(
        "    (p50 of all calls of {} rounds in which the three take turns, {} calls each; per round NetRPC/UDP p10 {:.2} median {:.2} p90 {:.2}, NetRPC/TCP p10 {:.2} median {:.2} p90 {:.2})",
        a.same_stretches,
        a.same_stretch_calls,
        quantile(&same.over_udp, 0.1),
        median(&same.over_udp),
        quantile(&same.over_udp, 0.9),
        quantile(&same.over_tcp, 0.1),
        median(&same.over_tcp),
        quantile(&same.over_tcp, 0.9)
    );
    println!(
        "  two cores (NetRPC: a thread per side; sockets: CPU 0 / CPU 1): NetRPC {two:.1} µs, UDP {udp_cross:.1} µs ({:.2}x), TCP {tcp_cross:.1} µs ({:.2}x)",
        two / udp_cross,
        two / tcp_cross
    );
    print_ways(&mut ways, &a);
    println!("  (table rows alone: {:.2})", three / two);
    println!(
        "nonblocking 8 KB bandwidth, NetRPC cont / raw NIC, same payload kind, {} outstanding ({} pairs of interleaved stretches of {} replies; table row alone {:.2}):",
        a.window,
        a.bw_chunks,
        a.bw_chunk_calls,
        cont_bw / sol.raw_mb_s()
    );
    print_bw(&bw);
    Ok(())
}
