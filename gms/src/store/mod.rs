// SPDX-License-Identifier: GPL-2.0-only
//! The store: the writer's side of GMS — the one policy that decides what happens to a
//! user's page, for every runtime (the kernel's `/dev/gms0`, `gmsd`, the simulator and
//! the history checker drive this same code).
//!
//! A [`Store`] keeps a volume of `pages` pages (a disk) in network memory, each page as
//! `r` replicas ([`crate::replica`]) on `r` distinct members, and owns:
//! - the records of every page it wrote ([`record`]): each replica's version, holder, the
//!   holder's NIC answer entry, and the *sites* where its newest data may be;
//! - versions from one clock per disk identity ([`record::Clock`]), never the wall clock;
//! - placement with site avoidance (a replica's put keeps clear of every site of the
//!   others) over [`crate::placement::Placement`];
//! - the write and read state machines with their retries ([`mod@write`], [`mod@read`]);
//! - re-replication of the replicas a failed member held, rate-bounded ([`repair`]);
//! - read-ahead of sequential reads, into frames it holds ([`ahead`]);
//! - reads of nearby pages one member holds, asked together as one `GETPAGES` ([`group`]);
//! - liveness ([`liveness`]: heartbeats, failure, restart, rejoin), which the runtime
//!   runs beside it and whose events it passes to [`Store::handle_member`].
//!
//! **The rules.** A write is acknowledged only when all `r` replicas are stored and named
//! by their directories; with fewer live members than `r` it is refused
//! ([`StoreError::TooFewMembers`]) unless the user asked for degraded writes
//! ([`StoreConfig::degraded_writes`]), which are counted. A read returns the version of
//! the last acknowledged write or newer, or a page of zeros for a page never written, or
//! fails with [`StoreError::Lost`] when every replica's copy is gone (or, after a reload,
//! when its floor-map page was lost: no copy is then known to be its own, [`volume`]).
//! How long it waits and retries is the runtime's [`StoreConfig`]. Nothing is retried
//! forever: a write gives up after [`StoreConfig::write_window_ns`], a read after
//! [`StoreConfig::read_passes`] passes over the replicas.
//!
//! **Shape** (quinn-proto's): commands [`Store::write`] and [`Store::read`] take the
//! user's request handle (`Io`: a block request's page, a daemon's job) and return at
//! once; [`Store::poll_issue`] says what to send next, the runtime sends it through its
//! `GmsNode` and reports the operation id ([`Store::handle_issued`]) and later its
//! completion ([`Store::handle_put`], [`Store::handle_get`]); [`Store::poll_done`] hands
//! back finished requests, and [`Store::poll_timeout`] says when to call
//! [`Store::handle_timeout`]. [`drive`] is that loop for a `GmsNode`, so runtimes differ
//! only in their frames. Time is always a parameter (ns); no heap (the records live in the
//! runtime's [`Storage`]); no `unsafe`.

pub mod ahead;
pub mod claim;
mod config;
pub mod drive;
mod error;
pub mod group;
pub mod liveness;
pub mod nodes;
pub mod ops;
pub mod read;
pub mod record;
pub mod repair;
pub mod stats;
pub mod survey;
pub mod volume;
pub mod write;

use super::epochs::Lru;
use super::net::storage::Storage;
use super::page::{PageId, Version};
use super::placement::Placement;
use super::replica::{replica, MAX_REPLICAS};
use super::types::OpId;
pub use config::StoreConfig;
use nodes::{NodeOutOfRange, NodeSet};
use read::ReadReq;
use record::{Clock, Entry};
use repair::{Repair, RepairReq};
pub use stats::StoreStats;
pub use volume::space_of;
use write::WriteReq;

/// Why a request failed, or could not be accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Past the end of the volume.
    OutOfRange,
    /// Every request slot is in use, or an earlier request on the page is still running:
    /// submit it again after a completion.
    Busy,
    /// Fewer live members than replicas, and degraded writes are off.
    TooFewMembers,
    /// Every member refused the page for [`StoreConfig::full_after`] rounds.
    NoSpace,
    /// The write's puts got no answer within [`StoreConfig::write_window_ns`].
    Unreachable,
    /// A newer version of the page is recorded in the cluster: another writer uses this
    /// disk's identity.
    Superseded,
    /// The page was written and no copy of it is left.
    Lost,
    /// The runtime could not send (no frame, no operation slot) and gave up.
    NotSent,
    /// The disk's identity is in use by a live member's load ([`volume`]).
    IdentityInUse { owner: u16 },
    /// The cluster holds a volume of this identity that is larger (a volume may grow, not
    /// shrink) or keeps another number of replicas.
    NotThisVolume,
    /// A member knows a version of this volume in its last epoch: a load cannot claim one
    /// above it ([`record::Clock::MAX_EPOCH`]; only a member lying or a runaway writer
    /// gets there).
    VersionsExhausted,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stored as `copies` replicas (fewer than configured only with degraded writes).
    Written {
        copies: u8,
    },
    /// The page's data is in the request's frame, at `version`.
    Read {
        version: Version,
    },
    /// The page was never written: the request's page reads as zeros.
    Zero,
    Failed(StoreError),
}

/// What [`Store::poll_done`] hands back.
#[derive(Debug, PartialEq, Eq)]
pub enum Finished<Io, F> {
    Request {
        io: Io,
        outcome: Outcome,
    },
    /// A read served from a copy read ahead ([`ahead`]): copy `frame` into the request's
    /// page, give the frame back, and the request read `version`.
    Copy {
        io: Io,
        frame: F,
        version: Version,
    },
    /// A frame the store fetched a copy into (re-replication), no longer needed.
    Scratch(F),
}

/// A request's handle inside the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReqId(pub u16);

/// Where a getpage goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight to the member believed to hold the copy (`GmsNode::getpage_hinted`),
    /// answered by its NIC when `answer` names its entry.
    Holder { node: u16, answer: Option<super::types::Answer> },
    /// Through the page's directory node.
    Directory,
}

/// Where a put's data is, or a get's lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data<F> {
    /// The request's own page.
    Request,
    /// A frame of the store's (a copy fetched for re-replication).
    Frame(F),
    /// Meta page `m` of the volume ([`volume`]): a frame the runtime fills with the bytes
    /// [`Store::fill_meta`] writes (a put), or whose bytes it hands to
    /// [`Store::handle_get_bytes`] (a get).
    Meta(u64),
    /// A frame the runtime provides for a fetch (re-replication).
    Scratch,
}

/// An operation the runtime should send now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issue<F> {
    pub req: ReqId,
    pub kind: IssueKind<F>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueKind<F> {
    Put {
        page: PageId,
        version: Version,
        target: u16,
        data: Data<F>,
    },
    Get {
        page: PageId,
        at_least: Version,
        route: Route,
        into: Data<F>,
    },
    /// Ask `node` for the newest version it knows of the volume's pages `scope` names
    /// ([`claim`]).
    Top {
        node: u16,
        family: u64,
        scope: super::ops::TopScope,
    },
    /// A [`group::Group`] of reads in one `GETPAGES` (`GmsNode::getpages_hinted`).
    Gets(group::Group),
}

/// A GMS operation in flight for a request: its id, and the request's frame lent to it.
#[derive(Clone, Copy)]
pub(crate) struct OpRec<F> {
    op: OpId,
    req: ReqId,
    lent: Option<F>,
}

/// Whose request: a user's, the store's own on its meta pages ([`volume`]), or a
/// read-ahead ([`ahead`]).
pub(crate) enum Owner<Io> {
    User(Io),
    Meta,
    Ahead(Fetch),
}

/// Where a read-ahead under way stands ([`ahead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fetch {
    /// Its copy is the page's newest: held when it lands.
    Live,
    /// A write of the page was admitted since it started: dropped when it lands.
    Overwritten,
}

/// Where loading the volume stands ([`volume`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Asking every member for the newest version it knows of the volume ([`claim`]):
    /// first, and again for members that joined meanwhile before the claim.
    Top,
    /// Reading the label (meta page 0).
    Label,
    /// Reading map page `m` (1..).
    Map { m: u64 },
    /// Asking every member whether map page `m` was written after the copy read
    /// ([`claim`]).
    MapCheck { m: u64 },
    /// Writing the label that claims the volume for this load.
    Claim,
    /// Serving requests.
    Ready,
    /// Refused to start: every request fails with this.
    Refused(StoreError),
}

impl Phase {
    /// Whether the volume is still loading (requests wait).
    pub fn loading(self) -> bool {
        matches!(self, Phase::Top | Phase::Label | Phase::Map { .. } | Phase::MapCheck { .. } | Phase::Claim)
    }
}

/// One request slot.
pub(crate) enum Req<Io, F> {
    Free,
    Write(WriteReq<Io>),
    Read(ReadReq<Io>),
    Repair(RepairReq<F>),
    Top(claim::TopAsk),
    Done(Finished<Io, F>),
}

/// The store of one volume: `Io` the user's request handle, `F` the runtime's frames,
/// up to `M` members, `Q` requests at once, `OPS` the `GmsNode`'s operation slots.
pub struct Store<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> {
    cfg: StoreConfig,
    identity: u64,
    me: u16,
    space: u64,
    pages: u64,
    /// The volume's size as its label gave it (it may have grown since), and whether a
    /// label was found at all.
    pages_before: u64,
    label_found: bool,
    /// Meta pages past `pages` ([`volume::meta_pages`]).
    meta: u64,
    phase: Phase,
    /// The label this load claims (its epoch set once the old label was read).
    label: volume::Label,
    /// The floor map ([`volume`]): a floor per page, and each map page's generations.
    floors: S::Buf<u64>,
    maps: S::Buf<volume::MapPage>,
    /// Loading's next step, or the next map write after a failed one, not before this.
    load_at: u64,
    /// A member failed or restarted since the meta pages were last looked at: one with no
    /// copy on a live member is written again from this load's own ([`volume`]).
    meta_check: bool,
    /// A map page's generations moved since the last look found none to write.
    maps_due: bool,
    entries: S::Buf<Entry>,
    clock: Clock,
    /// Live members that take puts (this node excluded), and the members declared failed
    /// since this load began that have not been heard again.
    members: NodeSet,
    departed: NodeSet,
    /// The members that answered this load's `TOPVERSION` to the end, and the one being
    /// asked with the slot it goes on from ([`claim`]).
    top_asked: NodeSet,
    top_at: Option<(u16, u64)>,
    /// The newest epoch those answers named, bounded at the claim ([`claim::EPOCH_REACH`]).
    heard: u32,
    /// The label and map were read (or found missing): the claim comes next.
    meta_known: bool,
    /// The version of the map page copy read, and the members asked whether one was
    /// written after it ([`claim`]).
    map_read: Version,
    map_asked: NodeSet,
    /// The map page being read was looked for anew after a member knew of a newer write,
    /// and no member joined or failed since ([`claim`]).
    map_again: bool,
    placement: Placement<M>,
    reqs: [Req<Io, F>; Q],
    /// The request behind each GMS operation in flight, by its slot; and operations that
    /// ended while their completion waits in the host to be handed in, their slot reused
    /// by the node meanwhile.
    ops: [Option<OpRec<F>>; OPS],
    ended: [Option<OpRec<F>>; OPS],
    repair: Repair,
    ahead: ahead::Ahead<F>,
    /// Where the next scan of the request table starts (fairness).
    cursor: usize,
    pub stats: StoreStats,
}

/// Why a store could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    Replicas,
    /// The record table could not be allocated (pages × replicas entries).
    NoMemory,
    Node(NodeOutOfRange),
}

impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// The store of the volume named `identity` (a user's name, hashed: [`space_of`] gives
    /// its page space) of `pages` pages, loaded on node `me` with `members` live now. It
    /// starts by reading the volume's label and floor map ([`volume`]); requests wait
    /// until then ([`Self::phase`]).
    pub fn new(cfg: StoreConfig, identity: u64, me: u16, pages: u64, members: &[u16]) -> Result<Self, ConfigError> {
        let no_memory = ConfigError::NoMemory;
        let mut s = Self::unloaded(
            cfg,
            S::buf(0, Entry::NEW).ok_or(no_memory)?,
            S::buf(0, 0u64).ok_or(no_memory)?,
            S::buf(0, volume::MapPage::default()).ok_or(no_memory)?,
        );
        s.load(cfg, identity, me, pages, members)?;
        Ok(s)
    }

    /// A store of no volume, made by constant evaluation, with empty tables (`S::Buf`s of
    /// length 0): for a runtime that must build the store in place — a kernel keeps it in
    /// a `static` and copies it to the heap, as its stack cannot hold it — and then gives
    /// it its volume with [`Self::load`]. Until then every request is refused.
    pub const fn unloaded(
        cfg: StoreConfig,
        entries: S::Buf<Entry>,
        floors: S::Buf<u64>,
        maps: S::Buf<volume::MapPage>,
    ) -> Self {
        Store {
            cfg,
            identity: 0,
            me: 0,
            space: 0,
            pages: 0,
            pages_before: 0,
            label_found: false,
            meta: 0,
            phase: Phase::Refused(StoreError::NotThisVolume),
            label: volume::Label { identity: 0, pages: 0, replicas: cfg.replicas, epoch: 1, owner: 0 },
            floors,
            maps,
            load_at: 0,
            meta_check: false,
            maps_due: false,
            entries,
            clock: Clock::new(1),
            members: NodeSet::EMPTY,
            departed: NodeSet::EMPTY,
            top_asked: NodeSet::EMPTY,
            top_at: None,
            heard: 0,
            meta_known: false,
            map_read: Version(0),
            map_asked: NodeSet::EMPTY,
            map_again: false,
            placement: Placement::new(u32::MAX),
            reqs: [const { Req::Free }; Q],
            ops: [None; OPS],
            ended: [None; OPS],
            repair: Repair::NEW,
            ahead: ahead::Ahead::new(),
            cursor: 0,
            stats: StoreStats::ZERO,
        }
    }

    /// Make this store the one of [`Self::new`]'s volume, in place (its tables allocated
    /// anew; any request it held is dropped): [`Self::unloaded`]'s second step.
    pub fn load(
        &mut self,
        cfg: StoreConfig,
        identity: u64,
        me: u16,
        pages: u64,
        members: &[u16],
    ) -> Result<(), ConfigError> {
        if !(1..=MAX_REPLICAS).contains(&cfg.replicas) || cfg.page_bytes < volume::LABEL_BYTES as u32 {
            return Err(ConfigError::Replicas);
        }
        NodeSet::check(me).map_err(ConfigError::Node)?;
        let meta = volume::meta_pages(pages, cfg.page_bytes);
        let n = usize::try_from(pages.checked_add(meta).ok_or(ConfigError::NoMemory)?)
            .ok()
            .and_then(|p| p.checked_mul(usize::from(cfg.replicas)))
            .ok_or(ConfigError::NoMemory)?;
        let members = NodeSet::of(members).map_err(ConfigError::Node)?;
        let mut entries = S::buf(n, Entry::NEW).ok_or(ConfigError::NoMemory)?;
        // What earlier loads left of the meta pages is unknown until read.
        let first_meta = usize::try_from(pages).unwrap_or(usize::MAX).saturating_mul(usize::from(cfg.replicas));
        for e in entries.iter_mut().skip(first_meta) {
            *e = Entry::UNKNOWN;
        }
        let floors =
            S::buf(usize::try_from(pages).map_err(|_| ConfigError::NoMemory)?, 0u64).ok_or(ConfigError::NoMemory)?;
        let maps = S::buf(usize::try_from(meta - 1).map_err(|_| ConfigError::NoMemory)?, volume::MapPage::default())
            .ok_or(ConfigError::NoMemory)?;
        let mut placement = Placement::new(u32::MAX);
        placement.set_targets(members.iter());
        self.cfg = cfg;
        self.identity = identity;
        self.me = me;
        self.space = space_of(identity);
        self.pages = pages;
        self.pages_before = pages;
        self.label_found = false;
        self.meta = meta;
        self.phase = Phase::Top;
        self.meta_known = false;
        self.label = volume::Label { identity, pages, replicas: cfg.replicas, epoch: 1, owner: me };
        self.floors = floors;
        self.maps = maps;
        self.load_at = 0;
        (self.meta_check, self.maps_due) = (false, false);
        self.entries = entries;
        self.clock = Clock::new(1);
        self.members = members;
        self.departed = NodeSet::EMPTY;
        self.top_asked = NodeSet::EMPTY;
        (self.top_at, self.heard) = (None, 0);
        self.map_again = false;
        self.placement = placement;
        self.reqs.iter_mut().for_each(|r| *r = Req::Free);
        self.ops = [None; OPS];
        self.ended = [None; OPS];
        self.repair = Repair::NEW;
        self.cursor = 0;
        self.stats = StoreStats::ZERO;
        Ok(())
    }

    /// Where loading stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// This load's epoch (the top bits of its versions).
    pub fn epoch(&self) -> u32 {
        self.label.epoch
    }

    /// The disk identity this store was made for.
    pub fn identity(&self) -> u64 {
        self.identity
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    pub fn members(&self) -> NodeSet {
        self.members
    }

    /// Replica `k` of volume page `page` as a GMS page (meta pages, past `pages`, count
    /// down from `u64::MAX`).
    pub fn page_id(&self, page: u64, k: u8) -> PageId {
        let n = if page < self.pages { page } else { u64::MAX - (page - self.pages) };
        replica(PageId::new(self.space, n), k)
    }

    /// The record of replica `k` of `page`.
    pub fn entry(&self, page: u64, k: u8) -> Option<&Entry> {
        self.at(page, k).map(|i| &self.entries[i])
    }

    fn at(&self, page: u64, k: u8) -> Option<usize> {
        if page >= self.pages.saturating_add(self.meta) || k >= self.cfg.replicas {
            return None;
        }
        let i = usize::try_from(page).ok()?.checked_mul(usize::from(self.cfg.replicas))?;
        i.checked_add(usize::from(k))
    }

    /// The user's request behind `req` (a put's data is its page).
    pub fn io(&self, req: ReqId) -> Option<&Io> {
        match self.reqs.get(usize::from(req.0))? {
            Req::Write(WriteReq { io: Owner::User(io), .. }) | Req::Read(ReadReq { io: Owner::User(io), .. }) => {
                Some(io)
            }
            _ => None,
        }
    }

    fn free_slot(&self) -> Option<usize> {
        self.reqs.iter().position(|r| matches!(r, Req::Free))
    }

    /// Whether a request on `page` (`write`: a write) may start now: no write of it is
    /// running, and no read either if this is a write.
    fn page_free(&self, page: u64, write: bool) -> bool {
        self.reqs.iter().all(|r| match r {
            Req::Write(w) => w.page != page,
            // A read-ahead does not hold a write back: the write marks it overwritten.
            Req::Read(r) => !write || r.page != page || matches!(r.io, Owner::Ahead(_)),
            Req::Repair(r) => r.page != page,
            _ => true,
        })
    }

    fn admit(&mut self, page: u64, write: bool) -> Result<usize, StoreError> {
        if page >= self.pages {
            return Err(StoreError::OutOfRange);
        }
        if let Phase::Refused(e) = self.phase {
            return Err(e);
        }
        // Slots kept for the store's own meta pages: a write may wait for its map page.
        if self.reqs.iter().filter(|r| matches!(r, Req::Free)).count() <= META_SLOTS || !self.page_free(page, write) {
            return Err(StoreError::Busy);
        }
        self.free_slot().ok_or(StoreError::Busy)
    }

    /// Write `io`'s page as volume page `page`. `Err`: not accepted, `io` back.
    pub fn write(&mut self, now: u64, page: u64, io: Io) -> Result<ReqId, (Io, StoreError)> {
        let slot = match self.admit(page, true) {
            Ok(s) => s,
            Err(e) => return Err((io, e)),
        };
        self.stats.writes += 1;
        self.ahead_overwritten(page);
        self.reqs[slot] =
            Req::Write(WriteReq::new(Owner::User(io), page, now.saturating_add(self.cfg.write_window_ns)));
        self.check_floor(slot);
        Ok(ReqId(slot as u16))
    }

    /// Read volume page `page` into `io`'s page. `Err`: not accepted, `io` back.
    pub fn read(&mut self, now: u64, page: u64, io: Io) -> Result<ReqId, (Io, StoreError)> {
        let slot = match self.admit(page, false) {
            Ok(s) => s,
            Err(e) => return Err((io, e)),
        };
        self.stats.reads += 1;
        let io = match self.read_from_ahead(slot, page, io) {
            Ok(req) => return Ok(req),
            Err(io) => io,
        };
        self.reqs[slot] = Req::Read(ReadReq::new(Owner::User(io), page, now));
        Ok(ReqId(slot as u16))
    }

    /// What to send next (`None`: nothing now; see [`Self::poll_timeout`]). Every `Some`
    /// must be answered by [`Self::handle_issued`] before the next call.
    ///
    /// Nothing goes while every record of an ended operation is kept waiting for its
    /// completion ([`ops`]): the next operation may reuse a slot whose completion the
    /// runtime has not handed in, and its record must not be lost (its request would wait
    /// for ever). Handing completions in makes room.
    pub fn poll_issue(&mut self, now: u64, lru: &mut Lru, coordinator: Option<u16>) -> Option<Issue<F>> {
        self.advance_load(now);
        if self.phase == Phase::Ready {
            self.rewrite_lost_meta(now);
            self.start_map_writes(now);
            self.start_repairs(now);
            self.start_ahead(now);
        }
        if self.ended.iter().all(Option::is_some) {
            return None;
        }
        let n = self.reqs.len();
        for step in 0..n {
            let i = if self.cursor + step < n { self.cursor + step } else { self.cursor + step - n };
            let issue = match &self.reqs[i] {
                Req::Write(_) => self.poll_write(i, now, lru, coordinator),
                Req::Read(_) => self.poll_read(i, now).map(|get| self.poll_group(i, get, now)),
                Req::Repair(_) => self.poll_repair(i, now, lru, coordinator),
                Req::Top(_) => self.poll_top(i),
                _ => None,
            };
            if let Some(kind) = issue {
                self.cursor = (i + 1) % n;
                return Some(Issue { req: ReqId(i as u16), kind });
            }
        }
        None
    }

    /// A finished request or a frame to give back, oldest slot first.
    pub fn poll_done(&mut self) -> Option<Finished<Io, F>> {
        if let Some(frame) = self.ahead.poll_drop() {
            return Some(Finished::Scratch(frame));
        }
        let i = self.reqs.iter().position(|r| matches!(r, Req::Done(_)))?;
        match core::mem::replace(&mut self.reqs[i], Req::Free) {
            Req::Done(f) => Some(f),
            _ => None,
        }
    }

    /// Request `i` on `page` ended with `outcome`: a user's is handed back, the store's own
    /// goes to [`volume`]'s bookkeeping.
    fn finish_req(&mut self, i: usize, owner: Owner<Io>, page: u64, outcome: Outcome, now: u64) {
        match owner {
            Owner::User(io) => self.finish(i, Finished::Request { io, outcome }),
            Owner::Meta => {
                self.reqs[i] = Req::Free;
                self.meta_done(page, outcome, now);
            }
            Owner::Ahead(fetch) => {
                self.ahead_done(i, fetch, page, None);
            }
        }
    }

    fn finish(&mut self, i: usize, f: Finished<Io, F>) {
        if let Finished::Request { outcome: Outcome::Failed(e), .. } = &f {
            if *e == StoreError::Lost {
                self.stats.lost += 1;
            }
        }
        self.reqs[i] = Req::Done(f);
    }

    /// When [`Self::handle_timeout`] (and [`Self::poll_issue`]) next have work.
    pub fn poll_timeout(&self) -> Option<u64> {
        let reqs = self.reqs.iter().filter_map(|r| match r {
            Req::Write(w) => w.wake(),
            Req::Read(r) => r.wake(),
            Req::Repair(r) => r.wake(),
            _ => None,
        });
        // Loading's next step, or a map page written again after a failure.
        let pending_maps = self.maps_due && self.maps.iter().any(|p| p.set > p.stored && p.writing.is_none());
        let load = match self.phase {
            Phase::Ready if pending_maps || self.meta_check => Some(self.load_at),
            p if p.loading() && !self.meta_req_running() => Some(self.load_at),
            _ => None,
        };
        // Repairs wait for the volume to load: a scan started meanwhile (a member failed)
        // is no deadline until then, or the runtime would spin through the load's waits.
        let repair = self.repair.wake().filter(|_| self.phase == Phase::Ready);
        reqs.chain(repair).chain(load).min()
    }

    /// Time passed: delayed puts and reads are due, writes past their window fail.
    pub fn handle_timeout(&mut self, now: u64) {
        for i in 0..self.reqs.len() {
            if matches!(self.reqs[i], Req::Write(_)) {
                self.write_timeout(i, now);
            }
        }
    }

    /// A membership change from [`liveness`]: a member joined (a put target again; back
    /// with its memory if it was declared failed while it ran), failed (its replicas count
    /// as lost and are re-replicated, but it stays a site of what it held, in case it was
    /// only suspected), or restarted (everything it held is gone).
    pub fn handle_member(&mut self, now: u64, event: liveness::Event) {
        let n = match event {
            liveness::Event::Joined(n) | liveness::Event::Restarted(n) => {
                self.members.insert(n);
                self.departed.remove(n);
                self.placement.set_targets(self.members.iter());
                n
            }
            liveness::Event::Failed(n) => {
                self.members.remove(n);
                self.departed.insert(n);
                self.placement.remove(n);
                n
            }
        };
        self.map_again = false;
        match event {
            // Back with its memory (it was only suspected): the copies it kept are
            // still sites of their replicas, and reads ask it again: a read under way that
            // missed while it was away asks it before it calls the page lost (or a load
            // its label missing). Replicas the last repair pass could not place (no member
            // clear of the other copies) may go to it now.
            liveness::Event::Joined(_) => {
                self.reqs.iter_mut().for_each(|r| {
                    if let Req::Read(r) = r {
                        r.member_back()
                    }
                });
                if self.stats.repair_short > 0 {
                    self.repair.start(now);
                }
            }
            liveness::Event::Failed(_) | liveness::Event::Restarted(_) => {
                let restarted = matches!(event, liveness::Event::Restarted(_));
                for e in self.entries.iter_mut() {
                    e.gone(n, restarted);
                }
                // A write not acknowledged yet whose replica was stored there puts it
                // again: it is acknowledged with `r` copies that exist.
                for r in self.reqs.iter_mut() {
                    if let Req::Write(w) = r {
                        w.lost_at(n, restarted);
                    }
                }
                self.meta_check = true;
                self.repair.start(now);
            }
        }
    }

    /// Stop serving (the runtime is going away): every user request still held fails with
    /// `e` (handed back by [`Self::poll_done`]) and every later one is refused with it.
    /// Operations in flight stay recorded, so their completions still give frames back.
    pub fn shut(&mut self, e: StoreError) {
        self.phase = Phase::Refused(e);
        self.fail_waiting(e);
        self.ahead.drop_all();
    }

    /// A member's free room as last heard (its heartbeat), for placement.
    pub fn handle_room(&mut self, node: u16, free_pages: u64) {
        self.placement.heard(node, free_pages);
    }
}

/// Request slots user requests leave free for the store's meta pages.
const META_SLOTS: usize = 2;

#[cfg(test)]
mod tests;
