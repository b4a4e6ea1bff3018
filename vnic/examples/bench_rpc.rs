// SPDX-License-Identifier: GPL-2.0-only
//! The NetRPC benchmark run by `cargo xtask bench rpc`: the shape of Table 1 of the GMS
//! RPC-variants paper over virtual NICs (native firmware, in-process link), with the
//! baselines measured in the same run.
//!
//! Each node drives its host API, its NetRPC and its NIC's firmware (inline) from one
//! thread; the client is one thread and the server nodes (one, or directory + holder in
//! 3-way runs) share another: on this 2-core machine a thread per NIC and per host would
//! measure the scheduler. Rows: 2-way (node 0 → node 1) and 3-way (node 0 → directory node 1 →
//! holder node 2 → node 0) × wait / cont (nonblocking continuation) / defer (the
//! continuation finds its "lock" held once and runs from the deferred queue) × reply
//! payload 0 / 4 KB / 8 KB × solicited (IPT, zero-copy) / unsolicited (receive buffer
//! detached) / unsolicited + copy. Latency: one call at a time, p50/p99. Bandwidth: one
//! call at a time for wait; `--window` calls outstanding for cont/defer. Baselines: raw
//! Trapeze with the same request / 8 KB reply traffic and window but no NetRPC (the NIC
//! path's ceiling, same execution model), and a 16 B request / 8 KB reply over
//! UDP and TCP (NODELAY) loopback with blocking sockets (the usual way) and busy-polled
//! non-blocking sockets (the same no-sleep model as ours).

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
    /// Client side: completions and latencies of nonblocking calls.
    done: u64,
    lat_ns: Vec<u64>,
    epoch: Instant,
    /// Deferred variant: the "lock" is busy once per call.
    busy_once: bool,
}

impl Service for Server {
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

fn cont(ctx: &mut trapeze_vnic::rpc::Node<Server>, o: &Outcome<Frame>, started: u64) -> bool {
    if ctx.service.busy_once {
        // A "lock" held: refuse once without side effects; the retry runs deferred.
        ctx.service.busy_once = false;
        return false;
    }
    ctx.service.busy_once = ctx.service.directory; // re-armed per call by the client (see below)
    let now = ctx.service.epoch.elapsed().as_nanos() as u64;
    ctx.service.lat_ns.push(now - started);
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
    let service = Server { page: 0, directory, done: 0, lat_ns: Vec::new(), epoch: Instant::now(), busy_once: false };
    let rcfg = Config { call_timeout: 2_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
    let mut p = RpcPort::new(nic.mem(), region, DEFAULT_REGION_BASE, cfg, [id as u64 + 1, 99], service, rcfg, Some(inline), None)?;
    let page = p.node.frames.alloc().context("no frame for the page")?;
    p.node.frames.write(page, &vec![0x5Au8; FRAME_BYTES as usize]);
    p.node.service.page = page;
    Ok(p)
}

/// Poll the server nodes on one thread until `stop` (a thread per node would put three
/// spinning threads on two cores in 3-way runs).
fn serve_thread(mut ports: Vec<Port>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let mut busy = false;
            for p in ports.iter_mut() {
                busy |= p.poll();
            }
            if !busy {
                std::thread::yield_now();
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
    let issue = |p: &mut Port, mode: Mode| -> anyhow::Result<CallId> {
        let rt = reply_to(p, kind)?;
        let now = p.now();
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
            let id = issue(p, Mode::Wait)?;
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
            let id = issue(p, Mode::NonBlocking)?;
            let started = p.node.service.epoch.elapsed().as_nanos() as u64;
            p.rpc.push_continuation(id, cont, started).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            while p.node.service.done == before {
                p.poll();
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    // Bandwidth.
    let n = a.bw_calls;
    let t0 = Instant::now();
    if variant == "wait" {
        for _ in 0..n {
            let id = issue(p, Mode::Wait)?;
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
            while issued < n && issued as u64 - (p.node.service.done - start_done) < a.window as u64 {
                p.node.service.busy_once = deferred;
                let id = issue(p, Mode::NonBlocking)?;
                let started = p.node.service.epoch.elapsed().as_nanos() as u64;
                p.rpc.push_continuation(id, cont, started).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                issued += 1;
            }
            p.poll();
        }
    }
    let secs = t0.elapsed().as_secs_f64();
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

/// Raw Trapeze with the same traffic as the nonblocking RPC rows but no NetRPC: node 0
/// keeps `window` small requests outstanding, node 1 answers each with 8 KB from its page
/// (unsolicited). MB/s of replies at node 0: the NIC path's ceiling for that pattern.
fn raw_request_reply(count: u32, window: u32) -> anyhow::Result<f64> {
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let srv = std::thread::spawn(move || {
        let seg = [Segment { addr: DEFAULT_REGION_BASE + server.node.service.page, len: FRAME_BYTES }];
        let reply = SendMsg { peer: 0, ctrl: b"page", payload_len: FRAME_BYTES, segments: &seg, token: PayloadToken::NONE };
        let mut owed = 0u32;
        while !st.load(Ordering::Relaxed) {
            owed += server.raw_recv().1;
            while owed > 0 && server.raw_send(&reply) {
                owed -= 1;
            }
            if owed > 0 {
                std::thread::yield_now();
            }
        }
    });
    let request = SendMsg { peer: 1, ctrl: b"get", payload_len: 0, segments: &[], token: PayloadToken::NONE };
    let t0 = Instant::now();
    let (mut sent, mut got) = (0u32, 0u32);
    while got < count {
        while sent < count && sent - got < window && client.raw_send(&request) {
            sent += 1;
        }
        got += client.raw_recv().0;
        if t0.elapsed() > Duration::from_secs(30) {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!("raw request/reply stalled at {got}/{count}");
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    srv.join().map_err(|_| anyhow::anyhow!("server panicked"))?;
    Ok(count as f64 * FRAME_BYTES as f64 / secs / 1e6)
}

fn udp_baseline(n: u32, spin: bool) -> anyhow::Result<f64> {
    let srv = UdpSocket::bind("127.0.0.1:0")?;
    let cli = UdpSocket::bind("127.0.0.1:0")?;
    let (sa, ca) = (srv.local_addr()?, cli.local_addr()?);
    srv.set_nonblocking(spin)?;
    cli.set_nonblocking(spin)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
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
    Ok(pct(&mut lat, 0.5))
}

fn tcp_baseline(n: u32, spin: bool) -> anyhow::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
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
    let mut rows = Vec::new();
    for ways in [2u32, 3] {
        let sw = InProcSwitch::new();
        let mut client = node(&sw, 0, false)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut servers = vec![node(&sw, 1, ways == 3)?];
        if ways == 3 {
            servers.push(node(&sw, 2, false)?);
        }
        let threads = vec![serve_thread(servers, stop.clone())];
        for variant in ["wait", "cont", "defer"] {
            rows.push(run_row(&mut client, ways, variant, 0, Kind::None, &a)?);
            for payload in [4096u32, 8192] {
                for kind in [Kind::Solicited, Kind::Unsolicited, Kind::Copy] {
                    let r = run_row(&mut client, ways, variant, payload, kind, &a).with_context(|| {
                        format!("{ways}-way {variant} {payload} B kind {}: frames free {}, starved {}, stats {:?}",
                            kind as u8, client.node.frames.available(), client.node.frames.starved, client.rpc.stats())
                    })?;
                    rows.push(r);
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
    }
    let raw = raw_request_reply(a.bw_calls.max(2000), a.window)?;
    let udp = udp_baseline(a.calls, false)?;
    let tcp = tcp_baseline(a.calls, false)?;
    let udp_spin = udp_baseline(a.calls, true)?;
    let tcp_spin = tcp_baseline(a.calls, true)?;
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
                        "udp_8k_p50_us": (udp * 10.0).round() / 10.0, "tcp_8k_p50_us": (tcp * 10.0).round() / 10.0 })
            );
        }
        println!(
            "{}",
            json!({ "summary": true, "udp_8k_p50_us": udp, "tcp_8k_p50_us": tcp, "udp_8k_spin_p50_us": udp_spin,
                    "tcp_8k_spin_p50_us": tcp_spin, "raw_nic_8k_mb_s": raw, "wait_2way_8k_solicited_p50_us": two,
                    "wait_3way_8k_solicited_p50_us": three, "three_over_two": three / two,
                    "cont_2way_8k_solicited_mb_s": cont_bw, "cont_over_raw": cont_bw / raw,
                    "over_udp": two / udp, "over_tcp": two / tcp })
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
    println!("  raw Trapeze request / 8 KB reply, {} outstanding (no NetRPC) {raw:.1} MB/s", a.window);
    println!("\n2-way wait 8 KB solicited p50 {two:.1} µs: {:.2}x UDP, {:.2}x TCP (busy-polled: {:.2}x, {:.2}x)", two / udp, two / tcp, two / udp_spin, two / tcp_spin);
    println!("3-way / 2-way (wait, 8 KB solicited): {:.2}", three / two);
    println!("nonblocking 8 KB solicited bandwidth / raw NIC bandwidth: {:.2}", cont_bw / raw);
    Ok(())
}
