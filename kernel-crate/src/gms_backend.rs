// SPDX-License-Identifier: GPL-2.0-only
//! The GMS backend of the block device `/dev/gms0` (K1b's [`crate::blk`]): disk page `p`
//! (4 KiB) is GMS page `(DISK_SPACE, p)`, stored in the other members' memory.
//!
//! * **Replicas** (`gms_replicas=`, `gms::replica`): each page is kept as `r` GMS pages
//!   (replica `k` in its own space) on `r` distinct members, with a version each
//!   ([`DiskState::versions`]) and the member holding it ([`DiskState::targets`]).
//! * **write** → putpages of every replica at once (each with its own token of the page,
//!   `PageIo::split`, so the write costs one round trip), write-through: the page's bytes go into a frame and one-way to a target
//!   member chosen by `gms::placement` (the global LRU's plan, in proportion to the
//!   members' free frames and oldest pages; the least loaded target before the first
//!   plan, or when the member drawn does not take puts), avoiding every member that may
//!   hold another replica's newest data (`sites`); the write completes when every replica is stored and named
//!   by its directory (`PutResult::Stored`). A target that refuses (its budget full) is
//!   skipped for `gms::placement::REFUSED_NS` and the replica put again at another; only
//!   when every target refused lately, [`FULL_AFTER`] rounds running, does the write
//!   fail, with `ENOSPC` (the request
//!   ends `BLK_STS_NOSPC`: the cluster is full, nothing was silently dropped). A put that got no
//!   answer in time or met a membership change (`Failed`, `WrongView`: the outcome is
//!   unknown) is put again for up to [`WRITE_RETRY_NS`] (a target still in an older view,
//!   or busy with an older copy of the page, after [`RETRY_DELAY_NS`]); any other failure
//!   is an I/O error.
//!   With fewer live members than replicas (after failures) the write completes with the
//!   copies it could place (counted, `disk_under_replicated`), and the replicas it could
//!   not place move on a version, so an older copy of them is never read as current.
//!   Each put bumps its replica's version; a load's versions start at the wall clock
//!   ([`DiskState::version_base`]), above every earlier load's, so the copies an earlier
//!   load left in the cluster are never taken for the new writes.
//! * **read** → a page this load has not written is looked for once on every member
//!   (`recover`: an earlier load of the module may have written it; found, its version
//!   and holder are this load's from then on), and reads as zeros (without the network
//!   after that) if no member holds it; otherwise getpage of replica 0 into the request's
//!   page — sent straight to the member it was put to
//!   (`GmsNode::getpage_hinted`: two messages, where asking the directory takes three
//!   when it is a third member; a miss there asks the directory) unless
//!   `gms_disk_direct_reads=0`, and answered by that member's NIC without its host when
//!   the put's `PUTDONE` named an entry of its answer table (`DiskState::answers`,
//!   `GmsNode::getpage_hinted`; `gms_nic_answers=0` turns that off): a hit at the
//!   version of that replica's last write
//!   (or newer) fills the page. A getpage that got no answer (a lost or late message, a
//!   malformed reply) is tried again, up to [`MAX_TRIES`] tries; a miss (no node holds
//!   it) or an older version goes on to the next replica (`disk_replica_fallbacks`), and
//!   only when the last one misses is it an I/O error (every copy is gone).
//! * Nothing waits: `read`/`write` (blk-mq's `queue_rq`, atomic context) queue the page
//!   and issue what GMS has room for (a read after its request's last page: the
//!   request's reads that one member holds go as one `GETPAGES`, [`group`]); completions arrive on the receive path (the hard
//!   interrupt, core spinlock held) and wait in the runtime's host until the driver settles the
//!   client after the batch ([`Client::settle`], still under the lock), which fills the
//!   page and marks it finished; `PageIo::complete` runs once the lock is released
//!   ([`take_finished`]: ending a block request may submit I/O again). The backlog is
//!   issued after every input. GMS's own deadline fails an operation whose member does
//!   not answer; blk-mq's timer is the last resort.
//! * **Read-ahead** (`gms_disk_readahead=N` > 0): reads go through `gms::readahead`; after
//!   two sequential page reads the next N written pages are prefetched (getpages) into a
//!   small page cache of frames (`gms::cache`, [`CACHE_PAGES`]); a read finds its page there, or waits
//!   for the fetch of it that is pending (parked, then filled from the same frame). A write
//!   drops the page from the cache; a prefetch that returns an older version than the last
//!   write is not cached. Readers of a prefetch that failed are queued as plain reads.
//! * Teardown (remove): [`DiskState::fail_all`] completes every page still queued or in
//!   flight with an error, before the disk goes.
//!
//! A client of the runtime: it uses `net` (the [`Core`] it keeps its state in, as
//! [`DiskCore`]), `blk` and `stats`, never the driver, which owns the locking and the
//! doorbell and calls these functions from blk-mq's `queue_rq`, the poll loop and the
//! ticker.

use crate::blk::PageIo;
use crate::net::stack::{Client, Core};
use crate::net::{now_ns, Frame, MEMBERS, OPS};
use crate::sys::boxed::Template;
use crate::sys::dma::DmaBuf;
use crate::tpz::gms::cache::{Cached, PageCache};
use crate::tpz::gms::placement::Placement;
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::readahead::{self, Decision, ReadAhead};
use crate::tpz::gms::replica::MAX_REPLICAS;
use kernel::prelude::*;

mod backlog;
mod complete;
mod group;
mod issue;
mod recover;
mod rereplicate;
mod sites;
use backlog::Waiting;
use complete::{complete, fill_from, write_failed};
pub(crate) use issue::issue;

/// The runtime's core with the disk as its client (`None` until `/dev/gms0` exists).
pub(crate) type DiskCore = Core<Option<KBox<DiskState>>>;

/// The disk's operations: their completions, after each batch.
impl Client for Option<KBox<DiskState>> {
    fn settle(core: &mut DiskCore) {
        let Core { node, client, .. } = core;
        let slots = client.as_ref().map_or(0, |d| d.in_flight.len());
        for slot in 0..slots {
            let Some(op) = client.as_ref().and_then(|d| d.in_flight[slot].as_ref()).map(|f| f.op) else { continue };
            if let Some(done) = node.host.take_done(op) {
                complete(&mut node.host, client, &done);
            }
        }
    }
}

/// The GMS space of the disk's pages.
pub(crate) const DISK_SPACE: u64 = 0x6d73_6730; // "gms0"
/// Client operations the disk leaves to others (tests, heartbeats).
const OPS_RESERVE: usize = 4;
/// Pages queued at most: blk-mq's queue depth × pages per request.
const BACKLOG: usize = 64 * 64;
/// Read-ahead: pages kept in the disk's page cache, readers parked on pending fetches,
/// streams and pending fetches tracked, and the deepest read-ahead.
pub(crate) const CACHE_PAGES: usize = 64;
/// Slots of the cache's table (it keeps at most 7/8 of them).
const CACHE_SLOTS: usize = 128;
static CACHE_TEMPLATE: Template<PageCache<Frame, CACHE_SLOTS>> = Template::new(PageCache::new());
/// Read-ahead's detectors and pending table (~1.5 KiB), likewise; `new` sets the depth.
static RA_TEMPLATE: Template<ReadAhead<RA_STREAMS, RA_PENDING>> =
    Template::new(ReadAhead::new(readahead::Config { trigger: 2, depth: 0 }));
const WAITERS: usize = 256;
/// Pages finished under the core lock, completed after it is released.
const FINISHED: usize = 1024;
/// Tries of a read whose getpage failed for want of an answer (a lost or late message, a
/// membership change) before it goes on to the next replica, or ends with an I/O error.
const MAX_TRIES: u8 = 3;
/// How long a write's replica is put again after a put that got no answer, met another
/// view, or found its target busy with an older copy: longer than a dead member takes to
/// be declared failed (then it is no longer a target) and the survivors to agree on the
/// view, shorter than blk-mq's 30 s deadline.
const WRITE_RETRY_NS: u64 = 12_000_000_000;
/// The wait before a put that met another view or a busy target goes again.
const RETRY_DELAY_NS: u64 = 100_000_000;
/// Rounds in which every target refused a write's replica 0 before the cluster counts as
/// full (`ENOSPC`), [`RETRY_DELAY_NS`] apart: a refusal also means "busy with an older copy
/// of the page", as every target can be for a moment after a failure (a copy registering
/// with a directory node that died is refused over until the view changes).
const FULL_AFTER: u8 = 3;
/// Pages waiting out [`RETRY_DELAY_NS`] at most (more go again at once).
const DELAYED: usize = 64;
/// Write failures whose cause is logged (the counters count them all).
const WRITE_FAILURES_LOGGED: u32 = 16;
const RA_STREAMS: usize = 4;
const RA_PENDING: usize = 64;
pub(crate) const MAX_READAHEAD: u32 = 32;

/// Disk counters.
pub(crate) struct DiskCounters {
    pub(crate) reads_zero: u64,
    /// Reads served from the read-ahead cache, directly or after waiting for a fetch.
    pub(crate) reads_cache: u64,
    pub(crate) prefetches: u64,
    pub(crate) reads_ok: u64,
    pub(crate) writes_ok: u64,
    pub(crate) errors: u64,
    /// Of the errors, writes no member had room for (`ENOSPC`).
    pub(crate) full: u64,
    /// Pages an earlier load wrote, found by this one ([`recover`]).
    pub(crate) recovered: u64,
    /// Pages tried again after an operation failed for want of an answer.
    pub(crate) retries: u64,
}

/// A page of a request that GMS is working on.
struct InFlight {
    op: OpId,
    /// Tries before this one (a page whose message was lost is tried again).
    tries: u8,
    /// A write's replica: when its first put failed (ns; 0: none failed yet).
    since: u64,
    /// `None` once teardown failed the page (the operation still owns `frame`).
    io: Option<PageIo>,
    frame: Frame,
    write: bool,
    /// The member a write was put to.
    target: u16,
    /// Which replica of the page this operation writes or reads.
    replica: u8,
    version: u64,
    /// Read-ahead recorded this fetch as pending (report it to `ra.complete`).
    ra: bool,
    /// A prefetch: the page goes into the cache.
    prefetch: bool,
    /// Re-replication's fetch or put, not a request's page.
    rerep: Option<rereplicate::Rerep>,
    /// A read sent straight to the replica's holder (`GmsNode::getpage_hinted`): its miss
    /// sends the read to the page's directory.
    hinted: bool,
    /// A probe of [`recover`] (its `Waiting::probe` and `found`; 0: none).
    probe: u32,
    found: bool,
    /// A `GETPAGES` of several pages ([`group`]): their requests are in
    /// [`DiskState::groups`] at this operation's slot.
    group: bool,
}

impl InFlight {
    /// Operation `op` on `frame`: a put (`write`) or a get of `replica` at `version`, its
    /// first try, for no request's page (the caller sets what differs).
    fn new(op: OpId, frame: Frame, write: bool, replica: u8, version: u64) -> Self {
        InFlight {
            op,
            tries: 0,
            since: 0,
            io: None,
            frame,
            write,
            target: 0,
            replica,
            version,
            ra: false,
            prefetch: false,
            rerep: None,
            hinted: false,
            probe: 0,
            found: false,
            group: false,
        }
    }
}

/// No replica put yet.
const NO_TARGET: u16 = u16::MAX;

/// The disk's state on the host (under the core spinlock).
pub(crate) struct DiskState {
    /// Copies kept of each page (`gms::replica`), on distinct members.
    replicas: u8,
    /// Version of each replica's last write, at `page * replicas + k` (0: never written).
    versions: KVVec<u64>,
    /// Pages this load knows, a bit each: written by it, or looked for in the cluster
    /// ([`recover`]); a page with no version and not known is looked for when first read.
    known: KVVec<u64>,
    /// Where this load's versions start: the wall clock at load, in ns. The cluster may
    /// still hold the pages an earlier load of the module wrote, at their versions: a
    /// write that reused one would be taken for a duplicate of the old copy (kept, and
    /// acknowledged) or refused as older. Versions since the load's time are above every
    /// earlier load's (each of which wrote a page fewer times than ns went by).
    version_base: u64,
    /// The member each replica was last put to, at the same index ([`NO_TARGET`]: none).
    targets: KVVec<u16>,
    /// Where that member's NIC answers getpages of the replica by itself (its `PUTDONE`
    /// said; key 0: it does not), at the same index: reads name it (one-sided reads).
    answers: KVVec<Answer>,
    /// Where else each replica's newest data may be ([`sites`]), at the same index.
    sites: KVVec<sites::Sites>,
    /// By GMS operation slot.
    in_flight: KVec<Option<InFlight>>,
    /// The pages of each slot's `GETPAGES` ([`group`]), in its mask's order, and of the
    /// one being formed.
    groups: KVec<group::Pages>,
    forming: group::Pages,
    /// Pages waiting for an operation slot or a frame: a ring.
    backlog: KVVec<Option<Waiting>>,
    /// Writes going again after [`RETRY_DELAY_NS`]: (when, the page).
    delayed: KVec<Option<(u64, Waiting)>>,
    /// Re-replication: where its scan goes on (`None`: no member failed since it ended),
    /// and the copies fetched, waiting for their put.
    rerep_from: Option<u64>,
    fetched: KVec<Option<rereplicate::Fetched>>,
    /// Lost replicas this pass met, passes left, and when the next pass may start (ns).
    rerep_short: u64,
    rerep_passes_left: u8,
    rerep_not_before: u64,
    head: usize,
    queued: usize,
    /// Where puts go: the global LRU's plan over the targets that take puts.
    placement: Placement<MEMBERS>,
    pub(crate) counters: DiskCounters,
    /// Read-ahead (depth 0: off), its cache and the readers parked on pending fetches.
    ra: KBox<ReadAhead<RA_STREAMS, RA_PENDING>>,
    ra_on: bool,
    /// Reads go straight to the member a replica was put to (`gms_disk_direct_reads=1`,
    /// the default), not through the page's directory node (three messages when the
    /// directory is a third member).
    pub(crate) direct_reads: bool,
    /// Reads name the holder's NIC answer-table entry (`gms_nic_answers=1`, the default).
    pub(crate) nic_answers: bool,
    cache: KBox<PageCache<Frame, CACHE_SLOTS>>,
    waiting: KVec<Option<(u64, PageIo)>>,
    /// Pages finished (result: ok?) and not yet completed: `PageIo::complete` ends the
    /// block request, whose completion path may submit I/O again (stacked devices), so it
    /// never runs under the core spinlock ([`take_finished`] hands it out after).
    finished: KVec<Option<(PageIo, Result)>>,
    nfinished: usize,
}

impl DiskState {
    /// A disk of `pages` pages putting `replicas` copies of each to `targets` (the other
    /// members), reading `depth` pages ahead (0: no read-ahead).
    /// On the heap (the state is ~2 KiB; the core holding it is moved while probe runs).
    #[inline(never)]
    pub(crate) fn new(pages: u64, targets: &[u16], replicas: u8, depth: u32) -> Result<KBox<Self>> {
        if targets.is_empty() || targets.len() > MEMBERS || !(1..=MAX_REPLICAS).contains(&replicas) {
            return Err(EINVAL);
        }
        let slots = usize::try_from(pages).ok().and_then(|p| p.checked_mul(usize::from(replicas))).ok_or(EINVAL)?;
        // ~10 KiB: copied from the module image, not built on the stack.
        let mut cache = CACHE_TEMPLATE.copy()?;
        cache.set_capacity(if depth > 0 { CACHE_PAGES } else { 0 }, |_| {});
        let mut placement = Placement::new(u32::MAX);
        placement.set_targets(targets.iter().copied());
        let mut in_flight = KVec::with_capacity(OPS, GFP_KERNEL)?;
        let mut groups = KVec::with_capacity(OPS, GFP_KERNEL)?;
        for _ in 0..OPS {
            in_flight.push(None, GFP_KERNEL)?;
            groups.push(group::Pages::NONE, GFP_KERNEL)?;
        }
        // A write queues one entry per replica.
        let mut backlog = KVVec::with_capacity(BACKLOG * usize::from(replicas), GFP_KERNEL)?;
        for _ in 0..BACKLOG * usize::from(replicas) {
            backlog.push(None, GFP_KERNEL)?;
        }
        let mut delayed = KVec::with_capacity(DELAYED, GFP_KERNEL)?;
        for _ in 0..DELAYED {
            delayed.push(None, GFP_KERNEL)?;
        }
        let mut fetched = KVec::with_capacity(rereplicate::IN_FLIGHT, GFP_KERNEL)?;
        for _ in 0..rereplicate::IN_FLIGHT {
            fetched.push(None, GFP_KERNEL)?;
        }
        let mut waiting = KVec::with_capacity(WAITERS, GFP_KERNEL)?;
        for _ in 0..WAITERS {
            waiting.push(None, GFP_KERNEL)?;
        }
        let depth = depth.min(MAX_READAHEAD);
        let mut ra = RA_TEMPLATE.copy()?;
        let config = readahead::Config { depth, ..ra.config() };
        ra.set_config(config);
        let mut finished = KVec::with_capacity(FINISHED, GFP_KERNEL)?;
        for _ in 0..FINISHED {
            finished.push(None, GFP_KERNEL)?;
        }
        let state = Self {
            replicas,
            versions: KVVec::from_elem(0u64, slots, GFP_KERNEL)?,
            known: KVVec::from_elem(0u64, usize::try_from(pages.div_ceil(64)).map_err(|_| EINVAL)?, GFP_KERNEL)?,
            version_base: crate::sys::wall_clock_ns(),
            targets: KVVec::from_elem(NO_TARGET, slots, GFP_KERNEL)?,
            answers: KVVec::from_elem(Answer::default(), slots, GFP_KERNEL)?,
            sites: KVVec::from_elem(sites::Sites::NONE, slots, GFP_KERNEL)?,
            in_flight,
            groups,
            forming: group::Pages::NONE,
            backlog,
            delayed,
            rerep_from: None,
            fetched,
            rerep_short: 0,
            rerep_passes_left: 0,
            rerep_not_before: 0,
            head: 0,
            queued: 0,
            placement,
            counters: DiskCounters {
                reads_zero: 0,
                reads_cache: 0,
                prefetches: 0,
                reads_ok: 0,
                writes_ok: 0,
                errors: 0,
                full: 0,
                recovered: 0,
                retries: 0,
            },
            ra,
            ra_on: depth > 0,
            direct_reads: true,
            nic_answers: true,
            cache,
            waiting,
            finished,
            nfinished: 0,
        };
        Ok(KBox::new(state, GFP_KERNEL)?)
    }

    /// Stop putting to `node` (declared failed); the last target stays. With replicas,
    /// re-replication scans the disk for the ones `node` held.
    pub(crate) fn drop_target(&mut self, node: u16) {
        if self.placement.targets().nth(1).is_some() {
            self.placement.remove(node);
        }
        if self.replicas > 1 {
            self.rerep_passes_left = rereplicate::PASSES;
            self.start_rereplication(0);
        }
    }

    /// Member `node` is back (admitted again after it was declared failed, or restarted):
    /// a put target again. The copies it held are gone (a restart lost them; a failure
    /// dropped them from their directories), so replicas still naming it count as not
    /// placed, and re-replication makes them again, on it or on another member.
    pub(crate) fn rejoined(&mut self, node: u16) {
        self.forget_sites(node);
        let mut all = [NO_TARGET; MEMBERS];
        let mut n = 0;
        for t in Iterator::chain(self.placement.targets(), core::iter::once(node)) {
            if let Some(slot) = all.get_mut(n) {
                *slot = t;
                n += 1;
            }
        }
        self.placement.set_targets(all[..n].iter().copied());
        if self.replicas > 1 {
            self.rerep_passes_left = rereplicate::PASSES;
            self.start_rereplication(0);
        }
    }

    /// Whether `node` is still a put target (not declared failed).
    fn live(&self, node: u16) -> bool {
        node != NO_TARGET && self.placement.targets().any(|t| t == node)
    }

    /// Where replica `k` of `page` keeps its version and target (`None`: past the disk).
    fn at(&self, page: u64, k: u8) -> Option<usize> {
        let r = usize::from(self.replicas);
        let i = usize::try_from(page).ok()?.checked_mul(r)?.checked_add(usize::from(k))?;
        (usize::from(k) < r && i < self.versions.len()).then_some(i)
    }

    /// The version of `page`'s last write (its first replica's; 0: never written, `None`:
    /// past the disk).
    fn version(&self, page: u64) -> Option<u64> {
        self.at(page, 0).map(|i| self.versions[i])
    }

    /// Put a write's replica again (its put ended `why`), after [`RETRY_DELAY_NS`] if
    /// `later`, unless it has been failing for [`WRITE_RETRY_NS`]: then `ENOSPC` if it was
    /// `refused` (no member had room all that time), else an I/O error.
    fn retry_write(&mut self, mut w: Waiting, later: bool, refused: bool, now: u64, why: core::fmt::Arguments<'_>) {
        if w.since == 0 {
            w.since = now;
        }
        if now.saturating_sub(w.since) >= WRITE_RETRY_NS {
            write_failed(w.page, w.replica, why);
            if refused {
                self.fail_full(w.io);
            } else {
                self.fail(w.io);
            }
            return;
        }
        self.counters.retries += 1;
        w.tries = w.tries.saturating_add(1);
        match self.delayed.iter_mut().find(|s| s.is_none()) {
            Some(slot) if later => *slot = Some((now + RETRY_DELAY_NS, w)),
            _ => self.push_or_fail(w),
        }
    }

    /// Queue the delayed writes that are due.
    fn release_due(&mut self, now: u64) {
        for i in 0..self.delayed.len() {
            if self.delayed[i].as_ref().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, w)) = self.delayed[i].take() {
                    self.push_or_fail(w);
                }
            }
        }
    }

    /// A write of `page` found no member for replica `k` (fewer live targets than
    /// replicas): its token of the page completes without that copy, and the replica's
    /// version moves on, so an older copy of it is never read as current.
    fn under_replicated(&mut self, page: u64, k: u8, io: PageIo) {
        if let Some(i) = self.at(page, k) {
            self.versions[i] = self.next_version(self.versions[i]);
            self.set_target(i, NO_TARGET);
        }
        crate::stats::STATS.disk_under_replicated.inc();
        if k == 0 {
            self.counters.writes_ok += 1;
        }
        self.finish(io, Ok(()));
    }

    /// A read of `page` found its replica missing or stale: readers parked on it are
    /// queued as plain reads, and `next` (the read, at the next replica) is queued.
    fn next_replica(&mut self, page: u64, ra: bool, next: Option<Waiting>) {
        self.wake(page, None);
        if ra {
            let _ = self.ra.complete(DISK_SPACE, page, false);
        }
        if let Some(w) = next {
            crate::stats::STATS.disk_replica_fallbacks.inc();
            self.push_or_fail(w);
        }
    }

    /// The cached copy of `page` at `version` or newer.
    fn cached(&self, page: u64, version: u64) -> Option<Cached<Frame>> {
        self.cache.get(&PageId::new(DISK_SPACE, page)).filter(|c| c.version.0 >= version)
    }

    /// Forget `page`'s cached copy (written); its frame to release.
    fn uncache(&mut self, page: u64) -> Option<Frame> {
        self.cache.remove(&PageId::new(DISK_SPACE, page)).map(|c| c.frame)
    }

    /// Park a reader until the pending fetch of `page` ends.
    fn park(&mut self, page: u64, io: PageIo) -> core::result::Result<(), PageIo> {
        match self.waiting.iter_mut().find(|w| w.is_none()) {
            Some(w) => {
                *w = Some((page, io));
                Ok(())
            }
            None => Err(io),
        }
    }

    /// The fetch of `page` ended: fill its parked readers from `data` (the page's frame),
    /// or queue them as plain reads.
    fn wake(&mut self, page: u64, data: Option<&DmaBuf>) {
        for i in 0..self.waiting.len() {
            if !self.waiting[i].as_ref().is_some_and(|w| w.0 == page) {
                continue;
            }
            let Some((_, io)) = self.waiting[i].take() else { continue };
            match data {
                Some(buf) => {
                    let r = fill_from(&io, buf);
                    if r.is_ok() {
                        self.counters.reads_cache += 1;
                    } else {
                        self.counters.errors += 1;
                    }
                    self.finish(io, r);
                }
                None => self.push_or_fail(Waiting::new(page, io, false, false)),
            }
        }
    }

    fn fail(&mut self, io: PageIo) {
        self.counters.errors += 1;
        self.finish(io, Err(EIO));
    }

    /// A write no member has room for: `ENOSPC` (the request ends `BLK_STS_NOSPC`).
    fn fail_full(&mut self, io: PageIo) {
        self.counters.errors += 1;
        self.counters.full += 1;
        self.finish(io, Err(ENOSPC));
    }

    /// The version a write of a replica last written at `v` puts: the next one, and
    /// above every version of an earlier load of this module ([`DiskState::version_base`]).
    fn next_version(&self, v: u64) -> u64 {
        v.max(self.version_base) + 1
    }

    /// Finish a page: completed once the core lock is released.
    fn finish(&mut self, io: PageIo, r: Result) {
        match self.finished.get_mut(self.nfinished) {
            Some(slot) => {
                *slot = Some((io, r));
                self.nfinished += 1;
            }
            // Cannot happen (more than every page in flight); completing here is the
            // lesser evil.
            None => io.complete(r),
        }
    }

    /// Move up to `out.len()` finished pages into `out`; how many.
    fn take_finished(&mut self, out: &mut [Option<(PageIo, Result)>]) -> usize {
        let mut n = 0;
        while n < out.len() && self.nfinished > 0 {
            self.nfinished -= 1;
            out[n] = self.finished[self.nfinished].take();
            n += 1;
        }
        n
    }

    /// Fail every page queued or in flight (teardown). The operations in flight keep
    /// their frames until GMS finishes them.
    pub(crate) fn fail_all(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.delayed.len() {
            if let Some((_, w)) = self.delayed[i].take() {
                self.fail(w.io);
                n += 1;
            }
        }
        while let Some(w) = self.pop() {
            self.fail(w.io);
            n += 1;
        }
        for i in 0..self.waiting.len() {
            if let Some((_, io)) = self.waiting[i].take() {
                self.fail(io);
                n += 1;
            }
        }
        for i in 0..self.in_flight.len() {
            if let Some(io) = self.in_flight[i].as_mut().and_then(|f| f.io.take()) {
                self.fail(io);
                n += 1;
            }
            while let Some((_, io)) = self.groups[i].take_next() {
                self.fail(io);
                n += 1;
            }
        }
        n
    }
}

/// Fail a page with an I/O error (through the disk, which counts it, if it is still there).
fn fail_io(c: &mut DiskCore, io: PageIo) {
    match c.client.as_mut() {
        Some(d) => d.fail(io),
        None => io.complete(Err(EIO)),
    }
}

/// Move up to `out.len()` pages that finished into `out` (under the core lock); the
/// caller completes them once the lock is released. How many.
pub(crate) fn take_finished(core: &mut DiskCore, out: &mut [Option<(PageIo, Result)>]) -> usize {
    core.client.as_mut().map_or(0, |d| d.take_finished(out))
}

/// A disk page from blk-mq (atomic context, core lock held): zeros for a page never
/// written, a read-ahead cache hit, parked on a pending fetch, else queued for GMS and
/// issued — a read only after its request's `last` page, so that the request's reads one
/// member holds go as one `GETPAGES`; a write at once, its put on the wire while the
/// request's next pages are queued. `closing`: the NIC is going away, the page fails.
/// Whether anything was issued (the caller flushes and rings the doorbell).
pub(crate) fn submit(c: &mut DiskCore, page: u64, io: PageIo, write: bool, closing: bool, last: bool) -> bool {
    queue_page(c, page, io, write, closing);
    (last || write) && issue(c, now_ns())
}

/// [`submit`]'s page, queued (or finished at once).
fn queue_page(c: &mut DiskCore, page: u64, io: PageIo, write: bool, closing: bool) {
    {
        let Some(d) = c.client.as_mut() else {
            io.complete(Err(EIO));
            return;
        };
        if closing {
            d.fail(io);
            return;
        }
        match d.version(page) {
            None => {
                d.fail(io);
                return;
            }
            Some(0) if !write && !d.known(page) => {
                // Not written by this load: an earlier one may have written it.
                d.push_or_fail(Waiting { probe: 1, ..Waiting::new(page, io, false, false) });
                return;
            }
            Some(0) if !write => {
                let r = io.fill_zero();
                if r.is_ok() {
                    d.counters.reads_zero += 1;
                } else {
                    d.counters.errors += 1;
                }
                d.finish(io, r);
                return;
            }
            Some(_) => {}
        }
        let mut ra = false;
        if write {
            if let Some(f) = d.uncache(page) {
                c.node.host.release(f);
            }
            // Every replica is put at once, each with its own token of the page: the
            // write costs one round trip, not one per copy. Replica 0 goes first.
            let Some(d) = c.client.as_mut() else { return };
            let mut parts: [Option<PageIo>; MAX_REPLICAS as usize - 1] = [const { None }; MAX_REPLICAS as usize - 1];
            for part in parts.iter_mut().take(usize::from(d.replicas) - 1) {
                match io.split() {
                    Ok(p) => *part = Some(p),
                    Err(_) => {
                        parts.iter_mut().filter_map(Option::take).for_each(|p| d.fail(p));
                        d.fail(io);
                        return;
                    }
                }
            }
            if let Err(io) = d.push(Waiting::new(page, io, true, false)) {
                d.fail(io);
            }
            for (k, part) in (1..).zip(parts.iter_mut().filter_map(Option::take)) {
                d.push_or_fail(Waiting { replica: k, ..Waiting::new(page, part, true, false) });
            }
            return;
        } else if d.ra_on {
            let v = d.version(page).unwrap_or(0);
            let hit = d.cached(page, v);
            match d.ra.on_access(DISK_SPACE, page, hit.is_some()) {
                Decision::Hit => {
                    if let Some(cached) = hit {
                        let r = match c.node.host.frame(cached.frame) {
                            Some(buf) => fill_from(&io, buf),
                            None => Err(EINVAL),
                        };
                        match c.client.as_mut() {
                            Some(d) => {
                                if r.is_ok() {
                                    d.counters.reads_cache += 1;
                                } else {
                                    d.counters.errors += 1;
                                }
                                d.finish(io, r);
                            }
                            None => io.complete(r),
                        }
                        return;
                    }
                }
                Decision::WaitFor(_) => {
                    if let Err(back) = d.park(page, io) {
                        d.push_or_fail(Waiting::new(page, back, false, false));
                    }
                    return;
                }
                Decision::Fetch(id) => ra = id.is_some(),
            }
            let Some(d) = c.client.as_mut() else { return };
            if let Err(io) = d.push(Waiting::new(page, io, write, ra)) {
                if ra {
                    let _ = d.ra.complete(DISK_SPACE, page, false);
                }
                d.fail(io);
                return;
            }
            return;
        }
        let Some(d) = c.client.as_mut() else { return };
        if let Err(io) = d.push(Waiting::new(page, io, write, ra)) {
            d.fail(io);
        }
    }
}
