// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC and the GMS node inside the kernel: the runtime that moves `netrpc` messages
//! through the endpoint, over a pool of coherent DMA frames, with GMS as NetRPC's context.
//!
//! Frames are indices into a pool of 4 KiB coherent DMA buffers, or block request pages
//! lent to the NIC ([`pool`]); the shared runtime's port ([`KPort`], `runtime/src/port.rs`, the same code as user space's) keeps
//! them: one attached to each receive slot and swapped out for an unsolicited payload, a
//! caller frame armed in the IPT for a solicited reply, frames waiting in limbo for the
//! sends that carry them. [`KHost`] is GMS's [`Host`] over that port: it adds the
//! completions of nonblocking operations (kept by operation slot until their issuer takes
//! them: the disk after each batch, a test in its loop), the transmit frames of the
//! driver's own messages, the global LRU's inbox, and serves GMS heartbeats beside GMS
//! (`serve_other`; other operations go to the service the driver plugs in, the self-tests'
//! echo). [`stack::Core`] is NetRPC, the GMS node and the global LRU over this host.
//!
//! The runtime layer: it uses `sys`, `nicmem`, `stats` and the shared crates, never the
//! driver, the disk or the self-tests, which use it. Everything here runs under the
//! driver's core spinlock: in the interrupt handler, in the deferred-continuation work
//! item, or in process context — never sleeps, never allocates (every container is sized at probe).

pub(crate) mod pool;
pub(crate) mod stack;

pub(crate) use pool::Pool;

use crate::nicmem::BarMem;
use crate::stats::STATS;
use crate::sys::dma::DmaBuf;
use crate::tpz::endpoint::{Endpoint, RecvMsg, SendError, SendMsg};
use crate::tpz::gms::epochs::LruMsg;
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::store::liveness::Liveness;
use crate::tpz::iface::entry::{Segment, TxStatus};
use crate::tpz::iface::layout::Counter;
use crate::tpz::netrpc::prelude::*;
use crate::tpz::runtime::port::{Exported, Port, SetupError, RPC_COOKIE};
use crate::tpz::runtime::{FrameMem, Storage};
use kernel::prelude::*;

/// A frame: index into the pool ([`pool::Pool`]), or a lent request page.
pub(crate) type Frame = u32;
/// Bytes in every frame: a GMS page (one page: a page a node stores for others costs
/// that page and no more). An unsolicited payload fits one frame (a longer one is
/// refused); a solicited one may fill a group of them ([`MTU`]).
pub(crate) const FRAME_BYTES: usize = 4096;
/// The largest payload: a `GETPAGES` reply of a whole group ([`pool::GROUP_FRAMES`]).
pub(crate) const MTU: usize = pool::GROUP_FRAMES * FRAME_BYTES;
/// GMS capacities fixed at build time: members, client operations, background tasks,
/// queued notifications. The tables that grow with memory — pages held and directory
/// entries — are sized at load from `gms_budget_pages=` and `gms_dir_pages=`
/// ([`KStorage`], `kvmalloc`), as are the frame pool and the stacks over it ([`KVVec`]).
pub(crate) const MEMBERS: usize = 8;
pub(crate) const OPS: usize = 32;
const TASKS: usize = 64;
const OUTQ: usize = 32;
/// NetRPC capacities: call records, continuations per call, queued transmits.
const CALLS: usize = 32;
const CONTS: usize = 4;
const TXQ: usize = 64;

/// The GMS node, NetRPC's context.
pub(crate) type Node = GmsNode<Frame, KHost, KStorage, MEMBERS, OPS, TASKS, OUTQ>;
/// NetRPC of one node.
pub(crate) type NetRpc = Rpc<Node, Frame, CALLS, CONTS, TXQ>;

/// Send-ring-full retries (reaping in between) before a transmit is dropped.
const POST_TRIES: u32 = 10_000;

/// The NetRPC and GMS clock: monotonic ns.
pub(crate) fn now_ns() -> u64 {
    kernel::time::Ktime::ktime_get().to_ns().max(0) as u64
}

/// A service for operations GMS and the runtime do not know (the self-tests' echo):
/// called from `serve_other` on the receive path (core spinlock held, must not sleep).
/// The request's unsolicited payload frame, if any, is already released.
pub(crate) type Serve = fn(&mut KHost, &Incoming<'_, Frame>) -> Action<Frame>;

/// The port's tables on the kernel heap (`kvmalloc`), made at probe.
pub(crate) struct KStorage;

impl Storage for KStorage {
    type Buf<T: Copy> = KVVec<T>;
    type Boxed<T> = KBox<T>;
    fn buf<T: Copy>(n: usize, fill: T) -> Option<KVVec<T>> {
        KVVec::from_elem(fill, n, GFP_KERNEL).ok()
    }
    fn boxed<T>(v: T) -> Option<KBox<T>> {
        KBox::new(v, GFP_KERNEL).ok()
    }
}

/// The shared runtime's port over the NIC's BAR and the DMA pool.
pub(crate) type KPort = Port<BarMem, Pool, KStorage>;

/// The port, once probe has one: [`KHost::empty`] (the `static` template the node is
/// copied from) has none, and then every operation is a no-op or an error.
pub(crate) struct Ep(pub(crate) Option<KPort>);

impl Ep {
    pub(crate) fn poll_recv(&mut self) -> Option<RecvMsg> {
        self.0.as_mut()?.ep.poll_recv()
    }
    pub(crate) fn release_recv(&mut self, frame: Option<&[Segment]>) {
        if let Some(p) = self.0.as_mut() {
            p.ep.release_recv(frame);
        }
    }
    /// Post a message of the driver's own (a ping) with `cookie` (below `RPC_COOKIE`).
    pub(crate) fn post_send(&mut self, msg: &SendMsg<'_>, cookie: usize) -> core::result::Result<(), SendError> {
        self.0.as_mut().ok_or(SendError::RingFull)?.post_raw(msg, cookie)
    }
    pub(crate) fn sends_in_flight(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.ep.sends_in_flight())
    }
    pub(crate) fn counter(&self, c: Counter) -> u64 {
        self.0.as_ref().map_or(0, |p| p.ep.counter(c))
    }
    pub(crate) fn config_applied(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.ep.config_applied())
    }
    pub(crate) fn mem(&self) -> Option<&BarMem> {
        self.0.as_ref().map(|p| p.ep.mem())
    }
    /// Frame `f`'s buffer (`None` for a lent page).
    pub(crate) fn frame(&self, f: Frame) -> Option<&DmaBuf> {
        self.0.as_ref()?.frames().buf(f)
    }
}

/// What GMS and NetRPC need from the kernel: the port (endpoint and frames), completions.
pub(crate) struct KHost {
    pub(crate) ep: Ep,
    /// Nonblocking GMS completions, by operation slot (`OPS` of them, on the heap: a
    /// `KHost` is moved while probe builds the core).
    done: KVec<Option<Completion<Frame>>>,
    /// Transmit frames of the driver's own messages (the ping test's; bit `i` of
    /// `tx_busy`: posted, not yet reaped).
    pub(crate) tx: KVec<DmaBuf>,
    pub(crate) tx_busy: u32,
    /// The work item is running NetRPC's deferred continuations.
    pub(crate) in_work: bool,
    /// Serves the operations nobody else knows (`None`: they are refused).
    pub(crate) serve: Option<Serve>,
    /// Global-LRU messages received, for [`stack::Core`]'s `lru` after the batch:
    /// `lru_inbox[..lru_queued]`.
    pub(crate) lru_inbox: KVVec<LruMsg>,
    pub(crate) lru_queued: usize,
    /// Liveness of the `gms_nodes=` peers ([`Liveness`], the policy `gmsd` shares): the
    /// receive path hands it heartbeats and other messages, the ticker its timeouts and
    /// events. `None` until the node joins GMS. On the heap: a `KHost` is moved while
    /// probe builds the core, on a stack with little room.
    pub(crate) liveness: Option<KBox<Liveness<MEMBERS>>>,
}

/// Global-LRU messages kept between two receive batches (a batch is a receive ring; an
/// overflow is counted and the epoch's deadline covers it).
pub(crate) const LRU_INBOX: usize = 32;

impl KHost {
    /// No endpoint, no frames: the host of the `static` node template.
    pub(crate) const fn empty() -> KHost {
        KHost {
            ep: Ep(None),
            done: KVec::new(),
            tx: KVec::new(),
            tx_busy: 0,
            in_work: false,
            serve: None,
            lru_inbox: KVVec::new(),
            lru_queued: 0,
            liveness: None,
        }
    }

    /// A heartbeat from `hb.node` (checked to name its sender), fresh off the link: to
    /// liveness, which refuses strangers and this node's own id, and heartbeats of an
    /// incarnation older than the one its sender is alive as (each counted apart).
    fn heard_beat(&mut self, hb: &crate::tpz::gms::heartbeat::Heartbeat) {
        let Some(l) = self.liveness.as_mut() else { return };
        let stale = l.stale_incarnations;
        if !l.handle_heartbeat(now_ns(), hb.node, hb.incarnation) {
            match l.stale_incarnations > stale {
                true => STATS.gms_heartbeats_stale.inc(),
                false => STATS.gms_heartbeats_refused.inc(),
            }
        }
    }

    /// A host over `ep`, whose receive slots were given [`KPort::slot_segment`]s of `pool`.
    #[inline(never)]
    pub(crate) fn new(ep: KBox<Endpoint<BarMem, usize>>, pool: Pool, tx: KVec<DmaBuf>) -> Result<Self> {
        let port = KPort::with_boxed(ep, pool, 0).map_err(|e| match e {
            SetupError::TooFewFrames { .. } => EINVAL,
            SetupError::NoMemory => ENOMEM,
        })?;
        let inbox = KVVec::from_elem(LruMsg { src: 0, op: 0, len: 0, body: [0; 104] }, LRU_INBOX, GFP_KERNEL)?;
        let mut host = Self::empty();
        host.done = KVec::from_elem(None, OPS, GFP_KERNEL)?;
        host.ep = Ep(Some(port));
        host.tx = tx;
        host.lru_inbox = inbox;
        Ok(host)
    }

    pub(crate) fn alloc(&mut self) -> Option<Frame> {
        self.ep.0.as_mut()?.alloc()
    }
    pub(crate) fn frame(&self, f: Frame) -> Option<&DmaBuf> {
        self.ep.frame(f)
    }
    /// The frame attached to receive slot `slot`.
    pub(crate) fn slot_frame(&self, slot: u32) -> Option<Frame> {
        self.ep.0.as_ref().map(|p| p.slot_frame(slot))
    }

    /// Allocate a frame and arm an IPT entry for it: a solicited reply lands in it.
    pub(crate) fn solicit(&mut self) -> Option<ReplyTo<Frame>> {
        self.ep.0.as_mut()?.solicit()
    }

    /// Whether `n` request pages can be lent now ([`Self::lend`]).
    pub(crate) fn can_lend(&self, n: usize) -> bool {
        self.ep.0.as_ref().is_some_and(|p| p.frames().can_lend(n))
    }

    /// Lend the page of `io` to the NIC: the frame that names it, to put from or to
    /// [`Self::arm`] for a reply. `None`: no lend slot, no port, or the page could not be
    /// lent (its request ended, or it is not one whole page: a misaligned buffer).
    pub(crate) fn lend(&mut self, io: &crate::blk::PageIo) -> Option<Frame> {
        let pool = self.ep.0.as_mut()?.frames_mut();
        if !pool.can_lend(1) {
            return None;
        }
        let lent = io.lend(pool.dev()).ok()?;
        pool.lend(lent)
    }

    /// One frame naming lent pages `frames` in order (the pool's group), to [`Self::arm`]
    /// for a reply that fills them all; `None`: no group free. Releasing it gives the
    /// pages back.
    pub(crate) fn group(&mut self, frames: &[Frame]) -> Option<Frame> {
        let pool = self.ep.0.as_mut()?.frames_mut();
        frames.iter().all(|&f| Pool::is_lent(f)).then(|| pool.group(frames)).flatten()
    }

    /// Arm an IPT entry on frame `f` (a lent page, or a group of them): a solicited reply
    /// lands in it.
    pub(crate) fn arm(&mut self, f: Frame) -> Option<ReplyTo<Frame>> {
        let token = self.ep.0.as_mut()?.arm(f).ok()?;
        Some(ReplyTo::Solicited { token: token.0, frame: f })
    }

    /// Move the lends the port gave back into `out`, to drop once the core lock is
    /// released (dropping one may end its request); how many.
    pub(crate) fn take_back(&mut self, out: &mut [Option<crate::sys::blk::Lent>]) -> usize {
        self.ep.0.as_mut().map_or(0, |p| p.frames_mut().take_back(out))
    }

    /// Take back every page still lent (remove, once the NIC halted or was given up on):
    /// its IPT entry disarmed, a send that may carry it forgotten (the NIC is not running
    /// it any more, or reads stale bytes at worst). Returns how many were taken back and
    /// how many stay leaked because the NIC kept writing into them.
    #[inline(never)]
    pub(crate) fn reclaim_lent(&mut self) -> (usize, usize) {
        let Some(p) = self.ep.0.as_mut() else { return (0, 0) };
        let (mut back, mut leaked) = (0, 0);
        // Groups first: giving one back gives back the pages it names.
        for i in 0..pool::LENT_NAMES {
            let Some(f) = p.frames().lent(i) else { continue };
            if p.unarm(f) {
                crate::tpz::runtime::FrameMem::give_back(p.frames_mut(), f);
                back += 1;
            } else {
                leaked += 1;
            }
        }
        (back, leaked)
    }

    /// Disarm `f`'s IPT entry if it has one; the frame stays allocated (kept as data).
    /// `false`: the entry stayed busy and the frame is leaked (must not be used).
    pub(crate) fn disarm_frame(&mut self, f: Frame) -> bool {
        self.ep.0.as_mut().is_some_and(|p| p.unarm(f))
    }

    /// Free `f` once the sends posted up to the next flush have completed.
    pub(crate) fn retire(&mut self, f: Frame) {
        if let Some(p) = self.ep.0.as_mut() {
            p.retire(f);
        }
    }

    /// Reap send completions (clearing ping frames' busy bits) and free the frames in
    /// limbo whose sends are done. Whether any send completed.
    pub(crate) fn reap(&mut self) -> bool {
        let KHost { ep, tx_busy, .. } = self;
        let Some(p) = ep.0.as_mut() else { return false };
        p.reap(|t, status| {
            if t != RPC_COOKIE && t < 32 {
                *tx_busy &= !(1u32 << t);
            }
            if status != TxStatus::Sent {
                STATS.tx_errors.inc();
            }
        })
    }

    /// Take a message off its receive slot for NetRPC (see the module doc); the slot is
    /// given back to the NIC.
    pub(crate) fn receive(&mut self, m: &RecvMsg) -> InPayload<Frame> {
        let Some(p) = self.ep.0.as_mut() else { return InPayload::Refused };
        let before = p.stats;
        let payload = p.receive(m);
        if p.stats.refused != before.refused {
            STATS.rx_refused.inc();
        }
        if p.stats.starved != before.starved {
            STATS.rpc_no_frame.inc();
        }
        payload
    }

    /// Post one NetRPC transmit; while the send ring is full, reap (bounded). `false`: dropped.
    pub(crate) fn post(&mut self, t: &Transmit<Frame>) -> bool {
        let Some(p) = self.ep.0.as_mut() else { return false };
        if p.post(t, POST_TRIES, |_| core::hint::spin_loop()) {
            STATS.rpc_tx.inc();
            STATS.tx_msgs.inc();
            true
        } else {
            STATS.tx_ring_full.inc();
            false
        }
    }

    /// Tag the frames dropped so far with the sends posted up to now.
    pub(crate) fn tag_limbo(&mut self) {
        if let Some(p) = self.ep.0.as_mut() {
            p.tag_limbo();
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

    /// The operation whose completion waits at slot `slot`, if any.
    pub(crate) fn done_op(&self, slot: usize) -> Option<OpId> {
        self.done.get(slot)?.as_ref().map(|c| c.op)
    }

    /// Frames in use other than the receive slots' (for the unload report).
    pub(crate) fn frames_out(&self) -> usize {
        self.ep.0.as_ref().map_or(0, |p| p.frames().count() - p.available() - p.in_slots() - p.in_limbo())
    }
}

impl Host<Frame> for KHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        self.ep.0.as_ref().is_some_and(|p| p.copy(*from, *to, len))
    }
    fn release(&mut self, frame: Frame) {
        if let Some(p) = self.ep.0.as_mut() {
            p.release(frame);
        }
    }
    fn dropped(&mut self, _page: PageId, frame: Frame, _dirty: bool) {
        self.retire(frame);
    }
    /// In this NIC's answer table: its NIC then answers hinted getpages of the page itself.
    fn export(&mut self, again: Option<Answer>, frame: &Frame, len: u32, reply: &[u8]) -> Option<Answer> {
        let again = again.map(|a| Exported { index: a.index, key: a.key });
        let e = self.ep.0.as_mut()?.export(again, *frame, len, reply)?;
        Some(Answer { index: e.index, key: e.key })
    }
    fn retract(&mut self, answer: Answer) {
        if let Some(p) = self.ep.0.as_mut() {
            p.retract(answer.index);
        }
    }
    /// Whole held pool frames only (a group's pieces are frames): a reply gathered from
    /// them ends once posted.
    fn gather(&mut self, frames: &[Frame], piece: u32) -> Option<Frame> {
        let pool = self.ep.0.as_mut()?.frames_mut();
        let whole = piece as usize == FRAME_BYTES && frames.iter().all(|&f| !Pool::is_lent(f));
        whole.then(|| pool.group(frames)).flatten()
    }
    /// Kept by operation slot until the issuer takes it ([`KHost::take_done`]): the disk
    /// after each batch ([`stack::Client::settle`]), a test in its loop. Nothing runs here.
    fn completed(&mut self, done: Completion<Frame>) {
        if let Some(s) = self.done.get_mut(usize::from(done.op.slot)) {
            *s = Some(done);
        }
    }
    fn serve_other(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        if crate::tpz::gms::lru::is_lru_op(inc.op) && inc.one_way {
            STATS.lru_msgs.inc();
            if let Some(m) = self.lru_inbox.get_mut(self.lru_queued) {
                let len = inc.body.len().min(m.body.len());
                *m = LruMsg { src: inc.src, op: inc.op, len, body: [0; 104] };
                m.body[..len].copy_from_slice(&inc.body[..len]);
                self.lru_queued += 1;
            }
            return Action::Done;
        }
        if inc.op == crate::tpz::gms::heartbeat::OP_HEARTBEAT && inc.one_way {
            // The GMS heartbeat (from a guest or a host `gmsd`): to liveness, whose events
            // the ticker acts on (its incarnation tells a restart). A malformed one is
            // only not counted.
            if let Ok(hb) = crate::tpz::gms::heartbeat::Heartbeat::from_message(inc.src, inc.body) {
                STATS.heartbeats.inc();
                self.heard_beat(&hb);
            }
            return Action::Done;
        }
        match self.serve {
            Some(serve) => serve(self, inc),
            None => Action::Error(RpcError::UnknownOp),
        }
    }
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
