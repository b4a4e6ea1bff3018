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
//! The nonblocking-vs-raw bandwidth ratio is measured apart from the table: `--bw-reps`
//! pairs of runs on fresh nodes (each after an untimed warm-up), raw and NetRPC
//! interleaved (order alternating), the median of the pairs' ratios reported, with every
//! pair's own ratio printed so the spread is visible.

use anyhow::Context;
use netrpc::prelude::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_firmware::iface::entry::Segment;
use trapeze_host::endpoint::{EndpointConfig, SendMsg};
use trapeze_vnic::host::DEFAULT_REGION_BASE;
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::rpc::{Frame, Frames, RpcPort, Service, FRAME_BYTES};
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
    /// Interleaved repetitions of the NetRPC-vs-raw bandwidth comparison (each a fresh
    /// pair of nodes; the ratio reported is the median over the repetitions).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=101))]
    bw_reps: u32,
    /// 8 KB replies per measurement in that comparison.
    #[arg(long, default_value_t = 20_000)]
    bw_pair_calls: u32,
    /// Only run the same-thread 2-way 8 KB round trip (`--calls` of them) and print its
    /// p50: the mode to profile NetRPC's CPU cost per round trip with.
    #[arg(long)]
    same_thread_only: bool,
    /// Only run the interleaved nonblocking-NetRPC / raw-NIC bandwidth pairs and print
    /// them: the mode to profile the nonblocking path with.
    #[arg(long)]
    bw_only: bool,
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

fn cont(ctx: &mut trapeze_vnic::rpc::Node<Server>, o: &Outcome<Frame>, _arg: u64) -> bool {
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
    let nic = Arc::new(Nic::new(&format!("b{id}"), Link::new(id, Box::new(sw.port(id)), FaultConfig::default()), Duration::ZERO)?);
    let inline = nic.start_inline()?;
    let region = Arc::new(Mapping::create_memfd("bench-frames", 16 << 20)?);
    nic.shared().dma.register("bench", DEFAULT_REGION_BASE, region.clone(), 0, 16 << 20).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = EndpointConfig { node_id: id, mtu: FRAME_BYTES, ..EndpointConfig::default() };
    let service = Server { page: 0, directory, done: 0, busy_once: false };
    let rcfg = Config { call_timeout: 2_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
    let mut p = RpcPort::new(nic.mem(), region, DEFAULT_REGION_BASE, cfg, [id as u64 + 1, 99], service, rcfg, Some(inline), None)?;
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

/// 2-way wait 8 KB solicited NetRPC with both nodes polled by the calling thread: the
/// NetRPC counterpart of a same-core socket round trip (no data crosses cores, no
/// wakeup). p50 in µs.
fn rpc_same_thread(calls: u32) -> anyhow::Result<f64> {
    Placement::SameCore.pin(false)?;
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, false)?;
    let p50 = wait_8k_p50_on(&mut client, 2, calls, || {
        server.poll();
    });
    Placement::unpin()?;
    p50
}

/// p50 (µs) of `calls` blocking 8 KB solicited calls from `p`, `ways` = 2 (to node 1) or 3
/// (node 1 delegates to node 2); `also` runs beside each poll of `p` (a same-thread
/// server). The clock is read only now and then while waiting: it is not part of the
/// round trip measured.
fn wait_8k_p50_on(p: &mut Port, ways: u32, calls: u32, mut also: impl FnMut()) -> anyhow::Result<f64> {
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
    Ok(pct(&mut lat, 0.5))
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
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut servers = vec![node(&sw, 1, ways == 3)?];
    if ways == 3 {
        servers.push(node(&sw, 2, false)?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let thread = serve_thread(servers, stop.clone());
    let result = Placement::CrossCore.pin(false).and_then(|()| f(&mut client));
    let unpinned = Placement::unpin();
    stop.store(true, Ordering::Relaxed);
    let joined = thread.join().map_err(|_| anyhow::anyhow!("server panicked"));
    let r = result?;
    unpinned?;
    joined?;
    Ok(r)
}

/// Poll the server nodes on one thread, pinned to CPU 1, until `stop`.
fn serve_thread(mut ports: Vec<Port>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    spawn_named("rpc-server", move || {
        // Best effort: an unpinned server still answers.
        let _ = Placement::CrossCore.pin(true);
        let mut idle = 0u32;
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            for p in ports.iter_mut() {
                busy |= p.poll();
            }
            if busy {
                idle = 0;
            } else {
                idle += 1;
                if idle >= SPIN_PASSES {
                    idle = 0;
                    std::thread::yield_now();
                }
            }
        }
    })
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
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
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
    let secs = bandwidth(p, variant, payload, n, a.window, &issue)?;
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
) -> anyhow::Result<f64> {
    let deferred = variant == "defer";
    let t0 = Instant::now();
    if variant == "wait" {
        for _ in 0..n {
            let id = issue(p, Mode::Wait, p.now())?;
            let o = loop {
                p.poll();
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
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Replies run untimed before a bandwidth measurement of `count`.
fn warm_up(count: u32) -> u32 {
    (count / 10).max(100)
}

/// NetRPC's nonblocking 8 KB bandwidth (2-way, `cont`, `window` calls outstanding, the
/// reply payload `kind`) on a fresh pair of nodes: the traffic of [`raw_request_reply`]
/// through NetRPC. MB/s of reply payload.
fn rpc_cont_bandwidth(count: u32, window: u32, kind: Kind) -> anyhow::Result<f64> {
    let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
        let rt = reply_to(p, kind)?;
        p.rpc.call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, mode).map_err(|e| anyhow::anyhow!("call: {e:?}"))
    };
    // Placed like the raw baseline (client on CPU 0, server on CPU 1).
    let secs = with_servers(2, |client| {
        // Untimed warm-up (first touches of the frames, lanes filling), like the raw side's.
        bandwidth(client, "cont", FRAME_BYTES, warm_up(count), window, &issue)?;
        bandwidth(client, "cont", FRAME_BYTES, count, window, &issue)
    })?;
    Ok(count as f64 * FRAME_BYTES as f64 / secs / 1e6)
}

/// The bandwidth comparison, stabilised: `reps` rounds of (raw NIC, NetRPC) measurements
/// for each payload kind, interleaved (the order alternating), so drift in the machine's
/// load hits all alike. Each kind is compared with raw Trapeze moving the same payloads
/// the same way: solicited replies into IPT-armed frames, unsolicited ones into receive
/// buffers.
struct BwCompare {
    raw: Vec<f64>,
    rpc: Vec<f64>,
    raw_unsol: Vec<f64>,
    rpc_unsol: Vec<f64>,
}

impl BwCompare {
    fn run(reps: u32, count: u32, window: u32) -> anyhow::Result<Self> {
        let mut c = BwCompare { raw: Vec::new(), rpc: Vec::new(), raw_unsol: Vec::new(), rpc_unsol: Vec::new() };
        for i in 0..reps {
            for kind in [Kind::Solicited, Kind::Unsolicited] {
                let (raw, rpc) = if i % 2 == 0 {
                    let raw = raw_request_reply(count, window, kind)?;
                    (raw, rpc_cont_bandwidth(count, window, kind)?)
                } else {
                    let rpc = rpc_cont_bandwidth(count, window, kind)?;
                    (raw_request_reply(count, window, kind)?, rpc)
                };
                let (raws, rpcs) = if kind == Kind::Solicited { (&mut c.raw, &mut c.rpc) } else { (&mut c.raw_unsol, &mut c.rpc_unsol) };
                raws.push(raw);
                rpcs.push(rpc);
            }
        }
        Ok(c)
    }
    /// Per-pair ratios NetRPC / raw (solicited), sorted.
    fn ratios(&self) -> Vec<f64> {
        sorted_ratios(&self.rpc, &self.raw)
    }
    /// Per-pair ratios NetRPC / raw (unsolicited), sorted.
    fn ratios_unsol(&self) -> Vec<f64> {
        sorted_ratios(&self.rpc_unsol, &self.raw_unsol)
    }
}

fn sorted_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    r.sort_by(f64::total_cmp);
    r
}

/// p50 (µs) of `calls` blocking 8 KB solicited calls, `ways` = 2 (node 0 → 1) or 3 (node 0
/// → directory 1 → holder 2 → node 0), on fresh nodes with the servers on their thread.
fn wait_8k_p50(ways: u32, calls: u32) -> anyhow::Result<f64> {
    with_servers(ways, |p| wait_8k_p50_on(p, ways, calls, || {}))
}

/// The 3-way / 2-way latency ratio from `reps` interleaved pairs of fresh setups (order
/// alternating), so slow phases of a shared machine hit both sides: per-pair ratios.
fn ways_compare(reps: u32, calls: u32) -> anyhow::Result<Vec<f64>> {
    let mut ratios = Vec::new();
    for i in 0..reps {
        let (two, three) = if i % 2 == 0 {
            let two = wait_8k_p50(2, calls)?;
            (two, wait_8k_p50(3, calls)?)
        } else {
            let three = wait_8k_p50(3, calls)?;
            (wait_8k_p50(2, calls)?, three)
        };
        ratios.push(three / two);
    }
    ratios.sort_by(f64::total_cmp);
    Ok(ratios)
}

/// The same-core comparison as interleaved triples (NetRPC with both nodes on one
/// thread, blocking UDP and TCP with both ends on CPU 0), `reps` of them, each side
/// `calls` round trips: this VM's speed drifts by tens of percent from second to second,
/// and a triple measured back to back sees the same machine. Per triple (NetRPC/UDP,
/// NetRPC/TCP), plus each side's p50s.
struct SameCore {
    over_udp: Vec<f64>,
    over_tcp: Vec<f64>,
    rpc: Vec<f64>,
    udp: Vec<f64>,
    tcp: Vec<f64>,
}

fn same_core_compare(reps: u32, calls: u32) -> anyhow::Result<SameCore> {
    let mut s = SameCore { over_udp: Vec::new(), over_tcp: Vec::new(), rpc: Vec::new(), udp: Vec::new(), tcp: Vec::new() };
    for i in 0..reps {
        let (rpc, udp, tcp) = if i % 2 == 0 {
            let rpc = rpc_same_thread(calls)?;
            let udp = udp_baseline(calls, false, Placement::SameCore)?;
            (rpc, udp, tcp_baseline(calls, false, Placement::SameCore)?)
        } else {
            let tcp = tcp_baseline(calls, false, Placement::SameCore)?;
            let udp = udp_baseline(calls, false, Placement::SameCore)?;
            (rpc_same_thread(calls)?, udp, tcp)
        };
        s.over_udp.push(rpc / udp);
        s.over_tcp.push(rpc / tcp);
        s.rpc.push(rpc);
        s.udp.push(udp);
        s.tcp.push(tcp);
    }
    Ok(s)
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

/// Raw Trapeze with the same traffic as the nonblocking RPC rows but no NetRPC: node 0
/// keeps `window` small requests outstanding, node 1 answers each with 8 KB from its page,
/// unsolicited (into a receive buffer) or solicited (node 0 arms an IPT frame per request
/// and sends its payload token; the reply lands in that frame, which node 0 then frees).
/// MB/s of replies at node 0: the NIC path's ceiling for that pattern.
fn raw_request_reply(count: u32, window: u32, kind: Kind) -> anyhow::Result<f64> {
    let solicited = kind == Kind::Solicited;
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let srv = spawn_named("raw-server", move || {
        let _ = Placement::CrossCore.pin(true);
        let seg = [Segment { addr: DEFAULT_REGION_BASE + server.node.service.page, len: FRAME_BYTES }];
        // The payload token of each request owed a reply (NONE: unsolicited).
        let mut owed = std::collections::VecDeque::new();
        while !st.load(Ordering::Relaxed) {
            server.raw_recv_each(|_, ctrl| {
                let token = ctrl.get(..8).map_or(0, |t| u64::from_le_bytes(t.try_into().unwrap_or_default()));
                owed.push_back(PayloadToken(token));
            });
            while let Some(&token) = owed.front() {
                let reply = SendMsg { peer: 0, ctrl: b"page", payload_len: FRAME_BYTES, segments: &seg, token };
                if !server.raw_send(&reply) {
                    break;
                }
                owed.pop_front();
            }
            if !owed.is_empty() {
                std::thread::yield_now();
            }
        }
    });
    Placement::CrossCore.pin(false)?;
    let t0 = Instant::now();
    let (mut sent, mut got) = (0u32, 0u32);
    // Solicited: the frames armed for outstanding requests, in request order (one server
    // answers in order).
    let mut armed = std::collections::VecDeque::new();
    let mut passes = 0u32;
    // The first `warm` replies are not timed (first touches of the frames, lanes
    // filling), like NetRPC's warm-up run.
    let warm = warm_up(count);
    let total = count + warm;
    // When the timed part began, and how many replies were in by then.
    let mut timed: Option<(Instant, u32)> = None;
    while got < total {
        if timed.is_none() && got >= warm {
            timed = Some((Instant::now(), got));
        }
        while sent < total && sent - got < window {
            let mut ctrl = [0u8; 8];
            if solicited {
                let ReplyTo::Solicited { token, frame } = client.solicit()? else { unreachable!() };
                ctrl = token.to_le_bytes();
                armed.push_back(frame);
            }
            let request = SendMsg { peer: 1, ctrl: &ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE };
            if !client.raw_send(&request) {
                if let Some(f) = armed.pop_back().filter(|_| solicited) {
                    client.done_with(f);
                }
                break;
            }
            sent += 1;
        }
        let mut replies = 0;
        client.raw_recv_each(|payload, _| replies += (payload == FRAME_BYTES) as u32);
        for _ in 0..replies {
            if let Some(f) = armed.pop_front() {
                client.done_with(f);
            }
        }
        got += replies;
        // The stall check reads the clock now and then, not on every pass (a clock read
        // costs more than an idle pass; NetRPC's loop reads it once per burst of calls).
        passes = passes.wrapping_add(1);
        if passes.is_multiple_of(1024) && t0.elapsed() > Duration::from_secs(30) {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!("raw request/reply stalled at {got}/{total} (warm-up included)");
        }
    }
    let (t1, from) = timed.unwrap_or((t0, 0));
    let secs = t1.elapsed().as_secs_f64();
    Placement::unpin()?;
    stop.store(true, Ordering::Relaxed);
    srv.join().map_err(|_| anyhow::anyhow!("server panicked"))?;
    Ok((got - from) as f64 * FRAME_BYTES as f64 / secs / 1e6)
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

fn udp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<f64> {
    let srv = UdpSocket::bind("127.0.0.1:0")?;
    let cli = UdpSocket::bind("127.0.0.1:0")?;
    let (sa, ca) = (srv.local_addr()?, cli.local_addr()?);
    srv.set_nonblocking(spin)?;
    cli.set_nonblocking(spin)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        let _ = place.pin(true);
        let mut buf = [0u8; 64];
        let reply = vec![0x5Au8; 8192];
        srv.set_read_timeout(Some(Duration::from_millis(50))).ok();
        while !st.load(Ordering::Relaxed) {
            match srv.recv_from(&mut buf) {
                Ok((_, from)) => {
                    let _ = srv.send_to(&reply, from);
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    });
    place.pin(false)?;
    let mut lat = Vec::with_capacity(n as usize);
    let mut buf = vec![0u8; 9000];
    for _ in 0..n {
        let t0 = Instant::now();
        cli.send_to(&[1u8; 16], sa)?;
        loop {
            match cli.recv(&mut buf) {
                Ok(8192) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    let _ = ca;
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    Placement::unpin()?;
    Ok(pct(&mut lat, 0.5))
}

fn tcp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let _ = place.pin(true);
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(spin)?;
        let reply = vec![0x5Au8; 8192];
        let mut buf = [0u8; 16];
        loop {
            let mut got = 0;
            while got < 16 {
                match s.read(&mut buf[got..]) {
                    Ok(0) => return Ok(()),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) => return Err(e),
                }
            }
            let mut off = 0;
            while off < reply.len() {
                match s.write(&reply[off..]) {
                    Ok(k) => off += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) => return Err(e),
                }
            }
        }
    });
    place.pin(false)?;
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    c.set_nonblocking(spin)?;
    let mut lat = Vec::with_capacity(n as usize);
    let mut buf = vec![0u8; 8192];
    for _ in 0..n {
        let t0 = Instant::now();
        let mut off = 0;
        while off < 16 {
            match c.write(&[1u8; 16][off..]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        let mut got = 0;
        while got < 8192 {
            match c.read(&mut buf[got..]) {
                Ok(0) => anyhow::bail!("tcp server closed"),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    drop(c);
    let _ = server.join();
    Placement::unpin()?;
    Ok(pct(&mut lat, 0.5))
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(a) {
        eprintln!("bench_rpc: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> anyhow::Result<()> {
    start_cpus();
    if a.same_thread_only {
        let p50 = rpc_same_thread(a.calls)?;
        println!("same thread 2-way wait 8 KB solicited NetRPC p50 {p50:.2} us ({} calls)", a.calls);
        return Ok(());
    }
    if a.bw_only {
        let bw = BwCompare::run(a.bw_reps, a.bw_pair_calls.max(1000), a.window)?;
        let best = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
        let list = |v: &[f64]| v.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
        for (name, raw, rpc, ratios) in [
            ("solicited", &bw.raw, &bw.rpc, bw.ratios()),
            ("unsolicited", &bw.raw_unsol, &bw.rpc_unsol, bw.ratios_unsol()),
        ] {
            println!(
                "{name}: NetRPC / raw paired median {:.2}; best of {} each: raw {:.0} MB/s, NetRPC cont {:.0} MB/s; per pair {}",
                median(&ratios),
                a.bw_reps,
                best(raw),
                best(rpc),
                list(&ratios)
            );
        }
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
                            format!("{ways}-way {variant} {payload} B kind {}: frames free {}, starved {}, stats {:?}",
                                kind as u8, client.node.frames.available(), client.node.frames.starved, client.rpc.stats())
                        })?;
                        rows.push(r);
                    }
                }
            }
            Ok(())
        })?;
    }
    let bw = BwCompare::run(a.bw_reps, a.bw_pair_calls.max(1000), a.window)?;
    let ratios = bw.ratios();
    let best = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let (raw, rpc_bw) = (best(&bw.raw), best(&bw.rpc));
    let (raw_unsol, rpc_unsol) = (best(&bw.raw_unsol), best(&bw.rpc_unsol));
    // Best of N: a busy machine only ever slows a run down, so each side's fastest run
    // is the closest to its capacity; the paired median shows the spread honestly.
    let cont_over_raw = rpc_bw / raw;
    let unsol_over_raw = rpc_unsol / raw_unsol;
    let paired_median = median(&ratios);
    let ratios_unsol = bw.ratios_unsol();
    let ways = ways_compare(a.bw_reps.min(9), a.calls)?;
    let ways_median = median(&ways);
    let raw_rt0 = raw_round_trip(a.calls, 0)?;
    let raw_rt8 = raw_round_trip(a.calls, FRAME_BYTES)?;
    let udp = udp_baseline(a.calls, false, Placement::Unpinned)?;
    let tcp = tcp_baseline(a.calls, false, Placement::Unpinned)?;
    let udp_spin = udp_baseline(a.calls, true, Placement::Unpinned)?;
    let tcp_spin = tcp_baseline(a.calls, true, Placement::Unpinned)?;
    // Matched placements: NetRPC with both nodes on one thread against blocking sockets
    // with both ends on CPU 0; NetRPC's usual two threads against sockets on CPU 0 / 1.
    let same = same_core_compare(a.bw_reps.min(9), a.calls.max(20_000))?;
    let (rpc_same, udp_same, tcp_same) = (median(&same.rpc), median(&same.udp), median(&same.tcp));
    let (same_over_udp, same_over_tcp) = (median(&same.over_udp), median(&same.over_tcp));
    let udp_cross = udp_baseline(a.calls, false, Placement::CrossCore)?;
    let tcp_cross = tcp_baseline(a.calls, false, Placement::CrossCore)?;
    let find = |v: &str, w: u32, p: u32, k: &str| rows.iter().find(|r| r.variant == v && r.ways == w && r.payload == p && r.kind == k);
    let two = find("wait", 2, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let three = find("wait", 3, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let cont_bw = find("cont", 2, 8192, "solicited").map_or(f64::NAN, |r| r.mb_s);
    if a.json {
        for r in &rows {
            println!(
                "{}",
                json!({ "variant": r.variant, "ways": r.ways, "payload": r.payload, "kind": r.kind,
                        "p50_us": (r.p50 * 10.0).round() / 10.0, "p99_us": (r.p99 * 10.0).round() / 10.0,
                        "mb_s": (r.mb_s * 10.0).round() / 10.0, "calls_s": r.calls_s.round(),
                        // The rows' nodes run on two threads, one per core: their like is
                        // sockets with an end on each core. Unpinned, the scheduler often puts
                        // both socket ends on one core instead (see the summary).
                        "udp_8k_p50_us": (udp_cross * 10.0).round() / 10.0, "tcp_8k_p50_us": (tcp_cross * 10.0).round() / 10.0,
                        "udp_8k_unpinned_p50_us": (udp * 10.0).round() / 10.0, "tcp_8k_unpinned_p50_us": (tcp * 10.0).round() / 10.0 })
            );
        }
        println!(
            "{}",
            json!({ "summary": true, "udp_8k_unpinned_p50_us": udp, "tcp_8k_unpinned_p50_us": tcp,
                    "udp_8k_spin_unpinned_p50_us": udp_spin, "tcp_8k_spin_unpinned_p50_us": tcp_spin, "raw_rt_0_p50_us": raw_rt0, "raw_rt_8k_p50_us": raw_rt8, "raw_nic_8k_mb_s": raw, "wait_2way_8k_solicited_p50_us": two,
                    "wait_3way_8k_solicited_p50_us": three, "three_over_two": three / two,
                    "three_over_two_paired_median": ways_median, "three_over_two_pairs": ways,
                    "cont_2way_8k_solicited_mb_s": cont_bw, "cont_over_raw": cont_over_raw,
                    "raw_nic_8k_best_mb_s": raw, "rpc_cont_8k_best_mb_s": rpc_bw,
                    "cont_over_raw_paired_median": paired_median,
                    "bw_pairs_raw_mb_s": bw.raw, "bw_pairs_rpc_mb_s": bw.rpc,
                    "cont_over_raw_min": ratios.first(), "cont_over_raw_max": ratios.last(),
                    "raw_nic_8k_unsolicited_best_mb_s": raw_unsol, "rpc_cont_8k_unsolicited_best_mb_s": rpc_unsol,
                    "cont_unsolicited_over_raw_unsolicited": unsol_over_raw,
                    "cont_unsolicited_over_raw_paired_median": median(&ratios_unsol),
                    "over_udp_unpinned": two / udp, "over_tcp_unpinned": two / tcp,
                    "same_core": { "rpc_2way_8k_p50_us": rpc_same, "udp_8k_p50_us": udp_same, "tcp_8k_p50_us": tcp_same,
                                   "over_udp": same_over_udp, "over_tcp": same_over_tcp,
                                   "over_udp_triples": same.over_udp, "over_tcp_triples": same.over_tcp },
                    "cross_core": { "rpc_2way_8k_p50_us": two, "udp_8k_p50_us": udp_cross, "tcp_8k_p50_us": tcp_cross,
                                    "over_udp": two / udp_cross, "over_tcp": two / tcp_cross },
                    // Each placement compared with its like: one third or less of both
                    // socket baselines on one core and across two.
                    "third_of_sockets_in_matched_placements": same_over_udp <= 1.0 / 3.0 && same_over_tcp <= 1.0 / 3.0
                        && two / udp_cross <= 1.0 / 3.0 && two / tcp_cross <= 1.0 / 3.0 })
        );
        return Ok(());
    }
    println!("NetRPC over virtual NICs (native firmware, in-process link; one thread per node)");
    println!("{:<6} {:<6} {:>8} {:<18} {:>9} {:>9} {:>10} {:>10}", "ways", "mode", "payload", "kind", "p50 µs", "p99 µs", "MB/s", "calls/s");
    for r in &rows {
        println!(
            "{:<6} {:<6} {:>8} {:<18} {:>9.1} {:>9.1} {:>10.1} {:>10.0}",
            format!("{}-way", r.ways), r.variant, r.payload, r.kind, r.p50, r.p99, r.mb_s, r.calls_s
        );
    }
    println!("\nbaselines (same run): 16 B request / 8 KB reply, p50");
    println!("  UDP loopback {udp:.1} µs (busy-polled {udp_spin:.1} µs), TCP NODELAY {tcp:.1} µs (busy-polled {tcp_spin:.1} µs)");
    println!(
        "  raw Trapeze request / 8 KB reply, {} outstanding (no NetRPC), against NetRPC cont 8 KB (best of each):",
        a.window
    );
    println!("    solicited (IPT frames): raw {raw:.1} MB/s, NetRPC {rpc_bw:.1} MB/s; unsolicited (receive buffers): raw {raw_unsol:.1} MB/s, NetRPC {rpc_unsol:.1} MB/s");
    println!(
        "    ({} interleaved pairs of {} replies; per pair NetRPC/raw solicited, sorted: {})",
        a.bw_reps,
        a.bw_pair_calls.max(1000),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ")
    );
    println!("  raw Trapeze round trip (no NetRPC), one at a time: 0 B {raw_rt0:.1} µs, 8 KB reply {raw_rt8:.1} µs");
    println!(
        "\n2-way wait 8 KB solicited p50 {two:.1} µs against sockets placed by the scheduler: {:.2}x UDP, {:.2}x TCP (busy-polled: {:.2}x, {:.2}x)",
        two / udp,
        two / tcp,
        two / udp_spin,
        two / tcp_spin
    );
    println!("matched placements, 2-way 8 KB p50 (blocking sockets):");
    let list = |v: &[f64]| v.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
    println!(
        "  same core (NetRPC: both nodes on one thread; sockets: both ends on CPU 0): NetRPC {rpc_same:.2} µs, UDP {udp_same:.1} µs ({same_over_udp:.2}x), TCP {tcp_same:.1} µs ({same_over_tcp:.2}x)"
    );
    println!(
        "    (medians of {} interleaved triples of {} calls each; per triple NetRPC/UDP {}, NetRPC/TCP {})",
        same.rpc.len(),
        a.calls.max(20_000),
        list(&same.over_udp),
        list(&same.over_tcp)
    );
    println!(
        "  two cores (NetRPC: a thread per side; sockets: CPU 0 / CPU 1): NetRPC {two:.1} µs, UDP {udp_cross:.1} µs ({:.2}x), TCP {tcp_cross:.1} µs ({:.2}x)",
        two / udp_cross,
        two / tcp_cross
    );
    println!(
        "3-way / 2-way (wait, 8 KB solicited): {ways_median:.2} (median of {} interleaved pairs of {} calls: {}; table rows alone: {:.2})",
        ways.len(),
        a.calls,
        ways.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" "),
        three / two
    );
    // The headline is the paired median: this VM swings between phases ~1.6x apart for
    // seconds at a time, so the best run of either side mostly says which side was lucky.
    println!(
        "nonblocking 8 KB bandwidth / raw NIC bandwidth, same payload kind (median of {} interleaved pairs): solicited {paired_median:.2} (range {:.2}-{:.2}; best of each {cont_over_raw:.2}; table row alone {:.2}), unsolicited {:.2} (best of each {unsol_over_raw:.2})",
        a.bw_reps,
        ratios.first().copied().unwrap_or(f64::NAN),
        ratios.last().copied().unwrap_or(f64::NAN),
        cont_bw / raw,
        median(&ratios_unsol)
    );
    Ok(())
}
