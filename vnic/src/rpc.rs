// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC on a virtual NIC in user space: the runtime that moves `netrpc` messages
//! through the Trapeze host API.
//!
//! Frames are fixed-size slots of a shared region registered with the NIC for DMA
//! ([`Frame`] = offset in the region). Solicited replies land, zero-copy, in a caller
//! frame armed in the IPT; unsolicited ones land in the receive slot's frame, which is
//! detached and handed over (a fresh frame is attached in its place) — the papers'
//! "unsolicited" cost; `UnsolicitedCopy` then copies into the caller's frame.
//! [`RpcPort::poll`] is one pass of the node: the NIC's firmware (when driven inline),
//! send completions, received messages into `Rpc::handle_message`, timeouts, deferred
//! continuations and transmits.

use crate::nic::{InlineNative, NicMem};
use crate::shm::Mapping;
use anyhow::{bail, Context};
use netrpc::prelude::*;
use netrpc::wire::{message_kind, Kind};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::ipt::{CancelState, PayloadToken};
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, RECV_RING_ENTRIES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_host::endpoint::{Endpoint, EndpointConfig, RecvMsg, SendError, SendMsg};

/// A frame: offset of a [`FRAME_BYTES`] slot in the port's region.
pub type Frame = u64;
/// Size of every frame (a page of the papers' Alphas).
pub const FRAME_BYTES: u32 = 8192;

/// A service's server stubs, with access to the port's frames.
pub trait Service {
    /// Whether the stubs read [`Incoming::now`]. A service that never does sets this to
    /// `false`: the port then reads no clock for its requests (a clock read is a tenth
    /// of a same-thread round trip's bookkeeping) and hands them the last reading it
    /// took, which may be old (bounded by the port's idle timeout checks).
    const READS_CLOCK: bool = true;

    fn serve(&mut self, inc: &Incoming<'_, Frame>, frames: &mut Frames) -> Action<Frame>;
}

/// The port's frames: a pool of fixed-size slots in the shared region.
pub struct Frames {
    pub(crate) region: Arc<Mapping>,
    pub(crate) free: Vec<Frame>,
    /// Frames armed in the IPT, with their tokens.
    pub(crate) armed: Vec<(Frame, PayloadToken)>,
    /// Receive buffers handed out because the pool was empty and the buffer stayed.
    pub starved: u64,
}

impl Frames {
    pub fn alloc(&mut self) -> Option<Frame> {
        self.free.pop()
    }
    pub fn free(&mut self, f: Frame) {
        debug_assert!(!self.free.contains(&f), "frame {f:#x} freed twice");
        self.free.push(f);
    }
    pub fn available(&self) -> usize {
        self.free.len()
    }
    pub fn write(&self, f: Frame, data: &[u8]) -> bool {
        data.len() <= FRAME_BYTES as usize && self.region.write(f as usize, data)
    }
    pub fn read(&self, f: Frame, out: &mut [u8]) -> bool {
        out.len() <= FRAME_BYTES as usize && self.region.read(f as usize, out)
    }
}

/// The context NetRPC calls back into: the service, the frames and the endpoint.
pub struct Node<S> {
    pub service: S,
    pub frames: Frames,
    ep: Endpoint<NicMem, Option<Frame>>,
    base: u64,
}

impl<S: Service> Runtime<Frame> for Node<S> {
    fn serve(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        self.service.serve(inc, &mut self.frames)
    }
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        len <= FRAME_BYTES
            && self.frames.region.copy_from(*to as usize, &self.frames.region, *from as usize, len as usize)
    }
    fn release(&mut self, frame: Frame) {
        if let Some(i) = self.frames.armed.iter().position(|a| a.0 == frame) {
            let (_, token) = self.frames.armed.swap_remove(i);
            // The NIC may be writing into it right now: wait (bounded by one packet).
            let mut st = self.ep.disarm(token);
            while st == CancelState::InFlight {
                std::hint::spin_loop();
                st = self.ep.disarm(token);
            }
        }
        self.frames.free(frame);
    }
}

/// Cut `region` into [`FRAME_BYTES`] frames, attach one to every receive slot, and
/// initialise the endpoint on `mem` with `cfg` (MTU capped at a frame). Needs at least
/// `spare` frames beyond the receive ring. Returns the endpoint, the free frames and each
/// slot's frame.
pub(crate) fn carve<C: Copy>(
    mem: NicMem,
    region: Arc<Mapping>,
    base: u64,
    cfg: &EndpointConfig,
    seed: [u64; 2],
    spare: usize,
) -> anyhow::Result<(Endpoint<NicMem, C>, Frames, Vec<Frame>)> {
    let n = region.len() / FRAME_BYTES as usize;
    if n < RECV_RING_ENTRIES as usize + spare {
        bail!("region holds {n} frames; need at least {}", RECV_RING_ENTRIES as usize + spare);
    }
    let mut free: Vec<Frame> = (0..n as u64).rev().map(|i| i * FRAME_BYTES as u64).collect();
    let slot_frame: Vec<Frame> = (0..RECV_RING_ENTRIES).map(|_| free.pop().unwrap_or_default()).collect();
    let cfg = EndpointConfig { mtu: cfg.mtu.min(FRAME_BYTES), ..*cfg };
    let ep =
        Endpoint::init(mem, &cfg, seed, |i| Some(Segment { addr: base + slot_frame[i as usize], len: FRAME_BYTES }));
    Ok((ep, Frames { region, free, armed: Vec::new(), starved: 0 }, slot_frame))
}

/// Take the message the host API just returned off its receive slot for NetRPC: what
/// arrived with it, and the slot given back to the NIC. An unsolicited payload's frame is
/// detached (the caller gets it as a `Buffer`) and a fresh frame from `frames` takes its
/// place in `slot_frame`; if no frame is free the payload is refused and counted.
pub(crate) fn receive<C: Copy>(
    ep: &mut Endpoint<NicMem, C>,
    base: u64,
    m: &RecvMsg,
    slot_frame: &mut Frame,
    frames: &mut Frames,
) -> InPayload<Frame> {
    let payload = if m.via_ipt() {
        InPayload::Ipt { token: m.token.0, len: m.payload_len }
    } else if m.payload_refused() {
        InPayload::Refused
    } else if m.payload_len > 0 {
        match frames.alloc() {
            Some(fresh) => InPayload::Buffer { frame: std::mem::replace(slot_frame, fresh), len: m.payload_len },
            None => {
                frames.starved += 1;
                InPayload::Refused
            }
        }
    } else {
        InPayload::None
    };
    ep.release_recv(Some(&[Segment { addr: base + *slot_frame, len: FRAME_BYTES }]));
    payload
}

/// Post a NetRPC transmit through the host API; while the send ring is full, `make_room`
/// runs (poll the NIC, reap completions). `false` only for a transmit the API refuses
/// (cannot happen for netrpc's: ctrl ≤ 128 bytes, one segment).
pub(crate) fn post<C: Copy>(
    ep: &mut Endpoint<NicMem, C>,
    base: u64,
    t: &Transmit<Frame>,
    cookie: C,
    mut make_room: impl FnMut(&mut Endpoint<NicMem, C>),
) -> bool {
    let seg;
    let segs: &[Segment] = match t.payload {
        Some((f, len)) => {
            seg = [Segment { addr: base + f, len }];
            &seg
        }
        None => &[],
    };
    let msg = SendMsg {
        peer: t.dst,
        ctrl: t.ctrl(),
        payload_len: t.payload.map_or(0, |p| p.1),
        segments: segs,
        token: PayloadToken(t.tag),
    };
    loop {
        match ep.post_send(&msg, cookie) {
            Ok(()) => return true,
            Err(SendError::RingFull) => make_room(ep),
            Err(_) => return false,
        }
    }
}

/// One node: NetRPC over a host endpoint on a virtual NIC.
pub struct RpcPort<S: Service> {
    pub rpc: Rpc<Node<S>, Frame>,
    pub node: Node<S>,
    cpu: Option<InlineNative>,
    doorbell: Option<Arc<OwnedFd>>,
    epoch: Instant,
    /// The frame attached to each receive slot.
    slot_frame: Vec<Frame>,
    /// The firmware's send-completion sequence when the send ring was last reaped: the
    /// ring is scanned again only once it moved.
    tx_seq_seen: u32,
    /// The message being handled, filled in place by the endpoint (not copied out).
    recv_msg: RecvMsg,
    /// Passes until [`Self::poll`] next looks at the clock for NetRPC's timeouts when
    /// nothing arrived (a clock read costs more than the rest of an idle pass).
    timeout_check_in: u32,
    /// Time (ns since `epoch`) before which arrivals do not scan NetRPC's call records
    /// for timeouts again.
    next_timeout_scan: u64,
    /// The clock (ns since `epoch`) when [`Self::poll`] last read it.
    last_now: u64,
}

/// Nanoseconds between two scans of the call records for timeouts while messages keep
/// arriving (a scan reads every record; timeouts are milliseconds and more, so one fires
/// at most a quarter millisecond late; every 20 µs the scans cost a nonblocking stream
/// a few percent of its bandwidth).
const TIMEOUT_SCAN_NS: u64 = 250_000;

/// Idle passes between two timeout checks when the NIC is driven inline: a few µs of
/// passes, so timeouts (milliseconds and more) fire practically on time.
const TIMEOUT_CHECK_PASSES: u32 = 64;

impl<S: Service> RpcPort<S> {
    /// Set up node `cfg.node_id` on NIC memory `mem` with `region` registered for DMA at
    /// `base`. `cpu`: drive the NIC's firmware from [`Self::poll`] (inline), or `None`
    /// if the NIC has its own processor thread (then `doorbell` wakes it).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mem: NicMem,
        region: Arc<Mapping>,
        base: u64,
        cfg: EndpointConfig,
        seed: [u64; 2],
        service: S,
        rpc_cfg: Config,
        cpu: Option<InlineNative>,
        doorbell: Option<Arc<OwnedFd>>,
    ) -> anyhow::Result<Self> {
        let (ep, frames, slot_frame) = carve(mem, region, base, &cfg, seed, 8)?;
        let mut port = RpcPort {
            rpc: Rpc::new(cfg.node_id, rpc_cfg),
            node: Node { service, frames, ep, base },
            cpu,
            doorbell,
            epoch: Instant::now(),
            slot_frame,
            tx_seq_seen: 0,
            recv_msg: RecvMsg::EMPTY,
            timeout_check_in: 0,
            next_timeout_scan: 0,
            last_now: 0,
        };
        let t0 = Instant::now();
        while !port.node.ep.config_applied() {
            port.poll_nic();
            if t0.elapsed().as_secs() > 5 {
                bail!("the NIC did not apply the configuration");
            }
        }
        Ok(port)
    }

    /// A firmware counter of this node's NIC.
    pub fn counter(&self, c: trapeze_firmware::iface::layout::Counter) -> u64 {
        self.node.ep.counter(c)
    }

    /// The firmware's heartbeat: main-loop passes it ran (inline: skipped passes excluded).
    pub fn fw_heartbeat(&self) -> u32 {
        self.node.ep.mem().load(ctrl_word(ctrl::FW_HEARTBEAT), std::sync::atomic::Ordering::Relaxed)
    }

    /// Time in ns since the port started (NetRPC's clock).
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// NetRPC's clock at `t`, an instant the caller read anyway (no second clock read).
    pub fn now_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn poll_nic(&mut self) -> bool {
        match (&mut self.cpu, &self.doorbell) {
            (Some(c), _) => c.poll(),
            (None, Some(d)) => {
                let _ = rustix::io::write(d.as_fd(), &1u64.to_ne_bytes());
                false
            }
            (None, None) => false,
        }
    }

    /// Allocate a frame and arm it for a solicited reply.
    pub fn solicit(&mut self) -> anyhow::Result<ReplyTo<Frame>> {
        let f = self.node.frames.alloc().context("no free frame")?;
        let seg = Segment { addr: self.node.base + f, len: FRAME_BYTES };
        match self.node.ep.arm(&[seg]) {
            Ok(token) => {
                self.node.frames.armed.push((f, token));
                Ok(ReplyTo::Solicited { token: token.0, frame: f })
            }
            Err(e) => {
                self.node.frames.free(f);
                bail!("cannot arm an IPT entry: {e:?}")
            }
        }
    }

    /// The caller is done with a frame it got back in a reply (solicited frames are
    /// already consumed by the NIC; their IPT entry is disarmed here).
    pub fn done_with(&mut self, f: Frame) {
        self.node.release(f);
    }

    /// One pass: NIC firmware, send completions, received messages, timeouts, deferred
    /// continuations, transmits. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        // Run the firmware until it settles or a message has landed for the host (a
        // received payload takes a second pass to reach host memory), so what arrived is
        // in the receive ring below.
        let mut busy = self.run_nic();
        let ep = &mut self.node.ep;
        let seq = ep.mem().load(ctrl_word(ctrl::FW_TX_SEQ), std::sync::atomic::Ordering::Acquire);
        if seq != self.tx_seq_seen {
            // Completions published before `seq` are visible now; later ones move it again.
            self.tx_seq_seen = seq;
            busy |= ep.reap_sends(|_, _| {}) > 0;
        }
        let mut now = None;
        while self.node.ep.poll_recv_into(&mut self.recv_msg) {
            let m = &self.recv_msg;
            busy = true;
            // Replies never look at the time, nor do requests to a service that does not
            // read it: no clock read for them (it costs as much as a tenth of a
            // same-thread round trip's bookkeeping).
            let timeless = !S::READS_CLOCK || matches!(message_kind(m.ctrl()), Some(Kind::Reply | Kind::ErrorReply));
            let t = match now {
                Some(t) => t,
                None if timeless => self.last_now,
                None => {
                    let t = self.epoch.elapsed().as_nanos() as u64;
                    self.last_now = t;
                    *now.insert(t)
                }
            };
            let slot = (m.slot % RECV_RING_ENTRIES) as usize;
            let n = &mut self.node;
            let payload = receive(&mut n.ep, n.base, m, &mut self.slot_frame[slot], &mut n.frames);
            self.rpc.handle_message(t, &mut self.node, m.src, m.ctrl(), payload);
        }
        // An inline NIC means a caller polling in a tight loop: look at the clock every
        // few passes. Otherwise polls may be far apart: every time.
        self.timeout_check_in = self.timeout_check_in.saturating_sub(1);
        if now.is_some() || self.timeout_check_in == 0 || self.cpu.is_none() {
            self.timeout_check_in = TIMEOUT_CHECK_PASSES;
            let t = *now.get_or_insert_with(|| self.epoch.elapsed().as_nanos() as u64);
            self.last_now = t;
            // Polls far apart (no inline NIC) scan every time; a tight loop at most every
            // TIMEOUT_SCAN_NS.
            if t >= self.next_timeout_scan || self.cpu.is_none() {
                self.next_timeout_scan = t + TIMEOUT_SCAN_NS;
                self.rpc.handle_timeouts(t, &mut self.node);
            }
        }
        if self.rpc.has_deferred() {
            self.rpc.run_deferred(&mut self.node);
        }
        busy |= self.flush();
        busy
    }

    /// Hand queued transmits to the NIC. A full send ring leaves the rest queued.
    pub fn flush(&mut self) -> bool {
        let mut sent = false;
        // Posted from where NetRPC queued it (a transmit is 150-odd bytes), then dropped.
        while let Some(t) = self.rpc.peek_transmit() {
            let cpu = &mut self.cpu;
            post(&mut self.node.ep, self.node.base, t, None, |ep| {
                if let Some(c) = cpu.as_mut() {
                    c.poll();
                }
                ep.reap_sends(|_, _| {});
            });
            self.rpc.consume_transmit();
            sent = true;
        }
        if sent {
            self.run_nic();
        }
        sent
    }

    /// Run an inline NIC until it has nothing more to do now (bounded) or a message has
    /// landed in the receive ring ([`InlineNative::run`]); without one, ring the
    /// doorbell. Whether anything changed.
    fn run_nic(&mut self) -> bool {
        match self.cpu.as_mut() {
            Some(c) => {
                let ep = &self.node.ep;
                c.run(|| ep.recv_ready())
            }
            None => self.poll_nic(),
        }
    }

    /// Raw Trapeze send beside NetRPC (for baselines): `false` if the send ring is full.
    pub fn raw_send(&mut self, msg: &SendMsg<'_>) -> bool {
        self.node.ep.reap_sends(|_, _| {});
        let ok = self.node.ep.post_send(msg, None).is_ok();
        self.run_nic();
        ok
    }

    /// Raw Trapeze receive beside NetRPC (for baselines): run the NIC, drain the receive
    /// ring (frames stay attached) and return (messages with a payload, without one).
    pub fn raw_recv(&mut self) -> (u32, u32) {
        let (mut with, mut without) = (0, 0);
        self.raw_recv_each(|payload, _| if payload > 0 { with += 1 } else { without += 1 });
        (with, without)
    }

    /// [`Self::raw_recv`], showing each message to `f`: its payload length (landed in the
    /// slot's buffer, or in an IPT frame for a solicited one) and its control message.
    pub fn raw_recv_each(&mut self, mut f: impl FnMut(u32, &[u8])) {
        self.poll_nic();
        while self.node.ep.poll_recv_into(&mut self.recv_msg) {
            let m = &self.recv_msg;
            f(m.payload_len, m.ctrl());
            self.node.ep.release_recv(None);
        }
    }

    /// A blocking call: issue it and poll until its outcome arrives.
    pub fn call_wait<O: Operation>(&mut self, dst: u16, req: &O::Request, reply_to: ReplyTo<Frame>) -> Outcome<Frame> {
        let now = self.now();
        let id = self.rpc.call::<O>(now, &mut self.node, dst, req, reply_to, Mode::Wait)?;
        loop {
            self.poll();
            if let Some(o) = self.rpc.take_outcome(id) {
                return o;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::DEFAULT_REGION_BASE;
    use crate::link::backend::InProcSwitch;
    use crate::link::{FaultConfig, Link};
    use crate::nic::Nic;
    use std::time::Duration;

    struct Echo;
    impl Operation for Echo {
        const OP: u16 = 0x21;
        type Request = Bytes<4>;
        type Reply = ();
    }

    /// Replies to `Echo(len)` with the first `len` bytes of its page.
    struct PageServer {
        page: Frame,
    }
    impl Service for PageServer {
        const READS_CLOCK: bool = false;

        fn serve(&mut self, inc: &Incoming<'_, Frame>, _frames: &mut Frames) -> Action<Frame> {
            match inc.decode::<Echo>() {
                Ok(r) => Action::reply(&(), Some((self.page, u32::from_le_bytes(r.0).min(FRAME_BYTES)))),
                Err(e) => Action::Error(e),
            }
        }
    }

    fn port(sw: &InProcSwitch, id: u16, fill: u8) -> RpcPort<PageServer> {
        let link = Link::new(id, Box::new(sw.port(id)), FaultConfig::NONE);
        let nic = Arc::new(Nic::new(&format!("rpc-test{id}"), link, Duration::ZERO).unwrap());
        let cpu = nic.start_inline().unwrap();
        let region = Arc::new(Mapping::create_memfd("rpc-test-frames", 2 << 20).unwrap());
        nic.shared().dma.register("frames", DEFAULT_REGION_BASE, region.clone(), 0, 2 << 20).unwrap();
        let cfg = EndpointConfig { node_id: id, mtu: FRAME_BYTES, ..EndpointConfig::default() };
        let rcfg = Config { call_timeout: 5_000_000_000, nonblocking_timeout: None };
        let mut p = RpcPort::new(
            nic.mem(),
            region,
            DEFAULT_REGION_BASE,
            cfg,
            [7, id as u64],
            PageServer { page: 0 },
            rcfg,
            Some(cpu),
            None,
        )
        .unwrap();
        let page = p.node.frames.alloc().unwrap();
        let bytes: Vec<u8> = (0..FRAME_BYTES).map(|i| (i as u8).wrapping_mul(31) ^ fill).collect();
        assert!(p.node.frames.write(page, &bytes));
        p.node.service.page = page;
        p
    }

    /// Inline NICs skip firmware passes that could find nothing and run two per round
    /// trip, yet every message still goes through: solicited 8 KB replies arrive intact,
    /// one thread polling both nodes.
    #[test]
    fn inline_nics_skip_idle_passes_and_lose_nothing() {
        let sw = InProcSwitch::new();
        let mut client = port(&sw, 1, 0);
        let mut server = port(&sw, 2, 0xA5);
        // Idle: polls run no firmware pass.
        let (hc, hs) = (client.fw_heartbeat(), server.fw_heartbeat());
        for _ in 0..100 {
            assert!(!client.poll());
            assert!(!server.poll());
        }
        assert_eq!((client.fw_heartbeat(), server.fw_heartbeat()), (hc, hs));
        let mut expect = vec![0u8; FRAME_BYTES as usize];
        assert!(server.node.frames.read(server.node.service.page, &mut expect));
        for round in 0..50u32 {
            let len = [FRAME_BYTES, 1, 4000][round as usize % 3];
            let passes = (client.fw_heartbeat(), server.fw_heartbeat());
            let rt = client.solicit().unwrap();
            let now = client.now();
            let id =
                client.rpc.call::<Echo>(now, &mut client.node, 2, &Bytes(len.to_le_bytes()), rt, Mode::Wait).unwrap();
            let mut spins = 0u32;
            let outcome = loop {
                client.poll();
                server.poll();
                if let Some(o) = client.rpc.take_outcome(id) {
                    break o;
                }
                spins += 1;
                assert!(spins < 1_000_000, "call {round} never completed");
            };
            // Engines that finish within their start calls: the firmware credits each
            // transfer in the pass that started it, so a round trip costs each NIC two
            // passes (request out and reply in; request in and reply out).
            let passes = (client.fw_heartbeat() - passes.0, server.fw_heartbeat() - passes.1);
            assert_eq!(passes, (2, 2), "firmware passes per round trip, call {round} ({len} B)");
            let r = outcome.unwrap();
            let Payload::Frame { frame, len: got } = r.payload else { panic!("no solicited payload") };
            assert_eq!(got, len);
            let mut buf = vec![0u8; len as usize];
            assert!(client.node.frames.read(frame, &mut buf));
            assert_eq!(buf, expect[..len as usize]);
            client.done_with(frame);
        }
        // Everything settled: idle again, no pass runs.
        let hc = client.fw_heartbeat();
        for _ in 0..100 {
            client.poll();
        }
        assert_eq!(client.fw_heartbeat(), hc);
    }
}
