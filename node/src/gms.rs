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
//! Putpage targets: the epoch-based **global LRU** ([`gms::epochs`], after [`gms::lru`]): drawn in
//! proportion to the epoch plan's weights (the share of the cluster's oldest pages and free
//! frames on each member); evicted pages older than the plan's threshold are discarded
//! ([`GmsPort::evict`]) and targets discard their globally oldest pages to make room.
//! Before the first plan (or when no member has weight left this epoch) the target is the
//! **least-loaded** member (the fewest pages this node stored there, skipping members that
//! refused recently).

use crate::rpc::{Attach, Frame, FRAME_BYTES};
use anyhow::bail;
use gms::cache::PageCache;
use gms::placement::Placement;
use gms::prelude::*;
use gms::readahead::{self, ReadAhead};
use lru::{Lru, LruConfig};
use netrpc::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Instant;
use trapeze_firmware::iface::layout::RECV_RING_ENTRIES;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_runtime::storage::Heap;
use trapeze_vnic::nic::InlineNative;
use trapeze_vnic::shm::Mapping;

mod completions;
mod global_lru;
mod host;
mod poll;
mod putpage;
mod read;
mod store;
#[cfg(test)]
mod tests;

pub mod cluster;
/// A node's part in the global LRU ([`gms::epochs`]).
pub use gms::epochs as lru;

pub use cluster::{Cluster, NodeView, Servers, VIEW_EVERY_NS};
/// A replicated page's copies ([`gms::replica`]); a reader's read of them is
/// [`gms::reader`]'s.
pub use gms::replica::{default_replicas, replica, MAX_REPLICAS};
pub use host::PortHost;
pub use read::{Got, ReadInto, Source};
pub use store::{StoreFrames, StoreIo, UserStore, GROUP_PAGES, STORE_REQUESTS};

use completions::{Finished, Pending};

/// Capacities of the node fixed at build time (operations, background tasks, queued
/// notices); the page-frame directory and the directory are sized when a port is made.
pub const OPS: usize = 64;
pub const TASKS: usize = 128;
pub const OUTQ: usize = 128;
/// Most pages a port keeps in its local page cache by default.
pub const CACHE_PAGES: usize = 256;
/// Slots of the local page cache's table, and the most pages it can be set to keep.
const CACHE_SLOTS: usize = 8192;
pub const MAX_CACHE_PAGES: usize = PageCache::<Frame, CACHE_SLOTS>::MAX;
/// Read-ahead streams and pending fetches.
const RA_STREAMS: usize = 4;
const RA_PENDING: usize = 64;

pub type Node = GmsNode<Frame, PortHost, Heap, 16, OPS, TASKS, OUTQ>;

/// Directory entries (live and tombstones) for a node whose budget is `budget` pages when
/// nothing else is asked: twice the budget (a node's share of a cluster of equal budgets,
/// with room for imbalance and tombstones), at least 8192.
pub fn default_dir_entries(budget: usize) -> usize {
    budget.saturating_mul(2).max(8192)
}
pub type GmsRpc = Rpc<Node, Frame>;

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
    /// Messages received (requests, replies and one-way messages of every kind).
    pub messages: u64,
}

/// Run `f` on a thread with a stack big enough for GMS nodes (large const-generic tables
/// built in place) and return what it returns; a panic becomes an error.
pub fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    std::thread::Builder::new().stack_size(256 << 20).spawn(f)?.join().map_err(|_| anyhow::anyhow!("panicked"))
}

/// One GMS node on a virtual NIC.
pub struct GmsPort {
    pub rpc: GmsRpc,
    pub node: Box<Node>,
    cpu: Option<InlineNative>,
    /// Wakes the NIC's own processor thread (when not driven inline).
    doorbell: Option<Arc<std::os::fd::OwnedFd>>,
    epoch: Instant,
    /// Client operations in flight.
    pending: HashMap<OpId, (PageId, Pending)>,
    /// Reads finished but not taken (demand fetches whose page the cache did not keep).
    finished: HashMap<PageId, Finished>,
    /// Results of plain getpages, by operation.
    plain: HashMap<OpId, Finished>,
    /// Recent prefetch misses: page → when (a short-lived negative cache).
    missed: HashMap<PageId, u64>,
    /// The local page cache (oldest inserted evicted first).
    cache: Box<PageCache<Frame, CACHE_SLOTS>>,
    ra: ReadAhead<RA_STREAMS, RA_PENDING>,
    /// Where putpages go (the plan over the members that take puts, else least loaded).
    placement: Placement<{ gms::epochs::LRU_NODES }>,
    pub stats: PortStats,
    /// Completions of operations the port did not start (a store's, [`store`]); `None`
    /// until a store is driven through the port: until then such a completion is no one's,
    /// and its frame goes back at once (kept, it would make [`Self::poll_timeout`] say
    /// "now" for ever).
    store_done: Option<Vec<Completion<Frame>>>,
    /// Every finished putpage: (page, version, result), in completion order.
    pub put_log: Vec<(PageId, Version, PutResult)>,
    /// The pages this node put whose holder's NIC answers getpages of them by itself
    /// (told in the holder's `PUTDONE`): holder, version, answer-table entry.
    answers: HashMap<PageId, (u16, Version, Answer)>,
    /// getpage latencies (ns) by how they were served: 2-way, 3-way.
    pub lat_2way: Vec<u64>,
    pub lat_3way: Vec<u64>,
    /// The global LRU (epochs, plan, coordinator when this is the lowest live member).
    pub lru: Lru,
    /// When an idle [`Self::poll`] next checks the timers.
    timers_at: u64,
    /// Idle passes until [`Self::poll`] next reads the clock.
    clock_in: u32,
    /// The plan epoch under which [`Self::make_room`] found too few old pages.
    room_blocked: Option<u32>,
}

impl GmsPort {
    /// Node `at.cfg.node_id` on the NIC `at` names, storing at most `gms_cfg.budget`
    /// pages (at most what its frame region holds) and directing at most `dir_entries`
    /// pages (live entries and tombstones); both tables are allocated here.
    pub fn new(at: Attach, gms_cfg: GmsConfig, rpc_cfg: Config, dir_entries: usize) -> anyhow::Result<Self> {
        let (node_id, seed) = (at.cfg.node_id, at.seed);
        let held = gms_cfg.budget.min(at.region.len() / FRAME_BYTES as usize);
        let (frames, cpu, doorbell) = at.carve(64)?;
        let host = PortHost {
            frames,
            done: Vec::new(),
            pages_dropped: 0,
            lru_inbox: Vec::new(),
            heartbeats: Vec::new(),
            background: 0,
            landing: Default::default(),
        };
        let node = GmsNode::with_capacity(node_id, gms_cfg, host, slots_for(held), slots_for(dir_entries)).ok_or_else(
            || anyhow::anyhow!("no memory for the tables of {held} held pages and {dir_entries} directory entries"),
        )?;
        let mut port = GmsPort {
            rpc: Rpc::new(node_id, rpc_cfg),
            node: Box::new(node),
            cpu,
            doorbell,
            epoch: Instant::now(),
            pending: HashMap::default(),
            finished: HashMap::default(),
            plain: HashMap::default(),
            missed: HashMap::default(),
            cache: Box::new(PageCache::with_capacity(CACHE_PAGES)),
            ra: ReadAhead::new(readahead::Config { trigger: 2, depth: 0 }),
            placement: Placement::new(u32::MAX),
            stats: PortStats::default(),
            store_done: None,
            put_log: Vec::new(),
            answers: HashMap::default(),
            lat_2way: Vec::new(),
            lat_3way: Vec::new(),
            lru: Lru::new(node_id, LruConfig::default()),
            timers_at: 0,
            clock_in: 0,
            room_blocked: None,
        };
        port.rpc.set_secret(seed);
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

    /// Keep at most `n` pages in the local page cache (at most [`MAX_CACHE_PAGES`]).
    pub fn set_cache_pages(&mut self, n: usize) {
        let frames = &mut self.node.host.frames;
        self.cache.set_capacity(n, |f| frames.free(f));
        self.stats.cache_evictions = self.cache.evictions;
    }

    pub fn cached(&self, page: &PageId) -> Option<Version> {
        self.cache.get(page).map(|c| c.version)
    }
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }
    /// When this node's inline NIC must run again for its link's timers (frames on a
    /// wire-delay line), if ever: a caller that sleeps wakes by then.
    pub fn link_deadline(&self) -> Option<Instant> {
        self.cpu.as_ref().and_then(InlineNative::link_deadline)
    }
    /// Publish this node's inline NIC's link statistics now, for
    /// [`trapeze_vnic::nic::link_stats`] to read: an inline NIC publishes them only when it
    /// parks, and a port's caller that sleeps itself never lets it park.
    pub fn publish_link_stats(&self) {
        if let Some(c) = &self.cpu {
            c.publish_link_stats();
        }
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
            total: trapeze_runtime::FrameMem::count(h.frames.frames()),
            free: h.frames.available(),
            recv_slots: h.frames.in_slots(),
            held: self.node.held_count(),
            cache: self.cache.len(),
            kept,
            in_flight: gets + puts,
            limbo: h.frames.in_limbo(),
            armed: h.frames.armed(),
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
        self.placement.remove(n);
        self.after_input();
    }

    /// Node `n` is back (heard again after it was declared failed, or restarted): GMS
    /// forgets it first ([`gms::node::GmsNode::member_back`]); the next view readmits it.
    pub fn member_back(&mut self, n: u16) {
        let now = self.now();
        self.node.member_back(now, &mut self.rpc, n);
        self.placement.remove(n);
        self.after_input();
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
            nic_answered: self.node.host.frames.ep.counter(trapeze_firmware::iface::layout::Counter::TxAnswers),
            puts_received: g.pages_stored,
            gets_hit: self.stats.gets_hit,
            gets: self.stats.gets_hit + self.stats.gets_miss,
            p50_us: (!lat.is_empty()).then(|| lat[lat.len() / 2] as f64 / 1000.0),
            discarded: self.pages_discarded(),
            task_retries: g.task_retries,
        }
    }
}
