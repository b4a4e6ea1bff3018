// SPDX-License-Identifier: GPL-2.0-only
//! The types a runtime exchanges with a [`super::node::GmsNode`]: operation handles and
//! results, errors, per-space policies, configuration and counters.

use super::net::prelude::RpcError;
use super::page::{PageId, Version};

/// Names a client operation (getpage, putpage, movepage, discard) at its issuing node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId {
    pub slot: u16,
    pub generation: u32,
}

/// Where a getpage hit was served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// This node holds the page itself (the directory said so): copied locally.
    Local,
    /// Requester → directory node, which held the page (or: the requester is the
    /// directory node and asked the caching site directly).
    TwoWay,
    /// Requester → directory → caching site → requester (delegated RPC).
    ThreeWay,
}

/// Why a getpage missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    /// No node holds the page (or the holder no longer had the version the directory named).
    NotCached,
    /// No live node to be the directory.
    NoDirectory,
    /// The call failed: timeout (GMS cancels overdue calls: `Cancelled`), eviction of the
    /// call record, a refused payload, or the peer left the view.
    Failed(RpcError),
    /// A reply that did not decode or did not match the request.
    Malformed,
    /// The node asked does not count this one as a member (it declared it failed,
    /// perhaps only suspecting it): nothing is known of the page there.
    Refused,
    /// The page's directory node took the page over in a membership change less than
    /// [`GmsConfig::rebuild_window`] ago and names no copy of it yet: its holders may still
    /// be registering their copies with it. Nothing is known of the page yet; ask again.
    Rebuilding,
}

/// How a getpage ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetResult<F> {
    /// `frame` holds `len` bytes of the page at `version`. `held`: this node is now the
    /// page's holder (a moving read) and GMS keeps referencing `frame` until it reports
    /// it through [`super::node::Host::dropped`]; otherwise the frame is the runtime's.
    Hit { version: Version, frame: F, len: u32, via: Via, held: bool },
    /// `frame`: the caller's frame back, unused (`None` if NetRPC already released it
    /// through [`super::node::Host::release`], as it does for failed calls).
    Miss { reason: MissReason, frame: Option<F> },
}

/// How a putpage or movepage ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutResult {
    /// The target holds the page and the directory names it: a getpage issued from now
    /// on returns this version (or newer) or a miss.
    Stored { target: u16 },
    /// The target had no room (budget, or its update table), or would not take a copy so
    /// far above the one it holds.
    Refused,
    /// The target is busy with an earlier copy of the page (registering it with its
    /// directory, or removing it): the same target may take it later. Says nothing about
    /// room.
    Busy,
    /// A newer version (or a discard) is already recorded: the target dropped the copy.
    Superseded,
    /// The target or the directory is in another view (membership changed).
    WrongView,
    /// No answer in time, or the target left: the outcome is unknown.
    Failed,
}

/// How a discard ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscardResult {
    /// The directory forgot the page (versions up to the discarded one are never served
    /// again); the holder drops its copy in the background.
    Done,
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpResult<F> {
    Get(GetResult<F>),
    Put(PutResult),
    Discard(DiscardResult),
    Top(TopResult),
}

/// How a `TOPVERSION` ended ([`super::top`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopResult {
    /// The newest version in the slots scanned, and the slot to ask from next (`None`:
    /// every slot was scanned).
    Known { top: Version, next: Option<u64> },
    /// No answer, or refused.
    Failed,
}

/// A finished client operation, handed to [`super::node::Host::completed`] (nonblocking
/// mode) or taken with [`super::node::GmsNode::take`] (wait mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion<F> {
    pub op: OpId,
    pub page: PageId,
    pub result: OpResult<F>,
    /// A put `Stored`: where the target's NIC answers hinted getpages of the copy by
    /// itself ([`super::node::Host::export`]), if it does.
    pub answer: Option<Answer>,
}

/// An entry of a member's NIC answer table holding a page's copy, and its key: what a
/// hinted getpage names for the NIC to answer it without its host
/// ([`super::node::GmsNode::getpage_hinted`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Answer {
    pub index: u32,
    pub key: u64,
}

/// Why a client operation could not be issued (nothing was sent; frames stay the caller's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GmsError {
    /// Every operation slot is in use.
    OpsFull,
    /// The target is this node or not a member.
    BadTarget,
    /// A movepage of a page this node does not hold.
    NotHeld,
    /// A movepage of a page whose directory registration is still in progress, or a hold
    /// of a page this node holds or is still un-naming with its directory.
    Busy,
    /// A dirty page put into a write-through space.
    DirtyWriteThrough,
    /// The page-frame directory or the update table is full.
    Full,
    /// The policy table is full.
    PoliciesFull,
    /// Too many members.
    MembersFull,
    /// A `GETPAGES` that cannot be asked: no page or more than `ops::GETPAGES_MAX`, a
    /// version for each page not given, two versions too far apart, or a space with moving
    /// reads (ask page by page).
    BadPages,
    /// NetRPC refused the call (e.g. `TxFull`: poll transmits first).
    Rpc(RpcError),
}

/// What a read does to the caching site's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadPolicy {
    /// Non-destructive: the caching site keeps serving the page.
    #[default]
    Sticky,
    /// The caching site drops its copy when it serves it, and the requester becomes the
    /// holder (the directory follows).
    Moving,
}

/// How the client treats dirty pages (GMS itself only refuses dirty puts in write-through
/// spaces; writeback to disk is the runtime's job).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WritePolicy {
    /// Dirty pages may live in network memory (scratch data, swap): written back when
    /// evicted from the cluster.
    #[default]
    WriteBack,
    /// Pages are written to disk before they are put: network memory holds clean pages only.
    WriteThrough,
}

/// Per-space policy, set by the runtime ([`super::node::GmsNode::set_policy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Policy {
    pub reads: ReadPolicy,
    pub writes: WritePolicy,
}

/// Timeouts in the runtime's clock unit (ns suggested), and the memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GmsConfig {
    /// A client operation that has not completed after this long completes as a miss /
    /// failure (its call is cancelled): no operation hangs.
    pub op_timeout: u64,
    /// A background directory update (register, remove, drop) is retried after this long
    /// without an answer.
    pub task_timeout: u64,
    /// Pause before retrying a failed background update.
    pub retry_delay: u64,
    /// Give a background update up after this many attempts (0: retry until its peer
    /// leaves the view).
    pub max_attempts: u32,
    /// A directory tombstone (the version floor left by a removed entry) may be reclaimed
    /// for space after this long; keep it above the longest a message can live in the
    /// network.
    pub tombstone_ttl: u64,
    /// Pages this node holds at most (≤ the frame directory's capacity).
    pub budget: usize,
    /// Every this long, the scrub checks one directory entry (`DIRVERIFY` to its site)
    /// and re-registers one held page: soft-state repair after races between duplicated
    /// or reordered updates (0: off).
    pub scrub_interval: u64,
    /// For this long after a membership change gave a node pages to be the directory of
    /// (a directory node failed, or a node joined), the holders of those pages are
    /// registering their copies with it: a getpage of such a page it names no copy of is
    /// answered [`MissReason::Rebuilding`], not "nobody has it". Cover the members'
    /// failure-detection skew and their repair sweeps (0: never).
    pub rebuild_window: u64,
}

impl Default for GmsConfig {
    fn default() -> Self {
        GmsConfig {
            op_timeout: 50_000_000,
            task_timeout: 20_000_000,
            retry_delay: 5_000_000,
            max_attempts: 0,
            tombstone_ttl: 10_000_000_000,
            budget: usize::MAX,
            scrub_interval: 10_000_000,
            rebuild_window: 1_000_000_000,
        }
    }
}

/// Counters of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GmsStats {
    // -- as a client --
    pub gets: u64,
    pub hits_local: u64,
    pub hits_2way: u64,
    pub hits_3way: u64,
    /// Getpages answered "not cached".
    pub misses: u64,
    /// Getpages that failed (timeout, peer gone, ...): also misses for the caller.
    pub get_failures: u64,
    pub puts: u64,
    pub moves: u64,
    pub puts_stored: u64,
    pub discards: u64,
    pub op_timeouts: u64,
    // -- as a caching site --
    pub gets_served: u64,
    /// Moving reads served (copy dropped).
    pub gets_moved: u64,
    /// Pages stored for putpage/movepage.
    pub pages_stored: u64,
    /// Putpages refused (budget, update table, busy).
    pub puts_refused: u64,
    /// Copies dropped because a newer version or a discard superseded them.
    pub pages_dropped: u64,
    // -- as a directory node --
    pub gets_delegated: u64,
    pub dir_updates: u64,
    pub dir_rejects: u64,
    pub dir_removes: u64,
    pub dir_discards: u64,
    /// Registrations refused because the directory table was full (so were their puts):
    /// the node is the directory node of more pages than it was sized for.
    pub dir_full: u64,
    // -- background --
    pub tasks_issued: u64,
    pub task_retries: u64,
    /// Background updates that could not be queued (table full): the directory repairs
    /// lazily (a getpage that finds no copy removes the entry).
    pub task_overflow: u64,
    /// One-way notifications that could not be queued.
    pub outq_overflow: u64,
    /// Entries the scrub found pointing at a node without the page, and removed.
    pub scrub_removed: u64,
    /// Held copies registered again with a new directory node after a membership change
    /// moved their page's directory (repair instead of dropping them).
    pub reregistered: u64,
    // -- messages from nodes not entitled to send them (dropped or refused; see
    //    `crate::serve`) --
    /// Getpages from a non-member, and delegated or direct ones (which make a caching
    /// site serve, or hand over, its copy) from a node other than the page's directory.
    pub rejected_gets: u64,
    /// Putpages and movepages from a non-member.
    pub rejected_puts: u64,
    /// `PUTDONE`s that answer no put this node has in flight to their sender.
    pub rejected_putdones: u64,
    /// `DIRUPDATE`s from a non-member, naming another node than their sender, of a
    /// version beyond the directory's lead (`directory::VERSION_LEAD`), or leaping over a
    /// named copy (`directory::VERSION_STEP`).
    pub rejected_updates: u64,
    /// `DIRREMOVE`s from a non-member or naming another node than their sender.
    pub rejected_removes: u64,
    /// Discards from a non-member, of version `u64::MAX` (no writer's version), or
    /// leaping over a firm copy (`directory::VERSION_STEP`).
    pub rejected_discards: u64,
    /// `DROPPAGE`s and `DIRVERIFY`s not from the page's directory node.
    pub rejected_drops: u64,
    /// Heartbeats whose body speaks for another node than their sender.
    pub rejected_heartbeats: u64,
    /// Registrations (displacing another site's copy, or leaping) whose sender, asked, did
    /// not hold the copy it claimed: the displaced copy was named again, or the leap
    /// withdrawn (`directory.rs`).
    pub rejected_claims: u64,
}

impl GmsStats {
    /// All counters zero (`Default`, usable in `const` contexts).
    pub const ZERO: GmsStats = GmsStats {
        gets: 0,
        hits_local: 0,
        hits_2way: 0,
        hits_3way: 0,
        misses: 0,
        get_failures: 0,
        puts: 0,
        moves: 0,
        puts_stored: 0,
        discards: 0,
        op_timeouts: 0,
        gets_served: 0,
        gets_moved: 0,
        pages_stored: 0,
        puts_refused: 0,
        pages_dropped: 0,
        gets_delegated: 0,
        dir_updates: 0,
        dir_rejects: 0,
        dir_removes: 0,
        dir_discards: 0,
        dir_full: 0,
        tasks_issued: 0,
        task_retries: 0,
        task_overflow: 0,
        outq_overflow: 0,
        scrub_removed: 0,
        reregistered: 0,
        rejected_gets: 0,
        rejected_puts: 0,
        rejected_putdones: 0,
        rejected_updates: 0,
        rejected_removes: 0,
        rejected_discards: 0,
        rejected_drops: 0,
        rejected_heartbeats: 0,
        rejected_claims: 0,
    };

    /// Messages rejected because their sender was not entitled to send them (the sum of
    /// the `rejected_*` counters).
    pub fn unentitled(&self) -> u64 {
        self.rejected_gets
            + self.rejected_puts
            + self.rejected_putdones
            + self.rejected_updates
            + self.rejected_removes
            + self.rejected_discards
            + self.rejected_drops
            + self.rejected_heartbeats
            + self.rejected_claims
    }
}

impl Policy {
    /// The default policy (`Default`, usable in `const` contexts).
    pub const DEFAULT: Policy = Policy { reads: ReadPolicy::Sticky, writes: WritePolicy::WriteBack };
}
