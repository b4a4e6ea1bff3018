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

use anyhow::{bail, Context};
use netrpc::prelude::*;
use netrpc::wire::{message_kind, Kind};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, MAX_SEGMENTS, RECV_RING_ENTRIES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_host::endpoint::{Endpoint, EndpointConfig, RecvMsg, SendMsg};
use trapeze_runtime::frames::{Groups, Segments};
use trapeze_runtime::storage::Heap;
use trapeze_runtime::FrameMem;
use trapeze_vnic::nic::{InlineNative, NicMem};
use trapeze_vnic::shm::Mapping;

/// A frame: offset of a [`FRAME_BYTES`] slot in the port's region.
pub type Frame = u64;
/// Size of every frame (a page of the papers' Alphas).
pub const FRAME_BYTES: u32 = 8192;
/// Send-ring-full rounds (each runs the NIC or rings its doorbell) before a transmit is
/// dropped: far longer than a NIC takes to drain a ring.
pub(crate) const POST_TRIES: u32 = 1_000_000;

/// A service's server stubs, with access to the port's frames.
pub trait Service {
    /// Whether the stubs read [`Incoming::now`]. A service that never does sets this to
    /// `false`: the port then reads no clock for its requests (a clock read is a tenth
    /// of a same-thread round trip's bookkeeping) and hands them the last reading it
    /// took, which may be old (bounded by the port's idle timeout checks).
    const READS_CLOCK: bool = true;

    fn serve(&mut self, inc: &Incoming<'_, Frame>, frames: &mut Frames) -> Action<Frame>;
}

/// The frames of a region registered with the NIC for DMA at `base`: frame = offset of a
/// [`FRAME_BYTES`] slot. A frame at [`GROUP_BASE`]` + g` and above names a *group*: the
/// first bytes of several frames, as one payload gathered for one send (a `GETPAGES`
/// reply, [`RegionFrames::group`]); it ends when its transmit has left the port.
pub struct RegionFrames {
    pub region: Arc<Mapping>,
    base: u64,
    /// Offsets below this are frames.
    end: u64,
    /// The longest payload the NIC sends (its MTU).
    mtu: u32,
    /// The live groups: group `g` is frame [`GROUP_BASE`]` + g`.
    groups: Groups<Frame, Heap>,
}

/// The first group frame (far above every frame offset).
pub const GROUP_BASE: Frame = u64::MAX - GROUPS as u64;
/// Groups at once: replies gathered in one pass before they are posted.
const GROUPS: usize = 64;

impl RegionFrames {
    fn new(region: Arc<Mapping>, base: u64, end: u64, mtu: u32) -> Self {
        let groups = Groups::new(GROUPS, 0).expect("the global allocator gives");
        RegionFrames { region, base, end, mtu, groups }
    }

    /// A group naming the first `piece` bytes of each of `frames` (at most the NIC's
    /// scatter/gather pieces, within a frame, together within the MTU), or `None`.
    pub fn group(&mut self, frames: &[Frame], piece: u32) -> Option<Frame> {
        let total = (frames.len() as u64).checked_mul(u64::from(piece))?;
        if piece > FRAME_BYTES || total > u64::from(self.mtu) || !frames.iter().all(|&f| f < self.end) {
            return None;
        }
        // The table refuses an empty group and one of more pieces than the NIC's.
        Some(GROUP_BASE + self.groups.start(frames, piece)? as u64)
    }

    /// The frames live group `g` names (`None`: `g` is no live group). A group whose IPT
    /// entry the port could not disarm (the NIC still delivering into it) stays live: the
    /// port keeps it rather than end it under the NIC.
    pub fn group_frames(&self, g: Frame) -> Option<&[Frame]> {
        Self::group_index(g).and_then(|i| self.groups.get(i)).map(|e| e.frames())
    }

    fn group_index(f: Frame) -> Option<usize> {
        f.checked_sub(GROUP_BASE).map(|g| g as usize).filter(|&g| g < GROUPS)
    }
}

impl FrameMem for RegionFrames {
    type Frame = Frame;
    const FRAME_BYTES: u32 = FRAME_BYTES;
    fn count(&self) -> usize {
        (self.end / FRAME_BYTES as u64) as usize
    }
    fn nth(&self, i: usize) -> Frame {
        i as u64 * FRAME_BYTES as u64
    }
    fn dma(&self, f: Frame) -> Option<u64> {
        (f < self.end).then_some(self.base + f)
    }
    fn copy(&self, from: Frame, to: Frame, len: u32) -> bool {
        self.region.copy_from(to as usize, &self.region, from as usize, len as usize)
    }
    fn write(&self, f: Frame, data: &[u8]) -> bool {
        self.region.write(f as usize, data)
    }
    fn read(&self, f: Frame, out: &mut [u8]) -> bool {
        self.region.read(f as usize, out)
    }
    fn segments(&self, f: Frame, out: &mut Segments) -> Option<usize> {
        let Some(g) = Self::group_index(f).and_then(|g| self.groups.get(g)) else {
            out[0] = Segment { addr: self.dma(f)?, len: FRAME_BYTES };
            return Some(1);
        };
        for (o, &m) in out.iter_mut().zip(g.frames()) {
            *o = Segment { addr: self.dma(m)?, len: g.piece };
        }
        Some(g.frames().len())
    }
    fn sent(&mut self, f: Frame) {
        self.give_back(f);
    }
    fn give_back(&mut self, f: Frame) -> bool {
        match Self::group_index(f) {
            // A group ends; the frames it named stay their holder's.
            Some(g) => {
                self.groups.end(g);
                false
            }
            None => true,
        }
    }
}

/// A node's endpoint and frames: the shared runtime's port over a region.
pub type Frames = trapeze_runtime::Port<NicMem, RegionFrames, Heap>;

/// The context NetRPC calls back into: the service and the port.
pub struct Node<S> {
    pub service: S,
    pub frames: Frames,
}

impl<S: Service> Runtime<Frame> for Node<S> {
    fn serve(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        self.service.serve(inc, &mut self.frames)
    }
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        self.frames.copy(*from, *to, len)
    }
    fn release(&mut self, frame: Frame) {
        self.frames.release(frame);
    }
}

/// Run an inline NIC one pass, or ring the doorbell of a NIC that has its own processor
/// thread; whether the inline NIC did anything.
pub(crate) fn kick(cpu: &mut Option<InlineNative>, doorbell: &Option<Arc<OwnedFd>>) -> bool {
    match (cpu, doorbell) {
        (Some(c), _) => c.poll(),
        (None, Some(d)) => {
            let _ = rustix::io::write(d.as_fd(), &1u64.to_ne_bytes());
            false
        }
        (None, None) => false,
    }
}

/// A port's attachment to its NIC: the NIC's memory, the frame region registered with the
/// NIC for DMA at `base`, the endpoint's configuration and secret seed, and how the NIC
/// runs — inline (`cpu`, driven from the port's poll) or on its own processor thread,
/// which `doorbell` wakes after sends.
pub struct Attach {
    pub mem: NicMem,
    pub region: Arc<Mapping>,
    pub base: u64,
    pub cfg: EndpointConfig,
    pub seed: [u64; 2],
    pub cpu: Option<InlineNative>,
    pub doorbell: Option<Arc<OwnedFd>>,
}

impl Attach {
    /// A NIC driven inline, its region registered at [`crate::host::DEFAULT_REGION_BASE`].
    pub fn inline(mem: NicMem, region: Arc<Mapping>, cfg: EndpointConfig, seed: [u64; 2], cpu: InlineNative) -> Self {
        Attach { mem, region, base: crate::host::DEFAULT_REGION_BASE, cfg, seed, cpu: Some(cpu), doorbell: None }
    }

    /// Cut the region into [`FRAME_BYTES`] frames, attach one to every receive slot,
    /// initialise the endpoint (MTU capped at a frame for each of the NIC's scatter/gather
    /// pieces) and wait, kicking the NIC (at most 5 s), until its firmware applied it.
    /// Needs at least `spare` frames beyond the receive ring. The frames, and how to run
    /// the NIC from now on.
    pub(crate) fn carve(self, spare: usize) -> anyhow::Result<(Frames, Option<InlineNative>, Option<Arc<OwnedFd>>)> {
        let Attach { mem, region, base, cfg, seed, mut cpu, doorbell } = self;
        let n = region.len() / FRAME_BYTES as usize;
        if n < RECV_RING_ENTRIES as usize + spare {
            bail!("region holds {n} frames; need at least {}", RECV_RING_ENTRIES as usize + spare);
        }
        // An unsolicited payload fits a frame; a gathered one may fill the MTU asked for.
        let cfg = EndpointConfig { mtu: cfg.mtu.min(MAX_SEGMENTS * FRAME_BYTES), ..cfg };
        let frames = RegionFrames::new(region, base, (n * FRAME_BYTES as usize) as u64, cfg.mtu);
        let ep = Endpoint::init(mem, &cfg, seed, |i| Frames::slot_segment(&frames, i));
        let frames = Frames::new(ep, frames, spare).map_err(|e| anyhow::anyhow!("cannot set up the port: {e:?}"))?;
        let t0 = Instant::now();
        while !frames.ep.config_applied() {
            kick(&mut cpu, &doorbell);
            if t0.elapsed().as_secs() > 5 {
                bail!("the NIC did not apply the configuration");
            }
        }
        Ok((frames, cpu, doorbell))
    }
}

/// One node: NetRPC over a host endpoint on a virtual NIC.
pub struct RpcPort<S: Service> {
    pub rpc: Rpc<Node<S>, Frame>,
    pub node: Node<S>,
    cpu: Option<InlineNative>,
    doorbell: Option<Arc<OwnedFd>>,
    epoch: Instant,
    /// The message being handled, filled in place by the endpoint (not copied out).
    recv_msg: RecvMsg,
    /// Passes until [`Self::poll`] next looks at the clock for NetRPC's timeouts when
    /// nothing arrived (a clock read costs more than the rest of an idle pass).
    timeout_check_in: u32,
    /// The clock (ns since `epoch`) when [`Self::poll`] last read it.
    last_now: u64,
}

/// Idle passes between two timeout checks when the NIC is driven inline: a few µs of
/// passes, so timeouts (milliseconds and more) fire practically on time.
const TIMEOUT_CHECK_PASSES: u32 = 64;

impl<S: Service> RpcPort<S> {
    /// Set up node `at.cfg.node_id` on the NIC `at` names, serving `service`.
    pub fn new(at: Attach, service: S, rpc_cfg: Config) -> anyhow::Result<Self> {
        let (node_id, seed) = (at.cfg.node_id, at.seed);
        let (frames, cpu, doorbell) = at.carve(8)?;
        let mut port = RpcPort {
            rpc: Rpc::new(node_id, rpc_cfg),
            node: Node { service, frames },
            cpu,
            doorbell,
            epoch: Instant::now(),
            recv_msg: RecvMsg::EMPTY,
            timeout_check_in: 0,
            last_now: 0,
        };
        port.rpc.set_secret(seed);
        Ok(port)
    }

    /// A firmware counter of this node's NIC.
    pub fn counter(&self, c: trapeze_firmware::iface::layout::Counter) -> u64 {
        self.node.frames.ep.counter(c)
    }

    /// The firmware's heartbeat: main-loop passes it ran (inline: skipped passes excluded).
    pub fn fw_heartbeat(&self) -> u32 {
        self.node.frames.ep.mem().load(ctrl_word(ctrl::FW_HEARTBEAT), std::sync::atomic::Ordering::Relaxed)
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
        kick(&mut self.cpu, &self.doorbell)
    }

    /// Allocate a frame and arm it for a solicited reply.
    pub fn solicit(&mut self) -> anyhow::Result<ReplyTo<Frame>> {
        self.node.frames.solicit().context("no free frame or IPT entry for a solicited reply")
    }

    /// The caller is done with a frame it got back in a reply (solicited frames are
    /// already consumed by the NIC; their IPT entry is disarmed here).
    pub fn done_with(&mut self, f: Frame) {
        self.node.release(f);
    }

    /// One pass: NIC firmware, send completions, received messages, timeouts, deferred
    /// continuations, transmits. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        // A call made since the last pass goes out first: running the NIC before would
        // poll the link (a system call over UDP) ahead of the request.
        let mut busy = self.rpc.peek_transmit().is_some() && self.flush();
        // Run the firmware until it settles or a message has landed for the host (a
        // received payload takes a second pass to reach host memory), so what arrived is
        // in the receive ring below.
        busy |= self.run_nic();
        busy |= self.node.frames.reap(|_, _| {});
        let mut now = None;
        while self.node.frames.ep.poll_recv_into(&mut self.recv_msg) {
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
            let payload = self.node.frames.receive(m);
            let answer = m.answer();
            self.rpc.handle_received(t, &mut self.node, m.src, m.ctrl(), payload, answer);
        }
        // Timers come from NetRPC's next deadline: with none, an idle pass reads no clock.
        // An inline NIC means a caller polling in a tight loop: look at the clock every
        // few passes. Otherwise polls may be far apart: every time.
        self.timeout_check_in = self.timeout_check_in.saturating_sub(1);
        let deadline = self.rpc.poll_timeout();
        if now.is_some() || (deadline.is_some() && (self.timeout_check_in == 0 || self.cpu.is_none())) {
            self.timeout_check_in = TIMEOUT_CHECK_PASSES;
            let t = *now.get_or_insert_with(|| self.epoch.elapsed().as_nanos() as u64);
            self.last_now = t;
            // NetRPC reads its call records only once its next deadline has passed.
            self.rpc.handle_timeouts(t, &mut self.node);
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
            self.node.frames.post(t, POST_TRIES, |_| {
                if let Some(c) = cpu.as_mut() {
                    c.poll();
                }
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
                let ep = &self.node.frames.ep;
                c.run(|| ep.recv_ready())
            }
            None => self.poll_nic(),
        }
    }

    /// Before the caller sleeps on the link's descriptor: whether it may (`false`: a
    /// packet already waits in the NIC's link, so poll instead). After the sleep,
    /// [`Self::end_wait`].
    pub fn prepare_wait(&self) -> bool {
        self.cpu.as_ref().is_none_or(InlineNative::prepare_wait)
    }

    /// The sleep [`Self::prepare_wait`] allowed is over; the next poll checks timeouts.
    pub fn end_wait(&mut self) {
        if let Some(c) = &self.cpu {
            c.end_wait();
        }
        self.timeout_check_in = 0;
    }

    /// Raw Trapeze send beside NetRPC (for baselines): `false` if the send ring is full.
    pub fn raw_send(&mut self, msg: &SendMsg<'_>) -> bool {
        self.node.frames.reap(|_, _| {});
        let ok = self.node.frames.post_raw(msg, 0).is_ok();
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
        while self.node.frames.ep.poll_recv_into(&mut self.recv_msg) {
            let m = &self.recv_msg;
            f(m.payload_len, m.ctrl());
            self.node.frames.ep.release_recv(None);
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
    use std::time::Duration;
    use trapeze_vnic::link::backend::InProcSwitch;
    use trapeze_vnic::link::{FaultConfig, Link};
    use trapeze_vnic::nic::Nic;

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

    /// Node `id` on `sw` with an inline NIC of MTU `mtu`, serving `service`.
    fn port_of<S: Service>(sw: &InProcSwitch, id: u16, mtu: u32, service: S) -> RpcPort<S> {
        let link = Link::new(id, Box::new(sw.port(id)), FaultConfig::NONE);
        let nic = Arc::new(Nic::new(&format!("rpc-test{id}"), link, Duration::ZERO).unwrap());
        let cpu = nic.start_inline().unwrap();
        let region = Arc::new(Mapping::create_memfd("rpc-test-frames", 2 << 20).unwrap());
        nic.shared().dma.register("frames", DEFAULT_REGION_BASE, region.clone(), 0, 2 << 20).unwrap();
        let cfg = EndpointConfig { node_id: id, mtu, ..EndpointConfig::default() };
        let rcfg = Config { call_timeout: 5_000_000_000, nonblocking_timeout: None };
        RpcPort::new(Attach::inline(nic.mem(), region, cfg, [7, id as u64], cpu), service, rcfg).unwrap()
    }

    fn port(sw: &InProcSwitch, id: u16, fill: u8) -> RpcPort<PageServer> {
        let mut p = port_of(sw, id, FRAME_BYTES, PageServer { page: 0 });
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

    /// Replies to any `Echo` with the first `piece` bytes of each of its frames, gathered.
    struct Gather {
        frames: Vec<Frame>,
        piece: u32,
    }
    impl Service for Gather {
        fn serve(&mut self, _inc: &Incoming<'_, Frame>, frames: &mut Frames) -> Action<Frame> {
            let len = self.piece * self.frames.len() as u32;
            match frames.frames_mut().group(&self.frames, self.piece) {
                Some(g) => Action::reply(&(), Some((g, len))),
                None => Action::Error(RpcError::UnknownOp),
            }
        }
    }

    fn live_groups<S: Service>(p: &RpcPort<S>) -> usize {
        p.node.frames.frames().groups.live()
    }

    /// A reply gathered from the first 4 KiB of three of the server's frames lands, through
    /// one IPT entry, in the first 4 KiB of three of the client's (a `GETPAGES` in small);
    /// both groups end and their frames stay their holders'.
    #[test]
    fn a_gathered_reply_lands_scattered_in_a_group() {
        const PIECE: u32 = 4096;
        let sw = InProcSwitch::new();
        let mut client = port_of(&sw, 1, 4 * FRAME_BYTES, Gather { frames: Vec::new(), piece: PIECE });
        let mut server = port_of(&sw, 2, 4 * FRAME_BYTES, Gather { frames: Vec::new(), piece: PIECE });
        let mut expect = Vec::new();
        for k in 0..3u8 {
            let f = server.node.frames.alloc().unwrap();
            let bytes: Vec<u8> = (0..FRAME_BYTES).map(|i| (i as u8).wrapping_mul(7) ^ (k + 1)).collect();
            assert!(server.node.frames.write(f, &bytes));
            expect.extend_from_slice(&bytes[..PIECE as usize]);
            server.node.service.frames.push(f);
        }
        // Past the MTU, or a piece longer than a frame: no group.
        assert_eq!(server.node.frames.frames_mut().group(&[0; 5], 2 * PIECE), None);
        assert_eq!(server.node.frames.frames_mut().group(&[0], FRAME_BYTES + 1), None);
        let mine: Vec<Frame> = (0..3).map(|_| client.node.frames.alloc().unwrap()).collect();
        let free = client.node.frames.available();
        let g = client.node.frames.frames_mut().group(&mine, PIECE).unwrap();
        let token = client.node.frames.arm(g).unwrap();
        let rt = ReplyTo::Solicited { token: token.0, frame: g };
        let r = client.call_wait_with(&mut server, 2, rt);
        let Payload::Frame { frame, len } = r.payload else { panic!("no solicited payload") };
        assert_eq!((frame, len), (g, 3 * PIECE));
        for (k, &f) in mine.iter().enumerate() {
            let mut got = vec![0u8; PIECE as usize];
            assert!(client.node.frames.read(f, &mut got));
            assert_eq!(got, expect[k * PIECE as usize..(k + 1) * PIECE as usize], "piece {k}");
        }
        assert_eq!(live_groups(&server), 0, "the gathered reply's group ended once posted");
        client.node.frames.release(g);
        assert_eq!((live_groups(&client), client.node.frames.available()), (0, free), "its frames stay the caller's");
    }

    impl<S: Service> RpcPort<S> {
        /// Call `dst` (served by `server`) and poll both until the outcome.
        fn call_wait_with<T: Service>(
            &mut self,
            server: &mut RpcPort<T>,
            dst: u16,
            rt: ReplyTo<Frame>,
        ) -> Reply<Frame> {
            let now = self.now();
            let id =
                self.rpc.call::<Echo>(now, &mut self.node, dst, &Bytes(0u32.to_le_bytes()), rt, Mode::Wait).unwrap();
            for _ in 0..1_000_000 {
                self.poll();
                server.poll();
                if let Some(o) = self.rpc.take_outcome(id) {
                    return o.unwrap();
                }
            }
            panic!("the call never completed");
        }
    }
}
