// SPDX-License-Identifier: GPL-2.0-only
//! One GMS node: its page-frame directory (what it holds), its share of the global
//! directory, membership, pending client operations and background directory updates.
//! The client entry points are in [`super::client`], the server stubs in
//! [`super::serve`], background work and timeouts in [`super::tasks`], membership changes
//! in [`super::view`], directory naming in [`super::registration`], and the operation and
//! task tables in [`super::pending`].

use super::directory::{DirSlot, Directory};
use super::members::Members;
use super::net::prelude::*;
use super::net::ring::Ring;
use super::net::storage::Storage;
use super::ops::PutStatus;
use super::page::{PageId, Version};
use super::slots::{Notice, OpSlot, OpState, Task, TaskState};
use super::table::{Slot, Table};
use super::types::*;

/// What GMS needs from the runtime that owns the frames (and the NIC).
pub trait Host<F: Copy> {
    /// Copy `len` bytes from frame `from` into frame `to` (NetRPC's unsolicited+copy
    /// replies, and getpage hits on pages this node holds itself).
    fn copy_payload(&mut self, from: &F, to: &F, len: u32) -> bool;
    /// NetRPC or GMS no longer needs `frame` (a receive buffer, a refused page, the frame
    /// of a failed call — disarm its IPT entry first). Free or recycle it.
    fn release(&mut self, frame: F);
    /// GMS stopped holding `page` in `frame` (dropped, moved away, superseded, or its
    /// directory was lost). The frame may still be attached to transmits queued in the
    /// NetRPC or posted to the NIC: free it only after those sends complete. `dirty`: the
    /// only copy of modified data (write it back first).
    fn dropped(&mut self, page: PageId, frame: F, dirty: bool);
    /// A nonblocking client operation finished (runs from the receive path: no sleeping).
    fn completed(&mut self, done: Completion<F>) {
        let _ = done;
    }
    /// One frame naming the first `piece` bytes of each of `frames` in order, as one
    /// payload (a gather list: a `GETPAGES` reply's pages). It names them only for the
    /// send it goes into; [`Self::release`] of it ends it and never the frames it names.
    /// `None` (the default): this runtime does not gather (or not pieces of that size), and
    /// a `GETPAGES` is answered with a miss (asked page by page then).
    fn gather(&mut self, frames: &[F], piece: u32) -> Option<F> {
        let _ = (frames, piece);
        None
    }
    /// Let this node's NIC answer hinted getpages of a held copy by itself (its answer
    /// table: one-sided reads): `frame`'s first `len` bytes, with `reply` (the body of the
    /// reply a hit of it is). Returns the entry and key a requester names in its getpage
    /// (told it in `PUTDONE`); `again`: the copy's export so far, updated in place. GMS
    /// [`Self::retract`]s it before it stops holding the frame. `None` (the default): no
    /// answer table, or it is full; requests then reach this node as before.
    fn export(&mut self, again: Option<Answer>, frame: &F, len: u32, reply: &[u8]) -> Option<Answer> {
        let _ = (again, frame, len, reply);
        None
    }
    /// End an export ([`Self::export`]): GMS is about to let the frame go
    /// ([`Self::dropped`], or handed back to the runtime).
    fn retract(&mut self, answer: Answer) {
        let _ = answer;
    }
    /// A request for another service sharing this NetRPC (the default answers
    /// `UnknownOp` and releases a request payload).
    fn serve_other(&mut self, inc: &Incoming<'_, F>) -> Action<F> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        Action::Error(RpcError::UnknownOp)
    }
}

/// GMS stops holding `page` in `h.frame`: its export ends first (the NIC answers from it
/// no more), then the host is told ([`Host::dropped`]).
pub(super) fn let_go<F: Copy, H: Host<F>>(host: &mut H, page: PageId, h: &Held<F>) {
    if let Some(a) = h.answer {
        host.retract(a);
    }
    host.dropped(page, h.frame, h.dirty);
}

/// What [`GmsNode::age_out`] did with a held page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeOut<F> {
    /// Let go: the frame is the runtime's again (free it once sends carrying it are done).
    Gone(Held<F>),
    /// Dirty: kept until its writer cleans it.
    KeptDirty,
    /// Its registration is on its way: kept for now.
    Registering,
    NotHeld,
}

/// Whether the directory names a held copy yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldState {
    /// A `DIRUPDATE` is on its way (the copy is served if asked, but cannot be moved).
    Registering,
    /// The directory accepted it.
    Registered,
}

/// A page in this node's page-frame directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held<F> {
    pub frame: F,
    pub len: u32,
    pub version: Version,
    pub dirty: bool,
    /// The epoch ([`GmsNode::set_epoch`]) of the last access: input to the global LRU.
    pub last_access: u64,
    pub state: HeldState,
    /// The copy's identity at its version ([`super::directory`]): while `Registering`,
    /// the claim its registration carries (the giver's identity after a hand-over, 0 for
    /// a put); once `Registered`, the identity the directory gave it.
    pub seq: u64,
    /// Its directory node changed since it was named: the repair sweep registers it with
    /// the new one ([`GmsNode::drive`]).
    pub repair: bool,
    /// Where this node's NIC answers hinted getpages of it by itself ([`Host::export`]),
    /// once registered.
    pub answer: Option<Answer>,
}

/// One slot of the page-frame directory.
pub type HeldSlot<F> = Slot<PageId, Held<F>>;

/// Spaces with their own policy.
pub const POLICY_SLOTS: usize = 16;

/// One node of the Global Memory Service, as a sans-IO state machine.
///
/// `F` is the runtime's frame handle; `H` the runtime's [`Host`]; `S` the runtime's
/// [`Storage`], which holds the two tables that grow with the memory a node offers: the
/// page-frame directory (pages held) and this node's share of the directory (live entries
/// and tombstones), both sized when the node is made ([`GmsNode::with_capacity`]).
/// Fixed at build time: `MEMBERS` nodes, `OPS` client operations in flight, `TASKS`
/// background directory updates, `OUTQ` queued one-way notifications.
///
/// The node is NetRPC's context: it implements [`Runtime`] (dispatching GMS ops and
/// passing others to [`Host::serve_other`]), so the runtime owns an
/// `Rpc<GmsNode<..>, F>` next to it and passes both to the client entry points. After any
/// input to the `Rpc` (a message, timeouts) or to the node, call [`GmsNode::drive`] and
/// then drain the `Rpc`'s transmits.
pub struct GmsNode<
    F: Copy,
    H,
    S: Storage,
    const MEMBERS: usize = 16,
    const OPS: usize = 64,
    const TASKS: usize = 64,
    const OUTQ: usize = 64,
> {
    /// The runtime's side: frames, completions, other services.
    pub host: H,
    pub(super) id: u16,
    pub(super) cfg: GmsConfig,
    pub(super) now: u64,
    pub(super) epoch: u64,
    pub(super) members: Members<MEMBERS>,
    pub(super) held: Table<PageId, Held<F>, S::Buf<HeldSlot<F>>>,
    pub(super) dir: Directory<S::Buf<DirSlot>>,
    pub(super) ops: [OpSlot<F>; OPS],
    /// Where [`Self::alloc_op`] looks for a free slot first (one past the last one taken:
    /// operations mostly end in the order they began, so that slot is usually free).
    pub(super) op_hint: usize,
    /// No operation in flight has a deadline before this (a lower bound: `drive` scans
    /// the operation table for timeouts only once it has passed, and tightens it).
    pub(super) ops_deadline: u64,
    pub(super) events: Ring<OpId, OPS>,
    pub(super) tasks: [Task; TASKS],
    /// Every task is free (`drive` skips the task table); cleared when one is queued.
    pub(super) tasks_idle: bool,
    pub(super) outq: Ring<Notice, OUTQ>,
    pub(super) policies: [Option<(u64, Policy)>; POLICY_SLOTS],
    pub(super) default_policy: Policy,
    /// The held frame attached to the reply the last server stub returned: if NetRPC
    /// cannot send that reply it "releases" the frame, which GMS must not pass on.
    pub(super) lent: Option<F>,
    /// Next scrub step, and where it walks the two tables.
    pub(super) scrub_at: u64,
    pub(super) scrub_dir: usize,
    pub(super) scrub_held: usize,
    /// Where the repair sweep goes on looking for copies marked `repair` (`None`: none).
    pub(super) repair_from: Option<usize>,
    /// The directory share this node is rebuilding since its last membership change.
    pub(super) rebuild: Rebuild<MEMBERS>,
    pub(super) stats: GmsStats,
}

/// A node's directory share after membership changes: the pages it took over are
/// registered with it by their holders over the next moments ([`GmsConfig::rebuild_window`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rebuild<const M: usize> {
    Settled,
    /// Since `since`, pages whose directory was not this node in view `before` are being
    /// registered with it (`before` empty: every page it directs).
    Since {
        before: Members<M>,
        since: u64,
    },
}

impl<
        F: Copy + PartialEq,
        H: Host<F>,
        S: Storage,
        const MEMBERS: usize,
        const OPS: usize,
        const TASKS: usize,
        const OUTQ: usize,
    > GmsNode<F, H, S, MEMBERS, OPS, TASKS, OUTQ>
{
    const _FITS: () = assert!(OPS > 0 && OPS <= u16::MAX as usize && TASKS > 0 && TASKS <= u16::MAX as usize);

    /// Node `id`, alone in view 0 until the runtime sets the members, holding at most
    /// `held` pages and `dir` directory entries; `None` if `S` has no memory for them.
    pub fn with_capacity(id: u16, cfg: GmsConfig, host: H, held: usize, dir: usize) -> Option<Self> {
        Some(Self::new(id, cfg, host, S::buf(held, None)?, S::buf(dir, None)?))
    }

    /// Node `id` over tables the runtime made, every slot empty (`S::buf(n, None)`). A
    /// `const fn`: the kernel module copies a `static` made with empty buffers into its
    /// heap allocation (a node is too large for a kernel stack), then gives it its tables
    /// ([`GmsNode::set_tables`]) and identity ([`GmsNode::set_identity`]). With
    /// `MEMBERS` = 0 the node is alone with no directory.
    pub const fn new(id: u16, cfg: GmsConfig, host: H, held: S::Buf<HeldSlot<F>>, dir: S::Buf<DirSlot>) -> Self {
        let () = Self::_FITS;
        let members = Members::single(id);
        GmsNode {
            host,
            id,
            cfg,
            now: 0,
            epoch: 0,
            members,
            held: Table::over(held),
            dir: Directory::new(dir, cfg.tombstone_ttl),
            ops: [OpSlot::FREE; OPS],
            op_hint: 0,
            ops_deadline: u64::MAX,
            events: Ring::new(),
            tasks: [Task::FREE; TASKS],
            tasks_idle: true,
            outq: Ring::new(),
            policies: [None; POLICY_SLOTS],
            default_policy: Policy::DEFAULT,
            lent: None,
            scrub_at: 0,
            scrub_dir: 0,
            scrub_held: 0,
            repair_from: None,
            rebuild: Rebuild::Settled,
            stats: GmsStats::ZERO,
        }
    }

    /// Give a fresh node (made by [`GmsNode::new`], no input yet) new tables, every slot
    /// empty (`S::buf(n, None)`): the old ones are dropped.
    pub fn set_tables(&mut self, held: S::Buf<HeldSlot<F>>, dir: S::Buf<DirSlot>) {
        self.held = Table::over(held);
        self.dir = Directory::new(dir, self.cfg.tombstone_ttl);
    }

    /// Give a fresh node (made by [`GmsNode::new`], no input yet) its id and configuration.
    pub fn set_identity(&mut self, id: u16, cfg: GmsConfig) {
        self.id = id;
        self.cfg = cfg;
        self.dir.set_ttl(cfg.tombstone_ttl);
        self.members = Members::single(id);
    }

    // ---- getters ---------------------------------------------------------------------

    pub fn id(&self) -> u16 {
        self.id
    }
    pub fn config(&self) -> &GmsConfig {
        &self.cfg
    }
    pub fn stats(&self) -> GmsStats {
        self.stats
    }
    pub fn members(&self) -> &Members<MEMBERS> {
        &self.members
    }
    /// This node's share of the global directory.
    pub fn directory(&self) -> &Directory<S::Buf<DirSlot>> {
        &self.dir
    }
    /// The page-frame directory: what this node holds.
    pub fn holdings(&self) -> impl Iterator<Item = (&PageId, &Held<F>)> {
        self.held.iter()
    }
    pub fn held(&self, page: &PageId) -> Option<&Held<F>> {
        self.held.get(page)
    }
    pub fn held_count(&self) -> usize {
        self.held.len()
    }
    /// Directory entries this node has room for (live entries and tombstones).
    pub fn dir_capacity(&self) -> usize {
        self.dir.capacity()
    }
    /// The memory budget in pages.
    pub fn budget(&self) -> usize {
        self.cfg.budget.min(self.held.capacity())
    }
    /// Client operations not finished (or finished and not yet taken).
    pub fn ops_in_use(&self) -> usize {
        self.ops.iter().filter(|o| o.state != OpState::Free).count()
    }
    /// Background directory updates not finished.
    pub fn tasks_pending(&self) -> usize {
        self.tasks.iter().filter(|t| t.state != TaskState::Free).count()
    }
    pub fn policy(&self, space: u64) -> Policy {
        self.policies.iter().flatten().find(|(s, _)| *s == space).map_or(self.default_policy, |(_, p)| *p)
    }

    // ---- settings --------------------------------------------------------------------

    pub fn set_budget(&mut self, pages: usize) {
        self.cfg.budget = pages;
    }
    /// The current epoch of the global LRU (recorded as pages are accessed).
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }
    pub fn set_default_policy(&mut self, p: Policy) {
        self.default_policy = p;
    }
    /// The policy of one space (overrides the default).
    pub fn set_policy(&mut self, space: u64, p: Policy) -> Result<(), GmsError> {
        if let Some(slot) = self.policies.iter_mut().flatten().find(|(s, _)| *s == space) {
            slot.1 = p;
            return Ok(());
        }
        let free = self.policies.iter_mut().find(|s| s.is_none()).ok_or(GmsError::PoliciesFull)?;
        *free = Some((space, p));
        Ok(())
    }

    // ---- pages this node holds for itself ----------------------------------------------

    /// Make a page in one of the runtime's frames available to the cluster (e.g. read from
    /// disk): GMS holds `frame` from now on (until [`Host::dropped`] or
    /// [`GmsNode::drop_local`]) and registers it with the page's directory.
    pub fn hold(
        &mut self,
        now: u64,
        page: PageId,
        version: Version,
        frame: F,
        len: u32,
        dirty: bool,
    ) -> Result<(), GmsError> {
        self.enter(now);
        let dir = self.members.directory_of(&page).ok_or(GmsError::BadTarget)?;
        if self.held.contains(&page) || self.settling(&page) {
            return Err(GmsError::Busy);
        }
        if self.held.len() >= self.budget() || (dir != self.id && self.free_task().is_none()) {
            return Err(GmsError::Full);
        }
        let state = HeldState::Registering;
        let seq = super::directory::FRESH;
        let h = Held { frame, len, version, dirty, last_access: self.epoch, state, seq, repair: false, answer: None };
        self.held.insert(page, h).map_err(|_| GmsError::Full)?;
        self.register(page, None);
        Ok(())
    }

    /// Take a held page back (e.g. the global LRU ages it out): GMS forgets it and tells
    /// the directory; the frame is the runtime's again.
    ///
    /// A registered copy is un-named by its identity. A copy still registering has none
    /// yet: its registration goes on (a putter waiting on it is told `Failed` now), and if
    /// the directory names it, the identity in its answer is taken back exactly. A removal covering every identity instead could arrive late
    /// and un-name a copy of the same version handed to this node afterwards.
    pub fn drop_local(&mut self, now: u64, page: &PageId) -> Option<Held<F>> {
        self.enter(now);
        let h = self.held.remove(page)?;
        if let Some(a) = h.answer {
            self.host.retract(a);
        }
        match h.state {
            HeldState::Registered => {
                self.cancel_register(page, PutStatus::Failed);
                self.forget_copy(*page, h.version, h.seq);
            }
            HeldState::Registering => self.withdraw_register(page),
        }
        Some(h)
    }

    /// The global LRU's only way to let a held page go for room: a clean, registered copy
    /// is taken back ([`Self::drop_local`]); a dirty one is the only copy of data its
    /// writer has not written to its block server yet and is never discarded — it is kept
    /// until its writer cleans it (puts a clean version, which supersedes it, or discards
    /// it: [`crate::cached`]); a copy still registering cannot be let go yet.
    pub fn age_out(&mut self, now: u64, page: &PageId) -> AgeOut<F> {
        match self.held.get(page) {
            None => AgeOut::NotHeld,
            Some(h) if h.dirty => AgeOut::KeptDirty,
            Some(h) if h.state == HeldState::Registering => AgeOut::Registering,
            Some(_) => match self.drop_local(now, page) {
                Some(h) => AgeOut::Gone(h),
                None => AgeOut::NotHeld,
            },
        }
    }

    // ---- internals shared by the client, server and task halves ---------------------------

    /// Every entry point: note the time, and forget the frame lent to the last reply (its
    /// send was either queued or refused by now: NetRPC refuses it synchronously, and the
    /// runtime calls `drive` after every input).
    pub(super) fn enter(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.lent = None;
    }
}
