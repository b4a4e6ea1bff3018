// SPDX-License-Identifier: GPL-2.0-only
//! A volume on a block server cached in network memory (GMS over disk): the client-side
//! policy — sans-IO, `no_std`, no heap, no `unsafe` — for any runtime that moves the bytes.
//!
//! The volume is `blocks` blocks of one page each; block `b` is GMS page `(space, b)`.
//! - **read**: getpage first; on a miss, the block server, and the clean block goes into
//!   GMS (a put at a new version) behind the user's back.
//! - **write-through** ([`WritePolicy::WriteThrough`]): the block server, then a clean put.
//! - **write-back** ([`WritePolicy::WriteBack`]): *dirty* puts of [`Config::copies`] copies
//!   (2 by default) on distinct lenders; the write is acknowledged once GMS stored every
//!   copy, so one lender's death between the acknowledgement and the cleaning loses
//!   nothing. The copies are the replicas of [`crate::replica`] (copy `k` is GMS page
//!   `replica(page, k)`, all at the write's version), put one after another: copy `k`'s
//!   put names the lenders of copies `0..k` ([`Command::Put`]'s `apart`), which the
//!   runtime keeps clear of with the same placement as [`crate::store`]'s replicas
//!   ([`crate::placement::Placement::pick_avoiding`]). A dirty write that cannot place
//!   every copy (fewer live lenders than copies, a copy refused or unanswered, or stored
//!   beside another copy) is never acknowledged with fewer: it falls back to
//!   write-through, counted in [`Stats::short_copies`].
//!
//!   The writer records every dirty page ([`Rec`]) and is responsible for it: it *cleans*
//!   it — getpage (copy 0, the next copy while one misses), block write, then a clean put
//!   of copy 0 at a newer version (which supersedes its dirty copy, or a discard) and a
//!   discard of every other copy — when the record table passes [`Config::clean_at`] or a
//!   flush asks. The holder never lets a dirty page go for room
//!   ([`crate::node::GmsNode::age_out`]), so nothing dirty is discarded before it is
//!   written. Once a dirty put is refused (the lenders are full of dirty pages), cleaning
//!   runs whatever the record count until one stores again. A dirty put that is refused or
//!   whose outcome is unknown falls back to write-through (the block write, then a clean
//!   put at a newer version — or a discard — covering any dirty copy that did land, and
//!   the discard of the other copies).
//!
//!   Why copies: the GMS-over-Trapeze paper's write-back variant (a scratch file system
//!   whose dirty blocks go to global memory without reaching the disk) runs writes at
//!   network speed but, as the paper says, loses file data when a caching site fails;
//!   its default writes a dirty block to disk as it is demoted to global memory, so
//!   unwritten data only ever waits in the writer's own memory (lost only with the writer
//!   itself, as with a local page cache). Here the dirty data stays in network memory —
//!   the writer holds no dirty buffers (the core keeps none: `no_std`, no heap) — and is
//!   safe against a lender's failure the way [`crate::store`]'s writes are: a write is
//!   acknowledged with its copies on distinct members.
//!
//!   A lender's death ([`Cache::handle_lender_lost`], from the runtime's membership) may
//!   leave dirty pages with fewer copies: every page dirty then is cleaned at once, so a
//!   second death soon after finds as few of them as the cleaning allows.
//! - **flush**: every page dirty when the flush was accepted is cleaned, then the block
//!   server's `FLUSH` is acknowledged: all of it durable on the server's disk. A dirty page
//!   whose every copy is gone (all its holders died) is [`CachedError::Lost`]: a read of
//!   it fails and so does every flush until the page is written again — never is an older
//!   block read in its place.
//!
//! **One job per page at a time**: a request on a page waits for the job before it (user
//! request, cleaning) to end, so versions of a page are issued in order and no clean
//! insertion of an old block can pass a newer write. Versions come from one counter per
//! volume, starting at [`Config::first_version`] (the runtime makes it exceed every
//! version it put before).
//!
//! **Call order**, for a driver: [`Cache::read`], [`Cache::write`], [`Cache::flush`]; then
//! [`Cache::poll_command`] until `None`, executing each (a `Put` or `BlockWrite` takes its
//! buffer's bytes when executed); report every command's end (`handle_*`); then
//! [`Cache::poll_done`]. Every command ends (GMS and the block calls have their own
//! timeouts), so the core has no timer of its own. Capacities are const generics: `JOBS`
//! jobs (user requests and cleanings; one is kept for cleaning) and `DIRTY` records.

use super::net::ring::Ring;
use super::page::{PageId, Version};
use super::replica::{replica, MAX_REPLICAS};
use super::types::{PutResult, WritePolicy};
use core::fmt;

mod ends;
mod jobs;
#[cfg(test)]
mod tests;

/// How a cached volume behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The GMS space of its pages.
    pub space: u64,
    /// Blocks (pages) in the volume.
    pub blocks: u64,
    pub writes: WritePolicy,
    /// The first version put (every later one is larger).
    pub first_version: u64,
    /// Sends of one GMS or block operation at most before the job gives up.
    pub tries: u8,
    /// Dirty records at which cleaning starts without a flush (≤ `DIRTY`).
    pub clean_at: u16,
    /// Copies of a dirty page, on distinct lenders, before a write-back write is
    /// acknowledged (1..=[`MAX_REPLICAS`]): `copies - 1` lenders may die before it is
    /// cleaned. 1 is the user's choice to risk acknowledged writes on one lender.
    pub copies: u8,
}

impl Config {
    pub const DEFAULT: Config = Config {
        space: 0,
        blocks: 0,
        writes: WritePolicy::WriteBack,
        first_version: 1,
        tries: 3,
        clean_at: 48,
        copies: 2,
    };
}

/// Why a request was refused or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedError {
    /// The block is past the end of the volume.
    PastEnd,
    /// No job is free: submit again after a completion.
    Busy,
    /// The page was written back (dirty) and every copy of it is gone.
    Lost { block: u64 },
    /// The block server failed or refused a block operation, every try.
    Block { block: Option<u64>, fault: BlockFault },
    /// A dirty page could not be fetched from GMS to be cleaned (no answer, every try).
    Unreachable { block: u64 },
}

impl fmt::Display for CachedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CachedError::PastEnd => f.write_str("the block is past the end of the cached volume"),
            CachedError::Busy => f.write_str("every job of the cached volume is in use"),
            CachedError::Lost { block } => {
                write!(f, "block {block} was written back and every copy of it in network memory is gone")
            }
            CachedError::Block { block: Some(b), fault } => write!(f, "block {b}: the block server: {fault:?}"),
            CachedError::Block { block: None, fault } => write!(f, "flush: the block server: {fault:?}"),
            CachedError::Unreachable { block } => write!(f, "block {block}: its dirty copy did not answer"),
        }
    }
}

/// How one block operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFault {
    /// The server answered with this error code (not retried).
    Refused(u16),
    /// No answer, or the call could not be made.
    Failed,
}

/// How a getpage ended, as the cache needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    /// The page is in the job's buffer at `version`.
    Hit { version: Version },
    /// GMS holds no copy (at the version asked, or newer).
    Miss,
    /// The call failed, or could not be issued: nothing is known.
    Failed,
}

/// Whether a put's copy is the only one of its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dirt {
    /// The block server has the data.
    Clean,
    /// Only GMS has it: never discarded before its writer cleans it.
    Dirty,
}

/// Whose bytes a command moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf<Io> {
    /// The user's request buffer.
    User(Io),
    /// The driver's scratch page of job `job` (a cleaning's).
    Scratch(u16),
}

/// What the driver does next. Each names its job, to be passed back with its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Command<Io> {
    /// Getpage `page` (no copy older than `at_least`) into `buf` → [`Cache::handle_get`].
    Get { job: u16, page: PageId, at_least: Version, buf: Buf<Io> },
    /// Putpage `buf`'s bytes as `page` at `version` → [`Cache::handle_put`], on a lender
    /// that is none of `apart` (the holders of the page's other copies).
    Put { job: u16, page: PageId, version: Version, dirt: Dirt, buf: Buf<Io>, apart: Holders },
    /// Discard `page` up to `version` → [`Cache::handle_discard`].
    Discard { job: u16, page: PageId, version: Version },
    /// Read `block` into `buf` → [`Cache::handle_block`].
    BlockRead { job: u16, block: u64, buf: Buf<Io> },
    /// Write `buf`'s bytes to `block` → [`Cache::handle_block`].
    BlockWrite { job: u16, block: u64, buf: Buf<Io> },
    /// The block server's `FLUSH` → [`Cache::handle_block`].
    BlockFlush { job: u16 },
}

/// Where a finished request's data was, or went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// Read from network memory.
    FromGms,
    /// Read from the block server (a miss).
    FromBlock,
    /// Written to network memory, dirty (write-back).
    Dirty,
    /// Written to the block server.
    Through,
    /// Every write before the flush is durable on the server's disk.
    Flushed,
}

/// A finished request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done<Io> {
    pub io: Io,
    pub result: Result<Served, CachedError>,
}

/// What a cached volume counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Reads accepted (one refused [`CachedError::Busy`] is not counted).
    pub reads: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub writes_dirty: u64,
    pub writes_through: u64,
    /// Dirty puts refused or failed, written through instead.
    pub fallbacks: u64,
    /// Of those, write-back writes that stored some copies but not all (too few live
    /// lenders, a later copy refused, unanswered or beside another): written through.
    pub short_copies: u64,
    /// Dirty pages read or cleaned from a copy other than the first (the first was gone or
    /// did not answer).
    pub from_spare: u64,
    /// Dirty pages written to the block server (cleanings that wrote).
    pub cleaned: u64,
    /// Dirty pages whose every copy was gone when they were cleaned or read.
    pub lost: u64,
    /// Cleanings that failed (block error, GMS unreachable): the page stays dirty.
    pub clean_failures: u64,
    /// Flushes accepted.
    pub flushes: u64,
    /// Clean puts (insertions after a miss, after a write-through or a cleaning).
    pub clean_puts: u64,
    /// Discards sent because a clean put did not store.
    pub discards: u64,
    /// Discards of a cleaned page's other copies (copies 1.. of a write-back write).
    pub copies_dropped: u64,
    /// Pages left [`Rec::Stale`] (neither the clean put nor the discard went through, or
    /// a write failed whose dirty copy may have landed).
    pub stale: u64,
}

/// The writer's record of a page it put dirty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rec {
    Free,
    /// Only GMS holds `block`'s data, at `version`, in every copy; `seq` orders it against
    /// flushes.
    Dirty {
        block: u64,
        version: Version,
        seq: u64,
    },
    /// Its last cleaning failed so (retried on the next flush, which reports it).
    Stuck {
        block: u64,
        version: Version,
        seq: u64,
        error: CachedError,
    },
    /// Every copy is gone: reads and flushes fail until the block is written again.
    Lost {
        block: u64,
        seq: u64,
    },
    /// The block server has the data; GMS may still hold older copies, below `version`,
    /// that could not be superseded (clean put and discard failed, or another copy's
    /// discard): reads take no copy below it, and the next clean put of the block (a
    /// read's insertion, a write) supersedes them and discards the other copies again.
    /// Until then such a dirty copy keeps its holder's frame.
    Stale {
        block: u64,
        version: Version,
    },
}

impl Rec {
    fn block(&self) -> Option<u64> {
        match *self {
            Rec::Free => None,
            Rec::Dirty { block, .. }
            | Rec::Stuck { block, .. }
            | Rec::Lost { block, .. }
            | Rec::Stale { block, .. } => Some(block),
        }
    }
    fn seq(&self) -> u64 {
        match *self {
            Rec::Free | Rec::Stale { .. } => u64::MAX,
            Rec::Dirty { seq, .. } | Rec::Stuck { seq, .. } | Rec::Lost { seq, .. } => seq,
        }
    }
}

/// What a job is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Not begun: waits for the job before it on the page.
    Start(Kind),
    /// A read's getpage of copy `copy` (of a dirty page: a miss asks the next copy, and
    /// after the last the page is lost — or unreachable if one of them did not answer); then its
    /// block read; then its clean insertion.
    Get {
        at_least: Version,
        dirt: Dirt,
        copy: u8,
        replies: Replies,
    },
    Read,
    Insert {
        version: Version,
    },
    /// A write-back write's dirty put of copy `copy`, apart from the lenders of the
    /// copies before it.
    PutDirty {
        version: Version,
        copy: u8,
        held: Holders,
    },
    /// A write-through write's block write (or a fallback's); then its clean put.
    WriteThrough,
    PutClean {
        version: Version,
    },
    /// A clean put that did not store: the page's versions up to `version` are discarded.
    Discard {
        version: Version,
    },
    /// The page is clean: copy `copy` (≥ 1) of a write-back write, up to `version`, is
    /// discarded so that its holder may let it go.
    DropCopy {
        version: Version,
        copy: u8,
    },
    /// A cleaning's getpage of dirty copy `copy` (the next while one misses), then its
    /// block write.
    Fetch {
        version: Version,
        copy: u8,
        replies: Replies,
    },
    Clean {
        version: Version,
    },
    /// A flush waiting for the pages dirty at its start to be cleaned, then the server's.
    FlushWait {
        upto: u64,
    },
    Flush,
}

/// Whether every copy of a dirty page asked so far answered (a miss), or one did not
/// (a copy may still be there: the page is unreachable, not lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replies {
    AllMissed,
    NoAnswer,
}

/// Whether a job may leave copies other than copy 0 of its page in GMS (the page had a
/// record, or the job put them): once the page is clean they are discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spares {
    None,
    Maybe,
}

/// The lenders holding a dirty page's copies so far, which the next copy's put keeps
/// clear of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holders {
    nodes: [u16; MAX_REPLICAS as usize],
    len: u8,
}

impl Holders {
    pub const NONE: Holders = Holders { nodes: [0; MAX_REPLICAS as usize], len: 0 };

    /// The lenders, for [`crate::placement::Placement::pick_avoiding`].
    pub fn as_slice(&self) -> &[u16] {
        &self.nodes[..usize::from(self.len)]
    }

    pub fn contains(&self, node: u16) -> bool {
        self.as_slice().contains(&node)
    }

    /// These and `node` (unchanged when full).
    fn with(mut self, node: u16) -> Holders {
        if let Some(n) = self.nodes.get_mut(usize::from(self.len)) {
            *n = node;
            self.len += 1;
        }
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Clean,
    Flush,
}

/// Whether a job's current step waits to be issued or for its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Ready,
    Flying,
}

#[derive(Clone, Copy, Debug)]
struct Job<Io> {
    /// The user's request (`None`: a cleaning, or a read already handed back).
    io: Option<Io>,
    /// The block (`None`: a flush).
    block: Option<u64>,
    order: u64,
    step: Step,
    phase: Phase,
    tries: u8,
    spares: Spares,
}

/// The cached-volume policy for one volume.
pub struct Cache<Io: Copy, const JOBS: usize, const DIRTY: usize> {
    cfg: Config,
    jobs: [Option<Job<Io>>; JOBS],
    recs: [Rec; DIRTY],
    done: Ring<Done<Io>, JOBS>,
    next_version: u64,
    /// Whether GMS refused the last dirty put (its lenders are full): then cleaning runs
    /// whatever the record count, until a dirty put stores again.
    room: Room,
    seq: u64,
    /// Dirty pages up to this `seq` are cleaned at once: a lender died after they were
    /// acknowledged, and some may be down to fewer copies ([`Cache::handle_lender_lost`]).
    rescue: u64,
    order: u64,
    stats: Stats,
}

/// How GMS took the last dirty put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Room {
    Stored,
    Refused,
}

/// What is wrong with a cached volume's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// No block, fewer than two jobs, no record, `clean_at` zero or above `DIRTY`, no
    /// try, version 0 (the "any" of getpage), or copies outside 1..=[`MAX_REPLICAS`].
    Sizes,
    /// The space's top four bits are set: they number a page's copies
    /// ([`crate::replica`]).
    Space,
}
