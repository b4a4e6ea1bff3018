// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC and the GMS node inside the kernel: the runtime that moves `netrpc` messages
//! through the endpoint, over a pool of coherent DMA frames, with GMS as NetRPC's context.
//!
//! The same glue as user space's `vnic/src/{rpc,gms}.rs`, over kernel memory:
//! * **Frames** ([`Frame`]) are indices into a pool of 8 KiB coherent DMA buffers. One is
//!   attached to each receive slot; an unsolicited payload (a putpage, a delegated
//!   request) arrives in the slot's frame, which is detached and handed to NetRPC as an
//!   `InPayload::Buffer` while a free frame takes its place (no free frame: the payload is
//!   refused and counted). A solicited reply lands zero-copy in a caller frame armed in the
//!   IPT; the token goes into the request.
//! * Frames GMS or NetRPC stop using may still be attached to posted sends: they wait in a
//!   limbo until every send posted before they were dropped has completed.
//! * [`KHost`] is GMS's [`Host`]: it owns the endpoint, the pool and the completions, and
//!   serves the [`Echo`] operation beside GMS (`serve_other`).
//!
//! Everything here runs under the driver's core spinlock (`driver::Core`): in the IRQ
//! thread, in the deferred-continuation work item, or in process context — never sleeps,
//! never allocates (every container is sized at probe).

#![forbid(unsafe_code)]

use crate::gms_backend::DiskState;
use crate::nicmem::BarMem;
use crate::proto;
use crate::stats::STATS;
use crate::sys::dma::DmaBuf;
use crate::tpz::endpoint::{ArmError, Endpoint, RecvMsg, SendError, SendMsg};
use crate::tpz::gms::prelude::*;
use crate::tpz::iface::entry::Segment;
use crate::tpz::iface::ipt::{CancelState, PayloadToken};
use crate::tpz::iface::layout::Counter;
use crate::tpz::netrpc::prelude::*;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::prelude::*;

/// A frame: index into [`KHost::pool`].
pub(crate) type Frame = u16;
/// Bytes in every frame (the MTU: a payload always fits one frame; a GMS page).
pub(crate) const FRAME_BYTES: usize = 8192;
/// GMS capacities in the kernel: members, pages held (the budget's ceiling: 8192 pages =
/// 64 MiB of frames), directory entries, client operations, background tasks, queued
/// notifications. The node is ~0.8 MiB, allocated with `kvmalloc` (`sys::boxed`); the
/// frame pool and the stacks over it with `kvmalloc` too ([`KVVec`]).
pub(crate) const MEMBERS: usize = 8;
pub(crate) const HELD: usize = 8192;
const DIR: usize = 8192;
pub(crate) const OPS: usize = 32;
const TASKS: usize = 64;
const OUTQ: usize = 32;
/// NetRPC capacities: call records, continuations per call, queued transmits.
const CALLS: usize = 32;
const CONTS: usize = 4;
const TXQ: usize = 64;

/// The GMS node, NetRPC's context.
pub(crate) type Node = GmsNode<Frame, KHost, MEMBERS, HELD, DIR, OPS, TASKS, OUTQ>;
/// NetRPC of one node.
pub(crate) type NetRpc = Rpc<Node, Frame, CALLS, CONTS, TXQ>;

/// The send cookie of NetRPC transmits (ping uses its transmit frame's index).
pub(crate) const RPC_COOKIE: usize = usize::MAX;
/// Send-ring-full retries (reaping in between) before a transmit is dropped.
const POST_TRIES: u32 = 10_000;

/// NetRPC echo: the server answers with the request's body and a payload of `len` bytes
/// of the [`proto::pattern`] of `seq`, tagged with the caller's IPT token (solicited).
/// Body: `seq`, `len`, CRC-32 of the pattern (little-endian `u32`s).
pub(crate) struct Echo;
impl Operation for Echo {
    const OP: u16 = 0x7E01;
    type Request = Bytes<12>;
    type Reply = Bytes<12>;
}

/// Error code (≥ 64) an echo server answers when it has no free frame or a bad length.
const ECHO_NO_FRAME: u16 = 64;
const ECHO_BAD_LEN: u16 = 65;

impl Echo {
    pub(crate) fn body(seq: u32, len: u32) -> Bytes<12> {
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&seq.to_le_bytes());
        b[4..8].copy_from_slice(&len.to_le_bytes());
        b[8..12].copy_from_slice(&proto::pattern_crc(seq, len as usize).to_le_bytes());
        Bytes(b)
    }
    fn parse(b: &[u8]) -> Option<(u32, u32, u32)> {
        let w = |i: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(4 * i..4 * i + 4)?.try_into().ok()?)) };
        Some((w(0)?, w(1)?, w(2)?))
    }
}

/// The endpoint, once probe has one: [`KHost::EMPTY`] (the `static` template the node is
/// copied from) has none, and then every operation is a no-op or an error.
pub(crate) struct Ep(pub(crate) Option<Endpoint<BarMem, usize>>);

impl Ep {
    pub(crate) fn poll_recv(&mut self) -> Option<RecvMsg> {
        self.0.as_mut()?.poll_recv()
    }
    pub(crate) fn release_recv(&mut self, frame: Option<&[Segment]>) {
        if let Some(e) = self.0.as_mut() {
            e.release_recv(frame);
        }
    }
    pub(crate) fn reap_sends(&mut self, done: impl FnMut(usize, crate::tpz::iface::entry::TxStatus)) -> usize {
        self.0.as_mut().map_or(0, |e| e.reap_sends(done))
    }
    pub(crate) fn post_send(&mut self, msg: &SendMsg<'_>, cookie: usize) -> core::result::Result<(), SendError> {
        self.0.as_mut().ok_or(SendError::RingFull)?.post_send(msg, cookie)
    }
    pub(crate) fn arm(&mut self, segs: &[Segment]) -> core::result::Result<PayloadToken, ArmError> {
        self.0.as_mut().ok_or(ArmError::TableFull)?.arm(segs)
    }
    pub(crate) fn disarm(&mut self, token: PayloadToken) -> CancelState {
        self.0.as_mut().map_or(CancelState::Idle, |e| e.disarm(token))
    }
    pub(crate) fn sends_in_flight(&self) -> usize {
        self.0.as_ref().map_or(0, |e| e.sends_in_flight())
    }
    pub(crate) fn counter(&self, c: Counter) -> u64 {
        self.0.as_ref().map_or(0, |e| e.counter(c))
    }
    pub(crate) fn config_applied(&self) -> bool {
        self.0.as_ref().is_some_and(|e| e.config_applied())
    }
    pub(crate) fn mem(&self) -> Option<&BarMem> {
        self.0.as_ref().map(|e| e.mem())
    }
}

/// A fixed-capacity stack on the heap (6.12's `KVec` has no `pop`); never allocates after
/// [`Stack::new`]. `kvmalloc`: a stack over every frame of the pool is tens of KiB.
pub(crate) struct Stack<T: Copy> {
    v: KVVec<T>,
    n: usize,
}

impl<T: Copy> Stack<T> {
    const EMPTY: Self = Self { v: KVVec::new(), n: 0 };

    fn new(cap: usize, fill: T) -> Result<Self> {
        Ok(Self { v: KVVec::from_elem(fill, cap, GFP_KERNEL)?, n: 0 })
    }
    fn push(&mut self, x: T) -> bool {
        match self.v.get_mut(self.n) {
            Some(s) => {
                *s = x;
                self.n += 1;
                true
            }
            None => false,
        }
    }
    fn pop(&mut self) -> Option<T> {
        self.n = self.n.checked_sub(1)?;
        Some(self.v[self.n])
    }
    fn as_slice(&self) -> &[T] {
        &self.v[..self.n]
    }
    fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.v[..self.n]
    }
    fn swap_remove(&mut self, i: usize) -> T {
        let x = self.v[i];
        self.n -= 1;
        self.v[i] = self.v[self.n];
        x
    }
    pub(crate) fn len(&self) -> usize {
        self.n
    }
}

/// Outcome slots of the echo test (0 pending, 1 verified, 2 wrong).
pub(crate) struct EchoState {
    /// Held by the issuing thread while it "holds a lock the continuation needs": the
    /// continuation then returns `false` and is deferred to the work item.
    pub(crate) busy: AtomicBool,
    pub(crate) result: AtomicU32,
    /// Where the continuation ran: 1 the receive path (IRQ thread), 2 the work item.
    pub(crate) ran_in: AtomicU32,
}

/// What GMS and NetRPC need from the kernel: frames, the endpoint, completions.
pub(crate) struct KHost {
    pub(crate) ep: Ep,
    pub(crate) pool: KVVec<DmaBuf>,
    free: Stack<Frame>,
    armed: Stack<(Frame, PayloadToken)>,
    /// Frames waiting for the sends posted before they were dropped (send serial;
    /// `u64::MAX` until the next flush tags it).
    limbo: Stack<(Frame, u64)>,
    /// The frame attached to each receive slot.
    pub(crate) slot_frame: KVec<Frame>,
    /// Sends posted and reaped (every send, ping's too: the limbo counts in these).
    pub(crate) posted: u64,
    reaped: u64,
    /// Nonblocking GMS completions, by operation slot.
    done: [Option<Completion<Frame>>; OPS],
    /// The ping test's transmit frames (bit `i` of `tx_busy`: posted, not yet reaped).
    pub(crate) tx: KVec<DmaBuf>,
    pub(crate) tx_busy: u32,
    pub(crate) echo: EchoState,
    /// The work item is running NetRPC's deferred continuations.
    pub(crate) in_work: bool,
    /// `/dev/gms0`'s pages, with the GMS backend (`gms_disk_pages=`).
    pub(crate) disk: Option<DiskState>,
}

impl KHost {
    /// No endpoint, no frames: the host of the `static` node template.
    pub(crate) const fn empty() -> KHost {
        KHost {
            ep: Ep(None),
            pool: KVVec::new(),
            free: Stack::EMPTY,
            armed: Stack::EMPTY,
            limbo: Stack::EMPTY,
            slot_frame: KVec::new(),
            posted: 0,
            reaped: 0,
            done: [None; OPS],
            tx: KVec::new(),
            tx_busy: 0,
            echo: EchoState { busy: AtomicBool::new(false), result: AtomicU32::new(0), ran_in: AtomicU32::new(0) },
            in_work: false,
            disk: None,
        }
    }

    /// A host over `ep` whose receive slots hold `pool[0..rx]`; the rest of the pool is free.
    pub(crate) fn new(ep: Endpoint<BarMem, usize>, pool: KVVec<DmaBuf>, rx: usize, tx: KVec<DmaBuf>) -> Result<Self> {
        let n = pool.len();
        if n > usize::from(u16::MAX) || n < rx {
            return Err(EINVAL);
        }
        let mut free = Stack::new(n, 0)?;
        for f in (rx..n).rev() {
            free.push(f as Frame);
        }
        let mut slot_frame = KVec::with_capacity(rx, GFP_KERNEL)?;
        for f in 0..rx {
            slot_frame.push(f as Frame, GFP_KERNEL)?;
        }
        Ok(Self {
            ep: Ep(Some(ep)),
            pool,
            free,
            armed: Stack::new(OPS + CALLS, (0, PayloadToken::NONE))?,
            limbo: Stack::new(n, (0, 0))?,
            slot_frame,
            posted: 0,
            reaped: 0,
            done: [None; OPS],
            tx,
            tx_busy: 0,
            echo: EchoState { busy: AtomicBool::new(false), result: AtomicU32::new(0), ran_in: AtomicU32::new(0) },
            in_work: false,
            disk: None,
        })
    }

    pub(crate) fn alloc(&mut self) -> Option<Frame> {
        self.free.pop()
    }
    pub(crate) fn free_frames(&self) -> usize {
        self.free.len()
    }
    pub(crate) fn frame(&self, f: Frame) -> Option<&DmaBuf> {
        self.pool.get(usize::from(f))
    }

    /// Allocate a frame and arm an IPT entry for it: a solicited reply lands in it.
    pub(crate) fn solicit(&mut self) -> Option<ReplyTo<Frame>> {
        let f = self.alloc()?;
        // Every frame on the free list is an index into the pool.
        let buf = self.pool.get(usize::from(f))?;
        let seg = Segment { addr: buf.dma_addr(), len: FRAME_BYTES as u32 };
        match self.ep.arm(&[seg]) {
            Ok(token) if self.armed.push((f, token)) => Some(ReplyTo::Solicited { token: token.0, frame: f }),
            Ok(token) => {
                self.disarm_token(token);
                self.free.push(f);
                None
            }
            Err(_) => {
                self.free.push(f);
                None
            }
        }
    }

    fn disarm_token(&mut self, token: PayloadToken) {
        // The NIC may be writing into the frame right now: wait (bounded by one packet).
        let mut st = self.ep.disarm(token);
        let mut spins = 0u32;
        while st == CancelState::InFlight && spins < 1_000_000 {
            core::hint::spin_loop();
            st = self.ep.disarm(token);
            spins += 1;
        }
    }

    /// Disarm `f`'s IPT entry if it has one; the frame stays allocated (kept as data).
    pub(crate) fn disarm_frame(&mut self, f: Frame) {
        self.unarm(f);
    }

    /// Disarm `f`'s IPT entry if it has one (the frame stays allocated).
    fn unarm(&mut self, f: Frame) {
        if let Some(i) = self.armed.as_slice().iter().position(|a| a.0 == f) {
            let (_, token) = self.armed.swap_remove(i);
            self.disarm_token(token);
        }
    }

    /// Free `f` once the sends posted up to the next flush have completed.
    pub(crate) fn retire(&mut self, f: Frame) {
        if !self.limbo.push((f, u64::MAX)) {
            // Cannot happen (the limbo holds the whole pool); leaking beats a double use.
            pr_err!("frame limbo full: frame {} leaked\n", f);
        }
    }

    /// Reap send completions (clearing ping frames' busy bits) and free the frames in
    /// limbo whose sends are done. Whether any send completed.
    pub(crate) fn reap(&mut self) -> bool {
        let KHost { ep, tx_busy, .. } = self;
        let n = ep.reap_sends(|t, status| {
            if t != RPC_COOKIE && t < 32 {
                *tx_busy &= !(1u32 << t);
            }
            if status != crate::tpz::iface::entry::TxStatus::Sent {
                STATS.tx_errors.inc();
            }
        });
        self.reaped += n as u64;
        let mut i = 0;
        while i < self.limbo.len() {
            let (f, serial) = self.limbo.as_slice()[i];
            if serial <= self.reaped {
                self.limbo.swap_remove(i);
                self.free.push(f);
            } else {
                i += 1;
            }
        }
        n > 0
    }

    /// Take a message off its receive slot for NetRPC (see the module doc); the slot is
    /// given back to the NIC.
    pub(crate) fn receive(&mut self, m: &RecvMsg) -> InPayload<Frame> {
        let slot = m.slot as usize % self.slot_frame.len().max(1);
        let payload = if m.via_ipt() {
            InPayload::Ipt { token: m.token.0, len: m.payload_len }
        } else if m.payload_refused() {
            STATS.rx_refused.inc();
            InPayload::Refused
        } else if m.payload_len > 0 && m.payload_len as usize <= FRAME_BYTES {
            match self.free.pop() {
                Some(fresh) => {
                    let old = core::mem::replace(&mut self.slot_frame[slot], fresh);
                    InPayload::Buffer { frame: old, len: m.payload_len }
                }
                None => {
                    STATS.rpc_no_frame.inc();
                    InPayload::Refused
                }
            }
        } else if m.payload_len > 0 {
            InPayload::Refused
        } else {
            InPayload::None
        };
        let f = self.slot_frame[slot];
        match self.pool.get(usize::from(f)) {
            Some(b) => self.ep.release_recv(Some(&[Segment { addr: b.dma_addr(), len: FRAME_BYTES as u32 }])),
            None => self.ep.release_recv(None),
        }
        payload
    }

    /// Post one NetRPC transmit; while the send ring is full, reap (bounded). `false`: dropped.
    pub(crate) fn post(&mut self, t: &Transmit<Frame>) -> bool {
        let seg;
        let segs: &[Segment] = match t.payload {
            Some((f, len)) => match self.pool.get(usize::from(f)) {
                Some(b) if len as usize <= FRAME_BYTES => {
                    seg = [Segment { addr: b.dma_addr(), len }];
                    &seg
                }
                _ => return false,
            },
            None => &[],
        };
        let msg = SendMsg {
            peer: t.dst,
            ctrl: t.ctrl(),
            payload_len: t.payload.map_or(0, |p| p.1),
            segments: segs,
            token: PayloadToken(t.tag),
        };
        for _ in 0..POST_TRIES {
            match self.ep.post_send(&msg, RPC_COOKIE) {
                Ok(()) => {
                    self.posted += 1;
                    STATS.rpc_tx.inc();
                    STATS.tx_msgs.inc();
                    return true;
                }
                Err(SendError::RingFull) => {
                    self.reap();
                    core::hint::spin_loop();
                }
                Err(_) => break,
            }
        }
        STATS.tx_ring_full.inc();
        false
    }

    /// Tag the frames dropped so far with the sends posted up to now.
    pub(crate) fn tag_limbo(&mut self) {
        let posted = self.posted;
        for l in self.limbo.as_mut_slice() {
            if l.1 == u64::MAX {
                l.1 = posted;
            }
        }
    }

    /// The completion of nonblocking operation `op`, once it finished.
    pub(crate) fn take_done(&mut self, op: OpId) -> Option<Completion<Frame>> {
        let slot = self.done.get_mut(usize::from(op.slot))?;
        if slot.is_some_and(|c| c.op == op) {
            slot.take()
        } else {
            None
        }
    }

    /// Frames in use other than the receive slots' (for the unload report).
    pub(crate) fn frames_out(&self) -> usize {
        self.pool.len() - self.free.len() - self.slot_frame.len() - self.limbo.len()
    }
}

impl Host<Frame> for KHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        match (self.pool.get(usize::from(*from)), self.pool.get(usize::from(*to))) {
            (Some(a), Some(b)) => b.copy_from(0, a, 0, len as usize).is_ok(),
            _ => false,
        }
    }
    fn release(&mut self, frame: Frame) {
        // A frame lent to a reply NetRPC could not send is already in limbo.
        if self.limbo.as_slice().iter().any(|l| l.0 == frame) {
            return;
        }
        self.unarm(frame);
        self.free.push(frame);
    }
    fn dropped(&mut self, _page: PageId, frame: Frame, _dirty: bool) {
        self.retire(frame);
    }
    fn completed(&mut self, done: Completion<Frame>) {
        if DiskState::complete(self, &done) {
            return;
        }
        if let Some(s) = self.done.get_mut(usize::from(done.op.slot)) {
            *s = Some(done);
        }
    }
    fn serve_other(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        if inc.op == crate::tpz::gms::heartbeat::OP_HEARTBEAT && inc.one_way {
            // The GMS heartbeat (from a guest or a host `gmsd`): the driver's receive path
            // already refreshed its sender's liveness; a malformed one is only not counted.
            if crate::tpz::gms::heartbeat::Heartbeat::from_message(inc.src, inc.body).is_ok() {
                STATS.heartbeats.inc();
            }
            return Action::Done;
        }
        if inc.op != Echo::OP {
            return Action::Error(RpcError::UnknownOp);
        }
        let Some((seq, len, _)) = Echo::parse(inc.body) else {
            return Action::Error(RpcError::Malformed);
        };
        if len as usize > FRAME_BYTES {
            return Action::Error(RpcError::Remote(ECHO_BAD_LEN));
        }
        if len == 0 {
            if seq == 0 {
                STATS.heartbeats.inc();
            } else {
                STATS.echo_served.inc();
            }
            return Action::reply(&Echo::body(seq, 0), None);
        }
        let Some(f) = self.alloc() else {
            return Action::Error(RpcError::Remote(ECHO_NO_FRAME));
        };
        let mut chunk = [0u8; 64];
        let mut off = 0;
        while off < len as usize {
            let n = (len as usize - off).min(chunk.len());
            proto::pattern(seq, off, &mut chunk[..n]);
            if self.pool[usize::from(f)].write(off, &chunk[..n]).is_err() {
                self.free.push(f);
                return Action::Error(RpcError::Remote(ECHO_BAD_LEN));
            }
            off += n;
        }
        // The reply carries the frame: free it after that send.
        self.retire(f);
        STATS.echo_served.inc();
        Action::reply(&Echo::body(seq, len), if len > 0 { Some((f, len)) } else { None })
    }
}

/// Check an echo reply against request `seq` of `len` bytes: the body, then the payload
/// byte for byte. Releases the reply's frame.
pub(crate) fn check_echo(
    host: &mut KHost,
    o: &Outcome<Frame>,
    seq: u32,
    len: u32,
) -> core::result::Result<(), &'static str> {
    let r = match o {
        Ok(r) => r,
        Err(_) => return Err("the call failed"),
    };
    let frame = match r.payload {
        Payload::Frame { frame, .. } | Payload::Buffer { frame, .. } => Some(frame),
        Payload::None => None,
    };
    let verdict = (|| {
        let (s, l, crc) = Echo::parse(r.body.as_slice()).ok_or("malformed reply body")?;
        if (s, l) != (seq, len) || crc != proto::pattern_crc(seq, len as usize) {
            return Err("reply body differs from the request");
        }
        let got_len = match r.payload {
            Payload::Frame { len, .. } | Payload::Buffer { len, .. } => len,
            Payload::None => 0,
        };
        if got_len != len {
            return Err("reply payload has the wrong length");
        }
        match frame {
            Some(f) => compare(host.frame(f).ok_or("bad frame")?, seq, len as usize),
            None if len == 0 => Ok(()),
            None => Err("no payload"),
        }
    })();
    if let Some(f) = frame {
        host.release(f);
    }
    verdict
}

/// Compare `len` bytes of a frame with the pattern of `seq`.
pub(crate) fn compare(frame: &DmaBuf, seq: u32, len: usize) -> core::result::Result<(), &'static str> {
    match first_difference(frame, seq, len)? {
        None => Ok(()),
        Some(_) => Err("payload differs from the pattern"),
    }
}

/// The first of `len` frame bytes that differs from the pattern of `seq`, if any: its
/// offset, the byte found and the byte expected.
pub(crate) fn first_difference(
    frame: &DmaBuf,
    seq: u32,
    len: usize,
) -> core::result::Result<Option<(usize, u8, u8)>, &'static str> {
    let (mut got, mut want) = ([0u8; 64], [0u8; 64]);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(got.len());
        frame.read(off, &mut got[..n]).map_err(|_| "frame too small")?;
        proto::pattern(seq, off, &mut want[..n]);
        if let Some(k) = (0..n).find(|&k| got[k] != want[k]) {
            return Ok(Some((off + k, got[k], want[k])));
        }
        off += n;
    }
    Ok(None)
}

/// Fill `len` bytes of a frame with the pattern of `seq`.
pub(crate) fn fill(frame: &DmaBuf, seq: u32, len: usize) -> Result {
    let mut chunk = [0u8; 64];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(chunk.len());
        proto::pattern(seq, off, &mut chunk[..n]);
        frame.write(off, &chunk[..n])?;
        off += n;
    }
    Ok(())
}

/// The nonblocking echo's continuation: runs from the receive path (IRQ thread, core
/// spinlock held: must not sleep) or, deferred, from the work item. Returns `false` with
/// no side effect while the issuing thread holds `echo.busy`.
pub(crate) fn echo_continuation(node: &mut Node, o: &Outcome<Frame>, arg: u64) -> bool {
    let host = &mut node.host;
    if host.echo.busy.load(Ordering::Acquire) {
        return false;
    }
    STATS.continuations.inc();
    let (seq, len) = ((arg >> 32) as u32, arg as u32);
    let ok = match check_echo(host, o, seq, len) {
        Ok(()) => 1,
        Err(why) => {
            pr_err!("echo {}: {}\n", seq, why);
            2
        }
    };
    host.echo.ran_in.store(if host.in_work { 2 } else { 1 }, Ordering::Relaxed);
    host.echo.result.store(ok, Ordering::Release);
    true
}

/// The continuation of the calls `unload_inflight=` leaves in flight: remove fails them
/// (they time out at once), and this counts the failure.
pub(crate) fn inflight_continuation(node: &mut Node, o: &Outcome<Frame>, _arg: u64) -> bool {
    if o.is_err() {
        STATS.inflight_failed.inc();
    } else if let Ok(Reply { payload: Payload::Frame { frame, .. } | Payload::Buffer { frame, .. }, .. }) = o {
        node.host.release(*frame);
    }
    true
}

/// Parse `gms_nodes=` ("0,1,2") into `out`; the number of ids, or `None` if malformed.
pub(crate) fn parse_members(s: &str, out: &mut [u16; MEMBERS]) -> Option<usize> {
    let mut n = 0;
    for part in s.trim().split(',') {
        let id: u16 = part.trim().parse().ok()?;
        if out[..n].contains(&id) {
            continue;
        }
        *out.get_mut(n)? = id;
        n += 1;
    }
    (n > 0).then_some(n)
}
