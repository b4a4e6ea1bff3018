// SPDX-License-Identifier: GPL-2.0-only
//! The GMS backend of the block device `/dev/gms0` ([`crate::blk`]): an adapter around
//! `gms::store`, which owns every decision about a page (identity, placement, versions,
//! retries, reads, re-replication, the volume's label and floor map). This file keeps
//! only what is the kernel's (`kernel-crate/README.md` tells how they work): **frames**
//! ([`KFrames`]: a request's own page lent to the NIC, pool frames for meta pages and
//! repairs, their bytes through [`DiskState::meta`]), the **blk-mq glue** (the FIFO from
//! `queue_rq`, [`DiskState::backlog`]; pages completed after the core lock is released,
//! [`take_finished`]) and the **counters** (the store's, published into `stats`).
//!
//! A client of the runtime: it uses `net` (its state in the [`Core`], [`DiskCore`]), `blk`
//! and `stats`, never the driver, which owns the locking and the doorbell and calls these
//! functions from blk-mq's `queue_rq`, the poll loop and the ticker.

use crate::blk::{PageIo, PAGE_BYTES};
use crate::net::pool::GROUP_FRAMES;
use crate::net::stack::{Client, Core};
use crate::net::{now_ns, Frame, KHost, KStorage, MEMBERS, OPS};
use crate::stats::STATS;
use crate::sys::boxed::Template;
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::queue::Queue;
use crate::tpz::gms::store::drive::{Frames, FramesIn};
use crate::tpz::gms::store::liveness::Event;
use crate::tpz::gms::store::{Finished, Outcome, Phase, Store, StoreConfig, StoreError, StoreStats};
use crate::tpz::netrpc::prelude::ReplyTo;
use kernel::prelude::*;

/// The runtime's core with the disk as its client (`None` until `/dev/gms0` exists).
pub(crate) type DiskCore = Core<Option<KBox<DiskState>>>;

/// Requests the store runs at once (two of them kept for its meta pages): more than GMS
/// has operation slots, as reads asked together take one for up to eight pages
/// (`GETPAGES`); [`issue`] admits a page only while its operations would find slots.
const REQUESTS: usize = 36;
/// GMS operation slots the disk leaves to others (tests, heartbeats).
const OPS_RESERVE: usize = 4;
/// Pages queued at most: blk-mq's queue depth × pages per request.
const BACKLOG: usize = 64 * 64;
/// Pages finished under the core lock, completed after it is released.
const FINISHED: usize = 1024;
/// Failures whose cause is logged (the counters count them all).
const FAILURES_LOGGED: u32 = 16;
/// How often `disk_meta_lost` is counted again: it looks at every meta page's records, too
/// much for every batch of completions.
const META_LOST_NS: u64 = 50_000_000;
pub(crate) const MAX_READAHEAD: u32 = crate::tpz::gms::store::ahead::MAX_AHEAD as u32;

type DiskStore = Store<PageIo, Frame, KStorage, MEMBERS, REQUESTS, OPS>;

/// The store's configuration in the kernel; `gms_disk` sets replicas, degraded writes,
/// the read routes and read-ahead from the parameters.
pub(crate) const STORE_CONFIG: StoreConfig =
    StoreConfig { replicas: 1, page_bytes: PAGE_BYTES as u32, ..StoreConfig::DEFAULT };
/// The store is ~4 KiB with its request table: made by constant evaluation and copied to
/// the heap ([`Template`]), never on the stack.
static STORE_TEMPLATE: Template<DiskStore> =
    Template::new(Store::unloaded(STORE_CONFIG, KVVec::new(), KVVec::new(), KVVec::new()));

/// Disk counters (the store's own are published into `stats`).
pub(crate) struct DiskCounters {
    pub(crate) reads_zero: u64,
    pub(crate) reads_ok: u64,
    pub(crate) writes_ok: u64,
    pub(crate) errors: u64,
    /// Of the errors, writes no member had room for (`ENOSPC`).
    pub(crate) full: u64,
    /// Of the errors, writes refused for want of live members (`gms_replicas=`).
    pub(crate) too_few: u64,
}

/// A queue of the disk's, its slots off the stack (kvmalloc'd).
type KQueue<T> = Queue<KVVec<Option<T>>>;

/// The disk's state on the host (under the core spinlock).
pub(crate) struct DiskState {
    store: KVBox<DiskStore>,
    /// Pages the store has not taken yet, oldest first: (`page`, the page, a write?).
    backlog: KQueue<(u64, PageIo, bool)>,
    /// A page of bytes: a meta page on its way to or from a pool frame.
    meta: KVVec<u8>,
    /// The store's counters as last published into `stats`.
    published: StoreStats,
    /// Pages finished (and how) and not yet completed: `PageIo::complete` ends the block
    /// request, whose completion path may submit I/O again (stacked devices), so it never
    /// runs under the core spinlock ([`take_finished`] hands it out after).
    finished: KQueue<(PageIo, Result)>,
    /// The load's refusal was logged (once: every I/O fails with it).
    refusal_told: bool,
    /// When `disk_meta_lost` is counted next ([`META_LOST_NS`]).
    meta_lost_at: u64,
    pub(crate) counters: DiskCounters,
}

/// The disk's parameters, as `gms_disk` read them.
pub(crate) struct DiskParams {
    pub(crate) pages: u64,
    pub(crate) identity: u64,
    pub(crate) me: u16,
    /// [`STORE_CONFIG`] with the parameters' replicas, degraded writes, read routes and
    /// read-ahead.
    pub(crate) store: StoreConfig,
}

impl DiskState {
    /// The disk of `p`, over the live members `members` (this node excluded).
    pub(crate) fn new(p: &DiskParams, members: &[u16]) -> Result<KBox<Self>> {
        let mut store = STORE_TEMPLATE.copy_kv()?;
        if let Err(e) = store.load(p.store, p.identity, p.me, p.pages, members) {
            pr_err!("/dev/gms0: the store refused its configuration: {:?}\n", e);
            return Err(EINVAL);
        }
        let state = DiskState {
            store,
            backlog: Queue::over(slots(BACKLOG)?),
            meta: KVVec::from_elem(0u8, PAGE_BYTES, GFP_KERNEL)?,
            published: StoreStats::ZERO,
            finished: Queue::over(slots(FINISHED)?),
            refusal_told: false,
            meta_lost_at: 0,
            counters: DiskCounters { reads_zero: 0, reads_ok: 0, writes_ok: 0, errors: 0, full: 0, too_few: 0 },
        };
        Ok(KBox::new(state, GFP_KERNEL)?)
    }

    /// A membership change (the ticker's failure detection and rejoins).
    pub(crate) fn handle_member(&mut self, now: u64, event: Event) {
        self.store.handle_member(now, event);
    }

    /// When the store next has work ([`issue`] then).
    pub(crate) fn poll_timeout(&self) -> Option<u64> {
        self.store.poll_timeout()
    }

    fn fail(&mut self, io: PageIo) {
        self.counters.errors += 1;
        self.finish(io, Err(EIO));
    }

    /// Finish a page: completed once the core lock is released.
    fn finish(&mut self, io: PageIo, r: Result) {
        // Full cannot happen (more than every page queued or in flight); completing here
        // is the lesser evil.
        if let Err((io, r)) = self.finished.push_back((io, r)) {
            io.complete(r);
        }
    }

    /// A request the store ended (or refused: `outcome` is its failure).
    fn ended(&mut self, io: PageIo, outcome: Outcome) {
        let r = match outcome {
            Outcome::Written { .. } => {
                self.counters.writes_ok += 1;
                Ok(())
            }
            Outcome::Read { .. } => {
                self.counters.reads_ok += 1;
                Ok(())
            }
            Outcome::Zero => {
                self.counters.reads_zero += 1;
                io.fill_zero()
            }
            Outcome::Failed(e) => Err(self.failed(e)),
        };
        if r.is_err() && !matches!(outcome, Outcome::Failed(_)) {
            self.counters.errors += 1;
        }
        self.finish(io, r);
    }

    /// Count and explain a failure (the store's words, `gms::store::StoreError`'s
    /// `Display`, with the parameters that name it here); its errno.
    fn failed(&mut self, e: StoreError) -> Error {
        self.counters.errors += 1;
        match e {
            // The load was refused: every I/O fails with it, told once.
            StoreError::IdentityInUse { .. } | StoreError::NotThisVolume | StoreError::VersionsExhausted => {
                if !core::mem::replace(&mut self.refusal_told, true) {
                    pr_err!("/dev/gms0: gms_disk_id={:#x} refused: {e}; every I/O fails\n", self.store.identity());
                }
            }
            StoreError::TooFewMembers => {
                self.counters.too_few += 1;
                let r = self.store.config().replicas;
                log_failure(format_args!("{e} (gms_replicas={r}; gms_degraded_writes=1 stores a write with fewer)"));
            }
            StoreError::NoSpace => {
                self.counters.full += 1;
                log_failure(format_args!("{e} (ENOSPC)"));
            }
            e => match self.store.load_waits_for() {
                w if w.is_empty() => log_failure(format_args!("{e}")),
                w => log_failure(format_args!(
                    "{e}: the disk is still loading, waiting for node(s) {w}, declared failed before they \
                     answered (rmmod and insmod start without a member gone for good)"
                )),
            },
        }
        if e == StoreError::NoSpace {
            ENOSPC
        } else {
            EIO
        }
    }

    /// Fail every page queued or held by the store (teardown). The operations in flight
    /// keep their frames until GMS finishes them.
    pub(crate) fn fail_all(&mut self, host: &mut KHost) -> usize {
        let mut n = 0;
        while let Some((_, io, _)) = self.backlog.pop_front() {
            self.fail(io);
            n += 1;
        }
        self.store.shut(StoreError::NotSent);
        n + self.drain(host, now_ns())
    }

    /// Hand on what the store finished; how many requests.
    fn drain(&mut self, host: &mut KHost, now: u64) -> usize {
        let mut n = 0;
        while let Some(f) = self.store.poll_done() {
            match f {
                Finished::Request { io, outcome } => {
                    self.ended(io, outcome);
                    n += 1;
                }
                Finished::Scratch(frame) => give_back(host, frame),
                // A copy read ahead: its frame's bytes are the page.
                Finished::Copy { io, frame, version } => {
                    let meta = &mut self.meta[..];
                    let copied = host.frame(frame).is_some_and(|b| b.read(0, meta).is_ok()) && io.fill(0, meta).is_ok();
                    give_back(host, frame);
                    if copied {
                        self.ended(io, Outcome::Read { version });
                    } else {
                        self.fail(io);
                    }
                    n += 1;
                }
            }
        }
        self.publish(now);
        n
    }

    /// The store's counters into `stats` (what changed since the last call).
    fn publish(&mut self, now: u64) {
        let (s, p) = (self.store.stats, &mut self.published);
        STATS.disk_replica_fallbacks.add(s.fallbacks - p.fallbacks);
        STATS.disk_retries.add(s.retries - p.retries);
        STATS.disk_busy_puts.add(s.busy_puts - p.busy_puts);
        STATS.disk_under_replicated.add(s.under_replicated - p.under_replicated);
        STATS.disk_rereplicated.add(s.repaired - p.repaired);
        STATS.disk_rereplicate_passes.add(s.repair_passes - p.repair_passes);
        STATS.lru_puts_by_plan.add(s.puts_by_plan - p.puts_by_plan);
        STATS.disk_read_ahead.add(s.ahead_reads - p.ahead_reads);
        STATS.disk_read_ahead_hits.add(s.ahead_hits - p.ahead_hits);
        STATS.disk_top_asks.add(s.top_asks - p.top_asks);
        STATS.disk_stale_maps.add(s.stale_maps - p.stale_maps);
        STATS.disk_epochs_refused.add(s.epochs_refused - p.epochs_refused);
        STATS.disk_lost_maps.add(s.lost_maps - p.lost_maps);
        STATS.disk_getpages.add(s.group_gets - p.group_gets);
        STATS.disk_getpages_pages.add(s.group_reads - p.group_reads);
        STATS.disk_getpages_missed.add(s.group_misses - p.group_misses);
        if s.repair_passes != p.repair_passes {
            STATS.disk_replicas_short.set(s.repair_short);
        }
        *p = s;
        STATS.disk_ready.set(u64::from(self.store.phase() == Phase::Ready));
        if now >= self.meta_lost_at {
            self.meta_lost_at = now.saturating_add(META_LOST_NS);
            STATS.disk_meta_lost.set(self.store.meta_lost());
        }
    }
}

/// `n` free slots for a queue of the disk's.
fn slots<T>(n: usize) -> Result<KVVec<Option<T>>> {
    let mut v = KVVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(None, GFP_KERNEL)?;
    }
    Ok(v)
}

/// Log why a request failed: the first [`FAILURES_LOGGED`] after the load.
fn log_failure(why: core::fmt::Arguments<'_>) {
    static LOGGED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    if LOGGED.fetch_add(1, core::sync::atomic::Ordering::Relaxed) < FAILURES_LOGGED {
        pr_warn!("/dev/gms0: a request failed: {}\n", why);
    }
}

/// `f` armed for a reply, or released (a lent page given back) if it cannot be.
fn armed(host: &mut KHost, f: Frame) -> Option<ReplyTo<Frame>> {
    let reply = host.arm(f);
    if reply.is_none() {
        host.release(f);
    }
    reply
}

/// A frame the store or a completion is done with: disarmed if armed, and freed (a lent
/// page given back) once the sends posted so far are reaped — a put's send may still be
/// in the ring when its answer timed out.
fn give_back(host: &mut KHost, f: Frame) {
    if host.disarm_frame(f) {
        host.retire(f);
    }
}

/// The kernel's frames as the store's completions need them.
struct KFrames<'a> {
    host: &'a mut KHost,
    meta: &'a mut [u8],
}

impl Frames<PageIo, Frame> for KFrames<'_> {
    const PAGE_BYTES: u32 = PAGE_BYTES as u32;
    fn lend(&mut self, io: &PageIo, _page: PageId, _version: Version) -> Option<Frame> {
        self.host.lend(io)
    }
    /// `io`'s page lent to the NIC and armed for a getpage's reply.
    fn arm(&mut self, io: &PageIo) -> Option<ReplyTo<Frame>> {
        let f = self.host.lend(io)?;
        armed(self.host, f)
    }
    fn scratch(&mut self) -> Option<ReplyTo<Frame>> {
        self.host.solicit()
    }
    /// The requests' pages lent to the NIC as one group, armed in one IPT entry for a
    /// `GETPAGES` reply (the NIC scatters it page by page); given back as one.
    fn group(&mut self, ios: &[&PageIo]) -> Option<ReplyTo<Frame>> {
        let n = ios.len();
        if n > GROUP_FRAMES || !self.host.can_lend(n) {
            return None;
        }
        let mut lent = [0 as Frame; GROUP_FRAMES];
        let mut k = 0;
        while let Some(f) = ios.get(k).and_then(|io| self.host.lend(io)) {
            lent[k] = f;
            k += 1;
        }
        // Every page lent and grouped; else the pages lent so far are given back.
        let g = if k == n { self.host.group(&lent[..n]) } else { None };
        let Some(g) = g else {
            lent[..k].iter().for_each(|&f| self.host.release(f));
            return None;
        };
        // Releasing the group gives its pages back.
        armed(self.host, g)
    }
    fn give_back(&mut self, frame: Frame) {
        give_back(self.host, frame);
    }
    fn fill(&mut self, _page: PageId, _version: Version, write: impl FnOnce(&mut [u8])) -> Option<Frame> {
        let f = self.host.alloc()?;
        write(self.meta);
        if self.host.frame(f).is_some_and(|b| b.write(0, self.meta).is_ok()) {
            Some(f)
        } else {
            self.host.release(f);
            None
        }
    }
    fn bytes(&mut self, frame: &Frame, read: impl FnOnce(&[u8])) {
        if !self.host.frame(*frame).is_some_and(|b| b.read(0, self.meta).is_ok()) {
            // Not a pool frame: no bytes the store can take for a label or a map.
            self.meta.fill(0);
        }
        read(self.meta);
    }
}

/// The kernel's frames as the store's loop reaches them: through the node's host, with
/// the disk's page buffer for meta pages.
struct KFramesIn<'m> {
    meta: &'m mut [u8],
}

impl FramesIn<PageIo, Frame, KHost> for KFramesIn<'_> {
    fn frames<'a>(&'a mut self, host: &'a mut KHost) -> impl Frames<PageIo, Frame> + 'a {
        KFrames { host, meta: &mut self.meta[..] }
    }
}

/// The disk's operations: their completions, after each batch.
impl Client for Option<KBox<DiskState>> {
    fn settle(core: &mut DiskCore) {
        let Core { node, client, .. } = core;
        let Some(d) = client.as_mut() else { return };
        let now = now_ns();
        for slot in 0..OPS {
            let Some(op) = node.host.done_op(slot) else { continue };
            if d.store.op_frame(op).is_none() {
                continue;
            }
            if let Some(done) = node.host.take_done(op) {
                complete(d, &mut node.host, now, &done);
            }
        }
        d.drain(&mut node.host, now);
    }
}

/// A completion of one of the store's operations.
fn complete(d: &mut DiskState, host: &mut KHost, now: u64, done: &Completion<Frame>) {
    if let OpResult::Put(PutResult::Stored { target }) = done.result {
        if let Some(c) = crate::stats::PUTS_TO.get(usize::from(target)) {
            c.inc();
        }
    }
    let DiskState { store, meta, .. } = d;
    store.complete(now, done, &mut KFrames { host, meta: &mut meta[..] });
}

/// Move up to `out.len()` pages that finished into `out` (under the core lock); the
/// caller completes them once the lock is released. How many.
pub(crate) fn take_finished(core: &mut DiskCore, out: &mut [Option<(PageIo, Result)>]) -> usize {
    let Some(d) = core.client.as_mut() else { return 0 };
    let n = d.finished.len().min(out.len());
    for slot in &mut out[..n] {
        *slot = d.finished.pop_front();
    }
    n
}

/// A disk page from blk-mq (atomic context, core lock held): queued for the store, and
/// the queue issued after the request's `last` page, reads and writes alike: one pass of
/// the store (and one doorbell) per request, not per page. `closing`: the NIC is going
/// away, the page fails. Whether anything was sent (the caller flushes and rings the
/// doorbell).
pub(crate) fn submit(c: &mut DiskCore, page: u64, io: PageIo, write: bool, closing: bool, last: bool) -> bool {
    let Some(d) = c.client.as_mut() else {
        io.complete(Err(EIO));
        return false;
    };
    if closing {
        d.fail(io);
        return false;
    }
    if let Err((_, io, _)) = d.backlog.push_back((page, io, write)) {
        d.fail(io);
    }
    last && issue(c, now_ns())
}

/// Hand the store the queued pages it and GMS have room for, and send everything it
/// wants sent. Whether anything was sent (flush after).
pub(crate) fn issue(c: &mut DiskCore, now: u64) -> bool {
    let Core { node, rpc, lru, client } = c;
    let Some(d) = client.as_mut() else { return false };
    let d = &mut **d;
    d.store.handle_timeout(now);
    let replicas = usize::from(d.store.config().replicas);
    let mut sent = false;
    loop {
        let DiskState { store, meta, .. } = &mut *d;
        // The store's own loop (`gms::store::drive`); a getpage answered inside a call
        // completes through the host and is handed in when the core settles.
        sent |= store.issue(now, node, rpc, lru, &mut KFramesIn { meta: &mut meta[..] });
        // The next pages, while every replica of each finds an operation slot and a lend
        // beside those admitted before it: reads admitted together are asked together
        // where one member holds them (`GETPAGES`, `gms::store::group`).
        // With read-ahead on, the store stops taking them at half its table, so that it
        // reads ahead in the rest (`takes_user_request`, `gms::store::ahead`).
        let mut admitted = 0;
        loop {
            let need = admitted + replicas;
            let room = node.ops_in_use() + OPS_RESERVE + need <= OPS && node.host.can_lend(need);
            if !room || !d.store.takes_user_request() {
                break;
            }
            let Some((page, io, write)) = d.backlog.pop_front() else { break };
            let r = if write { d.store.write(now, page, io) } else { d.store.read(now, page, io) };
            match r {
                Ok(_) => admitted += if write { replicas } else { 1 },
                Err((io, StoreError::Busy)) => {
                    // Back in the slot it was just taken from: never full.
                    let _ = d.backlog.push_front((page, io, write));
                    break;
                }
                Err((io, e)) => d.ended(io, Outcome::Failed(e)),
            }
        }
        if admitted == 0 {
            break;
        }
    }
    d.drain(&mut node.host, now);
    if let Phase::Refused(e) = d.store.phase() {
        // Nothing queued will ever be served.
        while let Some((_, io, _)) = d.backlog.pop_front() {
            d.ended(io, Outcome::Failed(e));
        }
    }
    sent
}
