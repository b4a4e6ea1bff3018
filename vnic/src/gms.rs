// SPDX-License-Identifier: GPL-2.0-only
//! The GMS user-space runtime on a virtual NIC: a [`GmsPort`] is one node of the Global
//! Memory Service — NetRPC whose runtime is a [`gms::node::GmsNode`] — with its frame pool
//! (8 KiB slots of a region registered with the NIC: one page each), a bounded local page
//! cache, and read-ahead. [`Cluster`] ([`cluster`]) drives several ports from one thread (the in-process
//! cluster: every blocking operation polls every live node until it completes).
//!
//! Frames and the IPT follow [`crate::rpc`]: solicited getpage replies land zero-copy in a
//! frame armed in the IPT; unsolicited messages (putpages, delegated requests) land in the
//! receive slot's frame, which is detached and handed over. Frames GMS drops are freed only
//! once the sends posted before the drop have completed (they may still be carrying them).
//!
//! Putpage targets: the epoch-based **global LRU** ([`lru`], after [`gms::lru`]): drawn in
//! proportion to the epoch plan's weights (the share of the cluster's oldest pages and free
//! frames on each member); evicted pages older than the plan's threshold are discarded
//! ([`GmsPort::evict`]) and targets discard their globally oldest pages to make room.
//! Before the first plan (or when no member has weight left this epoch) the target is the
//! **least-loaded** member (the fewest pages this node stored there, skipping members that
//! refused recently).

use crate::nic::{InlineNative, NicMem};
use crate::rpc::{carve, post, receive, Frame, Frames, FRAME_BYTES};
use crate::shm::Mapping;
use anyhow::{bail, Context};
use gms::prelude::*;
use gms::readahead::{self, Decision, ReadAhead};
use lru::{build_summary, Lru, LruConfig, LruMsg, Summary};
use netrpc::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::ipt::CancelState;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, RECV_RING_ENTRIES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_host::endpoint::{Endpoint, EndpointConfig};

pub mod cluster;
pub mod lru;

pub use cluster::{Cluster, NodeView, Servers, VIEW_EVERY_NS};

/// Capacities of the node (pages held, directory entries, operations, background tasks).
pub const HELD: usize = 4096;
pub const DIR: usize = 8192;
pub const OPS: usize = 64;
pub const TASKS: usize = 128;
pub const OUTQ: usize = 128;
/// Most pages a port keeps in its local page cache by default.
pub const CACHE_PAGES: usize = 256;
/// Read-ahead streams and pending fetches.
const RA_STREAMS: usize = 4;
const RA_PENDING: usize = 64;

pub type Node = GmsNode<Frame, PortHost, 16, HELD, DIR, OPS, TASKS, OUTQ>;
pub type GmsRpc = Rpc<Node, Frame>;

/// The runtime's side of a node: frames, the endpoint, completions.
pub struct PortHost {
    pub frames: Frames,
    ep: Endpoint<NicMem, Option<Frame>>,
    base: u64,
    /// Nonblocking completions, handled after each poll.
    done: Vec<Completion<Frame>>,
    /// Frames GMS stopped holding, waiting for the sends posted so far to complete:
    /// (frame, send serial to wait for; `u64::MAX` until the next flush tags it).
    limbo: VecDeque<(Frame, u64)>,
    posted: u64,
    reaped: u64,
    /// Pages GMS dropped on this node (superseded, moved away, lost directory).
    pub pages_dropped: u64,
    /// Global-LRU messages received, handled after each poll.
    lru_inbox: Vec<LruMsg>,
    /// Heartbeats received (`gms::heartbeat`), for the runtime's liveness: sender, body.
    pub heartbeats: Vec<(u16, gms::heartbeat::Heartbeat)>,
    /// The firmware's send-completion sequence when the send ring was last reaped.
    tx_seq_seen: u32,
}

impl PortHost {
    /// Disarm `frame`'s IPT entry if it has one (the frame stays allocated).
    fn unarm(&mut self, frame: Frame) {
        if let Some(i) = self.frames.armed.iter().position(|a| a.0 == frame) {
            let (_, token) = self.frames.armed.swap_remove(i);
            // The NIC may be writing into it right now: wait (bounded by one packet).
            let mut st = self.ep.disarm(token);
            while st == CancelState::InFlight {
                std::hint::spin_loop();
                st = self.ep.disarm(token);
            }
        }
    }

    fn reap(&mut self) -> bool {
        let seq = self.ep.mem().load(ctrl_word(ctrl::FW_TX_SEQ), std::sync::atomic::Ordering::Acquire);
        if seq == self.tx_seq_seen {
            // No send completed since the last scan of the ring.
            return false;
        }
        // Completions published before `seq` are visible now; later ones move it again.
        self.tx_seq_seen = seq;
        let n = self.ep.reap_sends(|_, _| {}) as u64;
        self.reaped += n;
        while let Some(&(f, serial)) = self.limbo.front() {
            if serial > self.reaped {
                break;
            }
            self.limbo.pop_front();
            self.frames.free(f);
        }
        n > 0
    }
}

impl Host<Frame> for PortHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        len <= FRAME_BYTES
            && self.frames.region.copy_from(*to as usize, &self.frames.region, *from as usize, len as usize)
    }
    fn release(&mut self, frame: Frame) {
        self.unarm(frame);
        self.frames.free(frame);
    }
    fn dropped(&mut self, _page: PageId, frame: Frame, _dirty: bool) {
        self.pages_dropped += 1;
        self.limbo.push_back((frame, u64::MAX));
    }
    fn completed(&mut self, done: Completion<Frame>) {
        self.done.push(done);
    }
    fn serve_other(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        if gms::heartbeat::is_heartbeat_op(inc.op) && inc.one_way {
            // A malformed one is dropped: it says nothing about its sender.
            if let Ok(hb) = gms::heartbeat::Heartbeat::from_message(inc.src, inc.body) {
                self.heartbeats.push((inc.src, hb));
            }
            return Action::Done;
        }
        if !gms::lru::is_lru_op(inc.op) || !inc.one_way {
            return Action::Error(RpcError::UnknownOp);
        }
        let mut body = [0u8; 104];
        let len = inc.body.len().min(body.len());
        body[..len].copy_from_slice(&inc.body[..len]);
        self.lru_inbox.push(LruMsg { src: inc.src, op: inc.op, len, body });
        Action::Done
    }
}

/// Deterministic contents of `page` at `version`, a frame long (xorshift seeded by both):
/// what the demo, the benches and the tests put, so any read can be checked byte for byte.
pub fn page_pattern(page: PageId, version: Version) -> Vec<u8> {
    let mut x = page.space.wrapping_mul(0xff51_afd7_ed55_8ccd)
        ^ page.page.wrapping_mul(0xc4ce_b9fe_1a85_ec53)
        ^ version.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ 1;
    let mut out = Vec::with_capacity(FRAME_BYTES as usize);
    while out.len() < FRAME_BYTES as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Where a read was served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The local page cache (no network).
    Cache,
    /// This node held the page itself.
    Local,
    TwoWay,
    ThreeWay,
}

/// The result of a get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// `data`: exactly the bytes stored with the page (a 4 KiB page reads back as 4 KiB).
    Hit {
        version: Version,
        data: Vec<u8>,
        source: Source,
    },
    Miss,
}

/// The answer of a read into the reader's buffer ([`GmsPort::read_start_into`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadInto {
    /// The page's first `min(len, buf.len())` bytes are in the buffer; `len` is the page's
    /// length (a buffer shorter than the page gets only its start).
    Hit {
        version: Version,
        len: usize,
        source: Source,
    },
    Miss,
}

/// Where a read's bytes go: a fresh `Vec` ([`Got`]) or the reader's buffer.
enum Sink<'a> {
    Vec(Vec<u8>),
    Buf(&'a mut [u8]),
}

impl Sink<'_> {
    /// Take the first `len` bytes of frame `f` (never more than a frame).
    fn fill(&mut self, frames: &Frames, f: Frame, len: u32) {
        let len = len.min(FRAME_BYTES) as usize;
        match self {
            Sink::Vec(v) => {
                v.resize(len, 0);
                frames.read(f, v);
            }
            Sink::Buf(b) => {
                let n = len.min(b.len());
                frames.read(f, &mut b[..n]);
            }
        }
    }
}

/// What the client operation is for.
#[derive(Clone, Copy, Debug)]
enum Pending {
    /// A getpage into `frame` (a solicited frame armed in the IPT).
    Get { frame: Frame, issued: u64, kind: GetKind },
    /// A putpage from `frame` to `target`.
    Put { frame: Frame, target: u16, version: Version },
}

/// Who a getpage is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GetKind {
    /// [`GmsPort::get_start`]: the result is kept by operation for [`GmsPort::get_poll`].
    Plain,
    /// A reader's fetch through the cache: kept by page for the reader.
    Reader,
    /// Read-ahead: a hit goes into the cache; a miss is remembered briefly for a reader
    /// that waited for it.
    Prefetch,
}

/// How long a prefetch's miss answers a reader that comes for the page (ns).
const MISS_TTL: u64 = 100_000_000;

/// A finished get, kept until the reader takes it (fetches the cache cannot keep).
#[derive(Clone, Copy, Debug)]
enum Finished {
    /// `len`: the page's length in bytes (the bytes the hit carried into `frame`).
    Hit {
        version: Version,
        frame: Frame,
        len: u32,
        source: Source,
    },
    Miss,
}

/// Where a port's frames are ([`GmsPort::frame_audit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameAudit {
    pub total: usize,
    pub free: usize,
    /// Attached to receive slots.
    pub recv_slots: usize,
    /// Held by GMS (pages stored here).
    pub held: usize,
    /// In the local page cache.
    pub cache: usize,
    /// Finished gets not taken yet.
    pub kept: usize,
    /// Client operations in flight (one frame each).
    pub in_flight: usize,
    /// Dropped by GMS, waiting for sends to complete.
    pub limbo: usize,
    /// Armed in the IPT (a subset of `in_flight`).
    pub armed: usize,
}

impl FrameAudit {
    /// Every frame is accounted for exactly once.
    pub fn balanced(&self) -> bool {
        self.free + self.recv_slots + self.held + self.cache + self.kept + self.in_flight + self.limbo == self.total
    }
}

/// Counters of the runtime (GMS's own are in [`GmsNode::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub reads: u64,
    pub cache_hits: u64,
    /// Reads that found a fetch of the page pending and waited for it.
    pub waited_pending: u64,
    /// Getpages issued for readers (not read-ahead).
    pub demand_fetches: u64,
    pub prefetches: u64,
    /// Prefetches that could not be issued (ops full, no frame).
    pub prefetch_failed: u64,
    pub gets_hit: u64,
    pub gets_miss: u64,
    pub puts: u64,
    pub puts_stored: u64,
    pub puts_refused: u64,
    pub puts_other: u64,
    /// Payload bytes received by getpage hits and sent by putpages.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cache_evictions: u64,
    /// Poll passes blocking reads ([`Cluster::read`]) spent waiting for their page.
    pub read_wait_polls: u64,
}

/// One GMS node on a virtual NIC.
pub struct GmsPort {
    pub rpc: GmsRpc,
    pub node: Box<Node>,
    cpu: Option<InlineNative>,
    /// Wakes the NIC's own processor thread (when not driven inline).
    doorbell: Option<Arc<std::os::fd::OwnedFd>>,
    epoch: Instant,
    slot_frame: Vec<Frame>,
    /// Client operations in flight.
    pending: HashMap<OpId, (PageId, Pending)>,
    /// Reads finished but not taken (demand fetches whose page the cache did not keep).
    finished: HashMap<PageId, Finished>,
    /// Results of plain getpages, by operation.
    plain: HashMap<OpId, Finished>,
    /// Recent prefetch misses: page → when (a short-lived negative cache).
    missed: HashMap<PageId, u64>,
    /// The local page cache: page → (version, frame, length in bytes), and insertion
    /// order (FIFO bound).
    cache: HashMap<PageId, (Version, Frame, u32)>,
    order: VecDeque<PageId>,
    cache_cap: usize,
    ra: ReadAhead<RA_STREAMS, RA_PENDING>,
    /// Least-loaded target choice: pages this node stored at each member, and members that
    /// refused (skipped until a put elsewhere is refused too).
    stored_at: HashMap<u16, u64>,
    refused_by: HashMap<u16, u64>,
    pub stats: PortStats,
    /// Every finished putpage: (page, version, result), in completion order.
    pub put_log: Vec<(PageId, Version, PutResult)>,
    /// getpage latencies (ns) by how they were served: 2-way, 3-way.
    pub lat_2way: Vec<u64>,
    pub lat_3way: Vec<u64>,
    /// The global LRU (epochs, plan, coordinator when this is the lowest live member).
    pub lru: Lru,
    /// `pages_stored` of the node when the LRU last looked.
    lru_stored_seen: u64,
    /// When an idle [`Self::poll`] next checks the timers.
    timers_at: u64,
    /// Idle passes until [`Self::poll`] next reads the clock.
    clock_in: u32,
    /// The plan epoch when `refused_by` was last cleared.
    refused_epoch: u32,
    /// The plan epoch under which [`Self::make_room`] found too few old pages.
    room_blocked: Option<u32>,
}

/// Idle passes between two clock reads in [`GmsPort::poll`] (a few µs).
const CLOCK_PASSES: u32 = 32;

/// How often an idle poll checks NetRPC's, GMS's and the LRU's timers (ns).
const TIMER_CHECK_NS: u64 = 20_000;

/// This node's age summary for `epoch` at LRU clock `tick`.
fn summary_of(node: &Node, tick: u64, epoch: u32) -> Summary {
    let mut ages: Vec<u32> =
        node.holdings().map(|(_, h)| gms::lru::quantize_age(tick.saturating_sub(h.last_access))).collect();
    build_summary(node.id(), epoch, node.budget(), &mut ages)
}

impl GmsPort {
    /// Node `cfg.node_id` on NIC memory `mem` with `region` registered for DMA at `base`,
    /// the NIC's firmware driven inline from [`Self::poll`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mem: NicMem,
        region: Arc<Mapping>,
        base: u64,
        cfg: EndpointConfig,
        seed: [u64; 2],
        gms_cfg: GmsConfig,
        rpc_cfg: Config,
        cpu: InlineNative,
    ) -> anyhow::Result<Self> {
        Self::new_on(mem, region, base, cfg, seed, gms_cfg, rpc_cfg, Some(cpu), None)
    }

    /// Like [`Self::new`]; `cpu`: drive the NIC's firmware from [`Self::poll`] (inline),
    /// or `None` if the NIC has its own processor thread (e.g. the flashed image on the
    /// emulated core), which `doorbell` wakes after sends.
    #[allow(clippy::too_many_arguments)]
    pub fn new_on(
        mem: NicMem,
        region: Arc<Mapping>,
        base: u64,
        cfg: EndpointConfig,
        seed: [u64; 2],
        gms_cfg: GmsConfig,
        rpc_cfg: Config,
        cpu: Option<InlineNative>,
        doorbell: Option<Arc<std::os::fd::OwnedFd>>,
    ) -> anyhow::Result<Self> {
        let (ep, frames, slot_frame) = carve(mem, region, base, &cfg, seed, 64)?;
        let host = PortHost {
            frames,
            ep,
            base,
            done: Vec::new(),
            limbo: VecDeque::new(),
            posted: 0,
            reaped: 0,
            pages_dropped: 0,
            lru_inbox: Vec::new(),
            heartbeats: Vec::new(),
            tx_seq_seen: 0,
        };
        let mut port = GmsPort {
            rpc: Rpc::new(cfg.node_id, rpc_cfg),
            node: Box::new(GmsNode::new(cfg.node_id, gms_cfg, host)),
            cpu,
            doorbell,
            epoch: Instant::now(),
            slot_frame,
            pending: HashMap::default(),
            finished: HashMap::default(),
            plain: HashMap::default(),
            missed: HashMap::default(),
            cache: HashMap::default(),
            order: VecDeque::new(),
            cache_cap: CACHE_PAGES,
            ra: ReadAhead::new(readahead::Config { trigger: 2, depth: 0 }),
            stored_at: HashMap::default(),
            refused_by: HashMap::default(),
            stats: PortStats::default(),
            put_log: Vec::new(),
            lat_2way: Vec::new(),
            lat_3way: Vec::new(),
            lru: Lru::new(cfg.node_id, LruConfig::default()),
            lru_stored_seen: 0,
            timers_at: 0,
            clock_in: 0,
            refused_epoch: 0,
            room_blocked: None,
        };
        let t0 = Instant::now();
        while !port.node.host.ep.config_applied() {
            port.poll_nic();
            if t0.elapsed().as_secs() > 5 {
                bail!("the NIC did not apply the configuration");
            }
        }
        Ok(port)
    }

    pub fn id(&self) -> u16 {
        self.node.id()
    }

    /// Time in ns since the port started (the node's clock).
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Read-ahead depth (0: off) — pages prefetched after 2 sequential accesses.
    pub fn set_readahead(&mut self, depth: u32) {
        self.ra.set_config(readahead::Config { trigger: 2, depth: depth.min(RA_PENDING as u32 / 2) });
    }

    pub fn set_cache_pages(&mut self, n: usize) {
        self.cache_cap = n;
        self.trim_cache();
    }

    pub fn cached(&self, page: &PageId) -> Option<Version> {
        self.cache.get(page).map(|c| c.0)
    }
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }
    /// When this node's inline NIC must run again for its link's timers (frames on a
    /// wire-delay line), if ever: a caller that sleeps wakes by then.
    pub fn link_deadline(&self) -> Option<Instant> {
        self.cpu.as_ref().and_then(InlineNative::link_deadline)
    }
    /// Client operations in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
    /// Fetches read-ahead has pending.
    pub fn readahead_pending(&self) -> usize {
        self.ra.pending_len()
    }
    pub fn free_frames(&self) -> usize {
        self.node.host.frames.available()
    }

    /// Where every frame of the region is (a leak check: `total` = the sum of the rest).
    pub fn frame_audit(&self) -> FrameAudit {
        let h = &self.node.host;
        let kept =
            self.finished.values().chain(self.plain.values()).filter(|f| matches!(f, Finished::Hit { .. })).count();
        let gets = self.pending.values().filter(|p| matches!(p.1, Pending::Get { .. })).count();
        let puts = self.pending.len() - gets;
        FrameAudit {
            total: h.frames.region.len() / FRAME_BYTES as usize,
            free: h.frames.available(),
            recv_slots: self.slot_frame.len(),
            held: self.node.held_count(),
            cache: self.cache.len(),
            kept,
            in_flight: gets + puts,
            limbo: h.limbo.len(),
            armed: h.frames.armed.len(),
        }
    }

    /// A new membership view.
    pub fn set_members(&mut self, view: u64, ids: &[u16]) -> anyhow::Result<()> {
        let now = self.now();
        self.node.set_members(now, &mut self.rpc, view, ids).map_err(|e| anyhow::anyhow!("set_members: {e:?}"))?;
        self.after_input();
        Ok(())
    }

    /// Send a one-way heartbeat (`gms::heartbeat`) to `dst` now.
    pub fn send_heartbeat(&mut self, dst: u16, hb: &gms::heartbeat::Heartbeat) -> anyhow::Result<()> {
        self.rpc
            .send_oneway(dst, gms::heartbeat::OP_HEARTBEAT, &hb.to_bytes(), None)
            .map_err(|e| anyhow::anyhow!("heartbeat to {dst}: {e:?}"))?;
        self.flush();
        Ok(())
    }

    /// Node `n` died: its directory entries go, calls to it fail.
    pub fn node_failed(&mut self, n: u16) {
        let now = self.now();
        self.node.node_failed(now, &mut self.rpc, n);
        self.stored_at.remove(&n);
        self.after_input();
    }

    fn poll_nic(&mut self) -> bool {
        self.cpu.as_mut().is_some_and(|c| c.poll())
    }

    /// Wake a NIC processor thread that may sleep on its doorbell.
    fn ring(doorbell: &Option<Arc<std::os::fd::OwnedFd>>) {
        if let Some(d) = doorbell {
            let _ = rustix::io::write(d, &1u64.to_ne_bytes());
        }
    }

    /// One pass: NIC firmware, send completions, received messages, timeouts, GMS's
    /// background work, transmits, completions. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        let mut busy = self.poll_nic();
        busy |= self.node.host.reap();
        // The clock is read when something happened, else every CLOCK_PASSES idle passes
        // (a clock read costs more than the rest of an idle pass).
        self.clock_in = self.clock_in.saturating_sub(1);
        let idle = !busy && self.clock_in > 0;
        let mut clock = None;
        while let Some(m) = self.node.host.ep.poll_recv() {
            busy = true;
            let now = match clock {
                Some(t) => t,
                None => *clock.insert(self.tick_clock()),
            };
            let slot = (m.slot % RECV_RING_ENTRIES) as usize;
            let h = &mut self.node.host;
            let payload = receive(&mut h.ep, h.base, &m, &mut self.slot_frame[slot], &mut h.frames);
            self.rpc.handle_message(now, &mut *self.node, m.src, m.ctrl(), payload);
            // `drive` runs once after the batch (below): its scans of the operation and
            // task tables cost more than handling a message. A batch is at most a receive
            // ring (32), well within the node's notice queue.
            // A burst of putpages must find room as it arrives, not after the burst.
            self.make_room(now);
        }
        if self.rpc.has_deferred() {
            self.rpc.run_deferred(&mut *self.node);
            busy = true;
        }
        if idle && clock.is_none() {
            // Nothing arrived, nothing completed: no input for GMS, nothing to send.
            return false;
        }
        let now = match clock {
            Some(t) => t,
            None => self.tick_clock(),
        };
        // Timers are coarse (ms): an idle spin checks them every TIMER_CHECK_NS, not on
        // every pass (the scans of the call, operation and task tables dominated it).
        let timers = now >= self.timers_at;
        if timers {
            self.timers_at = now + TIMER_CHECK_NS;
            self.rpc.handle_timeouts(now, &mut *self.node);
        }
        if busy || (timers && self.node.poll_timeout().is_some_and(|t| t <= now)) {
            self.node.drive(now, &mut self.rpc);
        }
        if busy || timers || !self.node.host.lru_inbox.is_empty() {
            busy |= self.lru_step(now);
        }
        busy |= self.flush();
        busy |= self.handle_completions();
        busy
    }

    /// Read the clock (and give the node its LRU tick).
    fn tick_clock(&mut self) -> u64 {
        self.clock_in = CLOCK_PASSES;
        let now = self.now();
        self.node.set_epoch(self.lru.tick(now));
        now
    }

    /// After a client call that only queued messages (a getpage): send them. The node's
    /// timers and tasks wait for the next poll's `drive` (a getpage arms no task, and its
    /// deadline is milliseconds away); on the read-ahead path this halves the table scans.
    fn after_call(&mut self) {
        self.flush();
        self.handle_completions();
    }

    /// After a direct input to the node: drive it and send.
    fn after_input(&mut self) {
        let now = self.now();
        self.node.drive(now, &mut self.rpc);
        self.flush();
        self.handle_completions();
    }

    // ---- the global LRU -----------------------------------------------------------------------

    /// The global LRU's coordinator: the lowest live member.
    pub fn coordinator(&self) -> Option<u16> {
        self.node.members().ids().iter().copied().min()
    }

    /// Set the global LRU's parameters (keeps its state).
    pub fn set_lru_config(&mut self, cfg: LruConfig) {
        self.lru.cfg = cfg;
    }

    /// Global-LRU work after a poll: messages received, coordinator duties, putpages
    /// stored here, room for more, messages to send. Returns whether it sent anything.
    fn lru_step(&mut self, now: u64) -> bool {
        let tick = self.lru.tick(now);
        let inbox = std::mem::take(&mut self.node.host.lru_inbox);
        for m in &inbox {
            let node = &self.node;
            self.lru.handle(now, m, |e| summary_of(node, tick, e));
        }
        let node = &self.node;
        self.lru.poll(now, node.members().ids(), |e| summary_of(node, tick, e));
        self.count_received();
        self.make_room(now);
        let mut sent = false;
        for m in std::mem::take(&mut self.lru.out) {
            // A full transmit queue loses the message: the epoch's deadline covers it.
            sent |= self.rpc.send_oneway(m.dst, m.op, &m.body[..m.len], None).is_ok();
        }
        sent
    }

    /// Count the putpages this node stored since last time against the plan.
    fn count_received(&mut self) {
        let stored = self.node.stats().pages_stored;
        if stored > self.lru_stored_seen {
            let c = self.coordinator();
            self.lru.received(stored - self.lru_stored_seen, c);
            self.lru_stored_seen = stored;
        }
    }

    /// Keep `headroom` frames of the budget free by discarding held pages at least as old
    /// as the plan's threshold (ages as of the plan), oldest first, down to twice the
    /// headroom free. A node that is full while the plan still sends it putpages (its
    /// weight is not used up) discards its oldest pages whatever their age: the puts
    /// replace them, as the plan intends.
    fn make_room(&mut self, now: u64) {
        let budget = self.node.budget();
        let headroom = self.lru.cfg.headroom;
        let held = self.node.held_count();
        if budget == 0 || held + headroom <= budget {
            return;
        }
        self.count_received();
        let Some(plan) = self.lru.plan().copied() else { return };
        let owed = plan.remaining().get(self.id() as usize).copied().unwrap_or(0) as usize;
        let full = held >= budget;
        // A scan that found too few old pages is not repeated until the next plan.
        if self.room_blocked == Some(plan.epoch()) && !(full && owed > 0) {
            return;
        }
        let mut old: Vec<(u32, PageId)> = self
            .node
            .holdings()
            .filter(|(_, h)| h.state == HeldState::Registered)
            .map(|(p, h)| (self.lru.age_at_plan(h.last_access), *p))
            .collect();
        old.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        let want = (held + 2 * headroom).saturating_sub(budget);
        let old_enough = old.iter().take_while(|a| a.0 >= plan.threshold()).count();
        let mut n = want.min(old_enough);
        if n < want {
            self.room_blocked = Some(plan.epoch());
            if full && owed > 0 {
                n = want.min(owed.max(1)).min(old.len());
            }
        }
        for &(_, page) in old.iter().take(n) {
            if let Some(h) = self.node.drop_local(now, &page) {
                // Replies posted earlier may still carry the frame.
                self.node.host.limbo.push_back((h.frame, u64::MAX));
                self.lru.stats.held_discarded += 1;
            }
        }
    }

    /// Hand queued transmits to the NIC.
    fn flush(&mut self) -> bool {
        let mut sent = false;
        while let Some(t) = self.rpc.poll_transmit() {
            let host = &mut self.node.host;
            let cpu = &mut self.cpu;
            let doorbell = &self.doorbell;
            let mut reaped = 0;
            if post(&mut host.ep, host.base, &t, None, |ep| {
                match cpu.as_mut() {
                    Some(c) => {
                        c.poll();
                    }
                    None => Self::ring(doorbell),
                }
                reaped += ep.reap_sends(|_, _| {}) as u64;
            }) {
                host.posted += 1;
            }
            host.reaped += reaped;
            if let Some((_, len)) = t.payload {
                self.stats.bytes_out += len as u64;
            }
            sent = true;
        }
        // Frames dropped so far wait for every send posted up to now.
        let host = &mut self.node.host;
        for l in host.limbo.iter_mut().rev() {
            if l.1 != u64::MAX {
                break;
            }
            l.1 = host.posted;
        }
        host.reap();
        if sent {
            Self::ring(&self.doorbell);
            // Run the NIC until the sends have left, or until a message for the host has
            // landed (handled at the next pass).
            if let Some(c) = self.cpu.as_mut() {
                let ep = &self.node.host.ep;
                c.run(|| ep.recv_ready());
            }
        }
        sent
    }

    // ---- the page cache --------------------------------------------------------------------

    fn cache_insert(&mut self, page: PageId, version: Version, frame: Frame, len: u32) {
        if let Some((_, old, _)) = self.cache.insert(page, (version, frame, len)) {
            self.node.host.frames.free(old);
        } else {
            self.order.push_back(page);
        }
        self.trim_cache();
    }

    fn cache_remove(&mut self, page: &PageId) {
        if let Some((_, f, _)) = self.cache.remove(page) {
            self.node.host.frames.free(f);
            self.order.retain(|p| p != page);
        }
    }

    fn trim_cache(&mut self) {
        while self.cache.len() > self.cache_cap {
            let Some(p) = self.order.pop_front() else { break };
            if let Some((_, f, _)) = self.cache.remove(&p) {
                self.node.host.frames.free(f);
                self.stats.cache_evictions += 1;
            }
        }
    }

    /// The first `len` bytes of frame `f` (a page's stored bytes; never more than a frame).
    fn read_frame(&self, f: Frame, len: u32) -> Vec<u8> {
        let mut v = vec![0u8; len.min(FRAME_BYTES) as usize];
        self.node.host.frames.read(f, &mut v);
        v
    }

    // ---- completions -------------------------------------------------------------------------

    fn handle_completions(&mut self) -> bool {
        if self.node.host.done.is_empty() {
            return false;
        }
        let now = self.now();
        let done = std::mem::take(&mut self.node.host.done);
        for c in done {
            let Some((page, what)) = self.pending.remove(&c.op) else { continue };
            match (what, c.result) {
                (Pending::Get { frame, issued, kind }, OpResult::Get(r)) => {
                    let fin = match r {
                        GetResult::Hit { version, frame: f, len, via, held } => {
                            let source = match via {
                                Via::Local => Source::Local,
                                Via::TwoWay => Source::TwoWay,
                                Via::ThreeWay => Source::ThreeWay,
                            };
                            match via {
                                Via::TwoWay => self.lat_2way.push(now - issued),
                                Via::ThreeWay => self.lat_3way.push(now - issued),
                                Via::Local => {}
                            }
                            self.stats.gets_hit += 1;
                            self.stats.bytes_in += len as u64;
                            if held {
                                // A moving read made this node the holder: copy out of GMS's frame.
                                let mine = frame;
                                let ok = self.node.host.copy_payload(&f, &mine, len);
                                self.node.host.unarm(mine);
                                if ok {
                                    Finished::Hit { version, frame: mine, len, source }
                                } else {
                                    self.node.host.frames.free(mine);
                                    Finished::Miss
                                }
                            } else {
                                self.node.host.unarm(f);
                                Finished::Hit { version, frame: f, len, source }
                            }
                        }
                        GetResult::Miss { frame: f, .. } => {
                            self.stats.gets_miss += 1;
                            if let Some(f) = f {
                                self.node.host.release(f);
                            }
                            Finished::Miss
                        }
                    };
                    if kind != GetKind::Plain {
                        self.ra.complete(page.space, page.page, matches!(fin, Finished::Hit { .. }));
                    }
                    match (kind, fin) {
                        (GetKind::Plain, fin) => {
                            self.plain.insert(c.op, fin);
                        }
                        (GetKind::Prefetch, Finished::Hit { version, frame, len, .. }) => {
                            self.cache_insert(page, version, frame, len)
                        }
                        (GetKind::Prefetch, Finished::Miss) => {
                            if self.missed.len() > 4096 {
                                self.missed.retain(|_, t| now.saturating_sub(*t) < MISS_TTL);
                            }
                            self.missed.insert(page, now);
                        }
                        (GetKind::Reader, fin) => {
                            if let Some(Finished::Hit { frame, .. }) = self.finished.insert(page, fin) {
                                self.node.host.frames.free(frame);
                            }
                        }
                    }
                }
                (Pending::Put { frame, target, version }, OpResult::Put(r)) => {
                    // The send may not be reaped yet: free after the sends posted so far.
                    self.node.host.limbo.push_back((frame, u64::MAX));
                    match r {
                        PutResult::Stored { target } => {
                            self.stats.puts_stored += 1;
                            *self.stored_at.entry(target).or_default() += 1;
                            self.refused_by.remove(&target);
                        }
                        PutResult::Refused => {
                            self.stats.puts_refused += 1;
                            *self.refused_by.entry(target).or_default() += 1;
                        }
                        _ => self.stats.puts_other += 1,
                    }
                    self.put_log.push((page, version, r));
                }
                (Pending::Get { frame, .. }, _) => self.node.host.release(frame),
                (Pending::Put { frame, .. }, _) => self.node.host.limbo.push_back((frame, u64::MAX)),
            }
        }
        true
    }

    // ---- client operations -----------------------------------------------------------------------

    /// The least-loaded target for a putpage: among the other members, skip those that
    /// refused since their last stored page (unless all did), and take the one this node
    /// stored the fewest pages at.
    pub fn pick_target(&self) -> Option<u16> {
        let me = self.id();
        let others: Vec<u16> = self.node.members().ids().iter().copied().filter(|&n| n != me).collect();
        let fresh: Vec<u16> = others.iter().copied().filter(|n| !self.refused_by.contains_key(n)).collect();
        let pool = if fresh.is_empty() { &others } else { &fresh };
        pool.iter().copied().min_by_key(|n| (self.stored_at.get(n).copied().unwrap_or(0), *n))
    }

    /// The target of a putpage by the global LRU's plan, else least loaded.
    pub fn choose_target(&mut self) -> Option<u16> {
        // A new plan reflects the members' free memory now: forget who refused before it.
        let epoch = self.lru.plan().map_or(0, |p| p.epoch());
        if epoch != self.refused_epoch {
            self.refused_epoch = epoch;
            self.refused_by.clear();
        }
        let me = self.id();
        let c = self.coordinator();
        let members = self.node.members();
        let refused = &self.refused_by;
        let t = self.lru.choose_target(c, |n| n != me && members.contains(n) && !refused.contains_key(&n));
        if t.is_some() {
            self.lru.stats.puts_by_plan += 1;
            return t;
        }
        self.lru.stats.puts_fallback += 1;
        self.pick_target()
    }

    /// Start a putpage of `data` as `page` at `version` to `target` (default: by the
    /// global LRU, [`Self::choose_target`]). The page leaves the local cache (it may be
    /// stale now).
    pub fn put(&mut self, page: PageId, version: Version, data: &[u8], target: Option<u16>) -> anyhow::Result<OpId> {
        let target = match target {
            Some(t) => t,
            None => self.choose_target().context("no put target")?,
        };
        self.cache_remove(&page);
        if let Some(Finished::Hit { frame, .. }) = self.finished.remove(&page) {
            self.node.host.frames.free(frame);
        }
        self.missed.remove(&page);
        let f = self.node.host.frames.alloc().context("no free frame")?;
        self.node.host.frames.write(f, data);
        let now = self.now();
        match self.node.putpage(
            now,
            &mut self.rpc,
            page,
            version,
            f,
            data.len() as u32,
            target,
            false,
            Mode::NonBlocking,
        ) {
            Ok(op) => {
                self.pending.insert(op, (page, Pending::Put { frame: f, target, version }));
                self.stats.puts += 1;
                self.after_input();
                Ok(op)
            }
            Err(e) => {
                self.node.host.frames.free(f);
                bail!("putpage: {e:?}")
            }
        }
    }

    /// Evict a page this node last used at `last_used` (ns of [`Self::now`]): discarded
    /// (`Ok(None)`, counted in the LRU's `evictions_discarded`) if it is older than the
    /// plan's threshold, else put like [`Self::put`].
    pub fn evict(
        &mut self,
        page: PageId,
        version: Version,
        data: &[u8],
        last_used: u64,
    ) -> anyhow::Result<Option<OpId>> {
        let age = self.lru.age_at_plan(self.lru.tick(last_used));
        let c = self.coordinator();
        if self.lru.should_discard(age, c) {
            self.cache_remove(&page);
            return Ok(None);
        }
        self.put(page, version, data, None).map(Some)
    }

    /// This node at a glance.
    pub fn view(&self) -> NodeView {
        let g = self.node.stats();
        let recent = |v: &Vec<u64>| v[v.len().saturating_sub(2048)..].to_vec();
        let mut lat = recent(&self.lat_2way);
        lat.extend(recent(&self.lat_3way));
        lat.sort_unstable();
        NodeView {
            id: self.id(),
            held: self.node.held_count(),
            budget: self.node.budget(),
            gets_served: g.gets_served,
            puts_received: g.pages_stored,
            gets_hit: self.stats.gets_hit,
            gets: self.stats.gets_hit + self.stats.gets_miss,
            p50_us: (!lat.is_empty()).then(|| lat[lat.len() / 2] as f64 / 1000.0),
            discarded: self.pages_discarded(),
        }
    }

    /// Pages this node discarded by the global LRU (evictions not put, held pages aged out).
    pub fn pages_discarded(&self) -> u64 {
        self.lru.stats.evictions_discarded + self.lru.stats.held_discarded
    }

    /// Issue a getpage of `page` into a fresh solicited frame.
    /// `send`: hand it to the NIC now (else the caller does, after more).
    fn issue_get(&mut self, page: PageId, kind: GetKind, send: bool) -> anyhow::Result<OpId> {
        let f = self.node.host.frames.alloc().context("no free frame")?;
        let seg = Segment { addr: self.node.host.base + f, len: FRAME_BYTES };
        let token = match self.node.host.ep.arm(&[seg]) {
            Ok(t) => t,
            Err(e) => {
                self.node.host.frames.free(f);
                bail!("cannot arm an IPT entry: {e:?}")
            }
        };
        self.node.host.frames.armed.push((f, token));
        let now = self.now();
        let reply_to = ReplyTo::Solicited { token: token.0, frame: f };
        match self.node.getpage(now, &mut self.rpc, page, reply_to, Mode::NonBlocking) {
            Ok(op) => {
                // A getpage served locally completes inside the call: handled below.
                self.pending.insert(op, (page, Pending::Get { frame: f, issued: now, kind }));
                if kind == GetKind::Prefetch {
                    self.stats.prefetches += 1;
                } else {
                    self.stats.demand_fetches += 1;
                }
                if send {
                    self.after_call();
                }
                Ok(op)
            }
            Err(e) => {
                self.node.host.release(f);
                bail!("getpage: {e:?}")
            }
        }
    }

    /// Nonblocking read of `page` through the cache and read-ahead: `Some` if it is
    /// answered now (cache hit, or a fetch that already finished), else the fetch (or the
    /// pending prefetch) is under way: poll and ask again. Issues read-ahead.
    pub fn read_start(&mut self, page: PageId) -> Option<Got> {
        let mut sink = Sink::Vec(Vec::new());
        let r = self.read_start_to(page, &mut sink);
        r.map(|r| Self::got(r, sink))
    }

    /// Like [`Self::read_start`], the page's bytes copied into `buf` (no allocation):
    /// what a reader with a buffer of its own (a block device, a file read) uses.
    pub fn read_start_into(&mut self, page: PageId, buf: &mut [u8]) -> Option<ReadInto> {
        self.read_start_to(page, &mut Sink::Buf(buf))
    }

    /// Like [`Self::read_poll`], into `buf` (see [`Self::read_start_into`]).
    pub fn read_poll_into(&mut self, page: PageId, buf: &mut [u8]) -> Option<ReadInto> {
        self.read_poll_to(page, &mut Sink::Buf(buf))
    }

    fn got(r: ReadInto, sink: Sink<'_>) -> Got {
        match (r, sink) {
            (ReadInto::Hit { version, source, .. }, Sink::Vec(data)) => Got::Hit { version, data, source },
            _ => Got::Miss,
        }
    }

    fn read_start_to(&mut self, page: PageId, sink: &mut Sink<'_>) -> Option<ReadInto> {
        // The maps are usually empty on the read-ahead path: skip hashing then.
        if !self.finished.is_empty() {
            if let Some(fin) = self.finished.remove(&page) {
                return Some(self.take_finished(page, fin, sink));
            }
        }
        let cached = self.cache.get(&page).copied();
        if !self.missed.is_empty() {
            if let Some(t) = self.missed.remove(&page) {
                if self.now().saturating_sub(t) < MISS_TTL && cached.is_none() {
                    self.stats.reads += 1;
                    return Some(ReadInto::Miss);
                }
            }
        }
        let d = self.ra.on_access(page.space, page.page, cached.is_some());
        let r = match d {
            Decision::Hit => {
                self.stats.reads += 1;
                // Read-ahead answers a hit only for a page said to be cached.
                let Some((version, f, len)) = cached else { return Some(ReadInto::Miss) };
                self.stats.cache_hits += 1;
                sink.fill(&self.node.host.frames, f, len);
                Some(ReadInto::Hit { version, len: len as usize, source: Source::Cache })
            }
            Decision::WaitFor(_) => {
                self.stats.waited_pending += 1;
                None
            }
            Decision::Fetch(id) => {
                if self.issue_get(page, GetKind::Reader, true).is_err() {
                    if id.is_some() {
                        self.ra.complete(page.space, page.page, false);
                    }
                    self.stats.reads += 1;
                    Some(ReadInto::Miss)
                } else {
                    None
                }
            }
        };
        self.issue_prefetches(page.space);
        r
    }

    /// Issue the prefetches read-ahead wants now for `space`'s stream, in batches of
    /// half the depth sent together: one send-and-poll of the NIC per batch instead of
    /// per page, and the servers answer a batch per pass. (Half the depth keeps the other
    /// half in flight while a batch waits to fill; a quarter sent twice as many small
    /// batches and measured ~20 % slower at depth 16, the whole depth ~25 % slower.)
    fn issue_prefetches(&mut self, space: u64) {
        let batch = (self.ra.config().depth as u64 / 2).max(1);
        if self.ra.wanted(space) < batch {
            return;
        }
        let mut issued = false;
        loop {
            let (cache, missed) = (&self.cache, &self.missed);
            // Skip pages cached, and pages a recent prefetch found missing (a miss resets
            // the stream, whose new window may cover them again).
            let skip = |s, n| {
                let p = PageId::new(s, n);
                cache.contains_key(&p) || missed.contains_key(&p)
            };
            let Some(p) = self.ra.poll_prefetch(skip) else { break };
            let page = PageId::new(p.space, p.page);
            if self.issue_get(page, GetKind::Prefetch, false).is_err() {
                self.stats.prefetch_failed += 1;
                self.ra.complete(p.space, p.page, false);
                break;
            }
            issued = true;
        }
        if issued {
            self.after_call();
        }
    }

    /// Continue a read started with [`Self::read_start`]: the answer once the fetch it
    /// waits for finished (a prefetch lands in the cache; a reader's fetch is kept for it).
    pub fn read_poll(&mut self, page: PageId) -> Option<Got> {
        let mut sink = Sink::Vec(Vec::new());
        let r = self.read_poll_to(page, &mut sink);
        r.map(|r| Self::got(r, sink))
    }

    fn read_poll_to(&mut self, page: PageId, sink: &mut Sink<'_>) -> Option<ReadInto> {
        if !self.finished.is_empty() {
            if let Some(fin) = self.finished.remove(&page) {
                return Some(self.take_finished(page, fin, sink));
            }
        }
        if self.ra.pending_id(page.space, page.page).is_some() {
            return None;
        }
        if !self.missed.is_empty() && self.missed.remove(&page).is_some() {
            // The prefetch this reader waited for missed.
            self.stats.reads += 1;
            return Some(ReadInto::Miss);
        }
        if let Some(&(version, f, len)) = self.cache.get(&page) {
            self.stats.reads += 1;
            sink.fill(&self.node.host.frames, f, len);
            return Some(ReadInto::Hit { version, len: len as usize, source: Source::Cache });
        }
        // The prefetch it waited for missed: fetch it ourselves (or report the miss).
        self.read_start_to(page, sink)
    }

    fn take_finished(&mut self, page: PageId, fin: Finished, sink: &mut Sink<'_>) -> ReadInto {
        self.stats.reads += 1;
        match fin {
            Finished::Hit { version, frame, len, source } => {
                sink.fill(&self.node.host.frames, frame, len);
                // The page goes into the local cache (a reader's fetch is cached too).
                self.cache_insert(page, version, frame, len);
                ReadInto::Hit { version, len: len as usize, source }
            }
            Finished::Miss => ReadInto::Miss,
        }
    }

    /// Start a plain getpage (no cache, no read-ahead): poll, then [`Self::get_poll`]
    /// (a result never taken keeps its frame).
    pub fn get_start(&mut self, page: PageId) -> anyhow::Result<OpId> {
        self.issue_get(page, GetKind::Plain, true)
    }

    /// The result of a getpage started with [`Self::get_start`], once finished (the
    /// local cache is left alone).
    pub fn get_poll(&mut self, op: OpId) -> Option<Got> {
        Some(match self.plain.remove(&op)? {
            Finished::Hit { version, frame, len, source } => {
                let data = self.read_frame(frame, len);
                self.node.host.frames.free(frame);
                Got::Hit { version, data, source }
            }
            Finished::Miss => Got::Miss,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes of a pattern that differs per `seed` (no zero byte, so padding shows).
    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
    }

    /// A page shorter than a frame reads back with exactly its stored bytes, through every
    /// path (plain getpage from each node, a reader's fetch, then the local cache), even
    /// when its frames last held a longer page.
    #[test]
    fn short_pages_read_back_with_their_length() {
        // GMS nodes are large const-generic tables: give the cluster a big stack.
        std::thread::Builder::new().stack_size(256 << 20).spawn(short_pages).unwrap().join().unwrap();
    }

    fn short_pages() {
        let mut c = Cluster::new(3, 64, GmsConfig::default()).expect("cluster");
        let page = PageId::new(5, 1);
        // A full page first, so frames are dirty past 4 KiB when the short one reuses them.
        let full = bytes(FRAME_BYTES as usize, 3);
        c.ports[0].put(page, Version(1), &full, Some(1)).expect("put");
        c.settle(0).expect("put finishes");
        match c.get_wait(2, page).expect("get") {
            Got::Hit { data, .. } => assert!(data == full, "full page: wrong bytes"),
            Got::Miss => panic!("full page missed"),
        }
        for (v, len) in [(2u64, 4096usize), (3, 100), (4, 1)] {
            let short = bytes(len, v as u8);
            c.ports[0].put(page, Version(v), &short, Some(1)).expect("put");
            c.settle(0).expect("put finishes");
            let last = c.ports[0].put_log.last();
            assert!(
                matches!(last, Some((_, vv, PutResult::Stored { target: 1 })) if *vv == Version(v)),
                "{len} B page stored: {last:?}"
            );
            for from in 0..3 {
                match c.get_wait(from, page).expect("get") {
                    Got::Hit { version, data, .. } => {
                        assert_eq!(version, Version(v));
                        assert_eq!(data.len(), len, "node {from}: length");
                        assert!(data == short, "node {from}: wrong bytes");
                    }
                    Got::Miss => panic!("node {from}: {len} B page missed"),
                }
            }
            // Through the cache: the reader's fetch, then a cache hit.
            let mut sources = Vec::new();
            for _ in 0..2 {
                match c.read(2, page).expect("read") {
                    Got::Hit { data, source, .. } => {
                        assert_eq!(data.len(), len, "read: length");
                        assert!(data == short, "read: wrong bytes");
                        sources.push(source);
                    }
                    Got::Miss => panic!("read of the {len} B page missed"),
                }
            }
            assert_eq!(sources[1], Source::Cache, "second read from the cache ({sources:?})");
            c.ports[2].cache_remove(&page);
        }
    }

    /// Reads into the reader's buffer give the same bytes as reads into a `Vec`, through
    /// the fetch, read-ahead and cache paths; a short buffer gets the page's start and the
    /// page's full length; a page never stored is a miss.
    #[test]
    fn read_into_matches_read() {
        std::thread::Builder::new().stack_size(256 << 20).spawn(read_into_pages).unwrap().join().unwrap();
    }

    fn read_into_pages() {
        let mut c = Cluster::new(3, 256, GmsConfig::default()).expect("cluster");
        let pages: Vec<Vec<u8>> = (0..64u64).map(|n| bytes(FRAME_BYTES as usize - n as usize * 7, n as u8)).collect();
        for (n, d) in pages.iter().enumerate() {
            c.ports[0].put(PageId::new(7, n as u64), Version(1), d, Some(1 + n as u16 % 2)).expect("put");
            c.settle(0).expect("put finishes");
        }
        c.ports[2].set_readahead(8);
        let mut buf = vec![0u8; FRAME_BYTES as usize];
        for (n, d) in pages.iter().enumerate() {
            buf.fill(0);
            match c.read_into(2, PageId::new(7, n as u64), &mut buf).expect("read") {
                ReadInto::Hit { version, len, .. } => {
                    assert_eq!((version, len), (Version(1), d.len()), "page {n}");
                    assert!(buf[..len] == d[..], "page {n}: wrong bytes");
                    assert!(buf[len..].iter().all(|&b| b == 0), "page {n}: bytes past its end");
                }
                ReadInto::Miss => panic!("page {n} missed"),
            }
        }
        assert!(c.ports[2].stats.prefetches > 0, "a sequential scan reads ahead");
        c.settle(2).expect("prefetches finish");
        // From the cache: the same bytes as a read into a Vec; a short buffer gets the start.
        let page = PageId::new(7, 63);
        let mut short = [0u8; 100];
        match c.read_into(2, page, &mut short).expect("read") {
            ReadInto::Hit { len, source, .. } => {
                assert_eq!((len, source), (pages[63].len(), Source::Cache));
                assert!(short[..] == pages[63][..100]);
            }
            ReadInto::Miss => panic!("cached page missed"),
        }
        match c.read(2, page).expect("read") {
            Got::Hit { data, .. } => assert!(data == pages[63]),
            Got::Miss => panic!("cached page missed"),
        }
        assert_eq!(c.read_into(2, PageId::new(7, 1000), &mut buf).expect("read"), ReadInto::Miss);
        assert!(c.ports[2].frame_audit().balanced(), "{:?}", c.ports[2].frame_audit());
    }

    /// With the servers' thread running the client's NIC too, reads and puts still
    /// complete with the right bytes, and the client drives its NIC again after rejoin.
    #[test]
    fn servers_thread_can_run_the_client_nic() {
        std::thread::Builder::new().stack_size(256 << 20).spawn(client_nic_on_servers).unwrap().join().unwrap();
    }

    fn client_nic_on_servers() {
        let mut c = Cluster::new(3, 64, GmsConfig::default()).expect("cluster");
        let s = c.spawn_servers_with(1, true).expect("servers");
        assert!(c.ports[0].cpu.is_none(), "the client's NIC moved to the servers' thread");
        let mut buf = vec![0u8; FRAME_BYTES as usize];
        for n in 0..16u64 {
            let d = bytes(FRAME_BYTES as usize, n as u8);
            c.ports[0].put(PageId::new(3, n), Version(1), &d, None).expect("put");
            c.settle(0).expect("put finishes");
            c.ports[0].cache_remove(&PageId::new(3, n));
            match c.read_into(0, PageId::new(3, n), &mut buf).expect("read") {
                ReadInto::Hit { len, .. } => assert!(len == d.len() && buf == d, "page {n}: wrong bytes"),
                ReadInto::Miss => panic!("page {n} missed"),
            }
        }
        c.rejoin(s).expect("rejoin");
        assert!(c.ports[0].cpu.is_some(), "the client's NIC is back");
        assert!(matches!(c.get_wait(0, PageId::new(3, 5)).expect("get"), Got::Hit { .. }));
    }
}
