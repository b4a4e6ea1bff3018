// SPDX-License-Identifier: GPL-2.0-only
//! One GMS node: its page-frame directory (what it holds), its share of the global
//! directory, membership, pending client operations and background directory updates.
//! The client entry points are in [`super::client`], the server stubs in
//! [`super::serve`], background work and timeouts in [`super::tasks`].

use super::directory::{Directory, Update, NO_SITE};
use super::members::Members;
use super::net::prelude::*;
use super::net::ring::Ring;
use super::ops::{AckStatus, PutDone, PutStatus};
use super::page::{PageId, Version};
use super::table::Table;
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
    /// A request for another service sharing this NetRPC (the default answers
    /// `UnknownOp` and releases a request payload).
    fn serve_other(&mut self, inc: &Incoming<'_, F>) -> Action<F> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        Action::Error(RpcError::UnknownOp)
    }
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Get,
    Put,
    Move,
    Discard,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpState {
    Free,
    InFlight,
    /// Wait mode: finished, waiting for `take`.
    Done,
}

#[derive(Clone, Copy)]
pub(super) struct OpSlot<F> {
    pub(super) state: OpState,
    pub(super) generation: u32,
    pub(super) kind: OpKind,
    pub(super) mode: Mode,
    pub(super) page: PageId,
    pub(super) version: Version,
    /// Where the request went (directory, caching site, or put target).
    pub(super) dst: u16,
    pub(super) view: u64,
    pub(super) moving: bool,
    pub(super) call: Option<CallId>,
    pub(super) deadline: u64,
    pub(super) timed_out: bool,
    pub(super) done: Option<Completion<F>>,
}

impl<F> OpSlot<F> {
    const FREE: OpSlot<F> = OpSlot {
        state: OpState::Free,
        generation: 1,
        kind: OpKind::Get,
        mode: Mode::NonBlocking,
        page: PageId::new(0, 0),
        version: Version(0),
        dst: NO_SITE,
        view: 0,
        moving: false,
        call: None,
        deadline: 0,
        timed_out: false,
        done: None,
    };
}

/// Background directory maintenance, retried until answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskKind {
    /// `DIRUPDATE`: name this node as the holder of its copy.
    Register,
    /// `DIRREMOVE`: this node no longer holds the page.
    Remove,
    /// `DROPPAGE` to `site`: it holds a superseded copy.
    Drop,
    /// `DIRVERIFY` to `site` (scrub): un-name it unless it holds the page.
    Verify,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskState {
    Free,
    /// Send at this time.
    Due(u64),
    /// Failed: the next `drive` schedules a retry.
    Backoff,
    InFlight {
        call: CallId,
        deadline: u64,
    },
    /// Ended while its call was in flight: the next `drive` cancels the call.
    Cancel(CallId),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Task {
    pub(super) state: TaskState,
    pub(super) generation: u32,
    pub(super) kind: TaskKind,
    pub(super) page: PageId,
    pub(super) version: Version,
    /// The version the call in flight carries.
    pub(super) sent: Version,
    pub(super) site: u16,
    /// A putter waiting for this registration: (node, its operation).
    pub(super) notify: Option<(u16, OpId)>,
    pub(super) attempts: u32,
}

impl Task {
    /// Work still to do (not free, not being cancelled).
    pub(super) fn live(&self) -> bool {
        !matches!(self.state, TaskState::Free | TaskState::Cancel(_))
    }

    const FREE: Task = Task {
        state: TaskState::Free,
        generation: 1,
        kind: TaskKind::Remove,
        page: PageId::new(0, 0),
        version: Version(0),
        sent: Version(0),
        site: NO_SITE,
        notify: None,
        attempts: 0,
    };
}

/// A queued one-way `PUTDONE`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Notice {
    pub(super) dst: u16,
    pub(super) done: PutDone,
}

/// Spaces with their own policy.
pub const POLICY_SLOTS: usize = 16;

/// One node of the Global Memory Service, as a sans-IO state machine.
///
/// `F` is the runtime's frame handle; `H` the runtime's [`Host`]. Capacities: `MEMBERS`
/// nodes, `HELD` pages in the page-frame directory, `DIR` directory entries (live and
/// tombstones), `OPS` client operations in flight, `TASKS` background directory updates,
/// `OUTQ` queued one-way notifications.
///
/// The node is NetRPC's context: it implements [`Runtime`] (dispatching GMS ops and
/// passing others to [`Host::serve_other`]), so the runtime owns an
/// `Rpc<GmsNode<..>, F>` next to it and passes both to the client entry points. After any
/// input to the `Rpc` (a message, timeouts) or to the node, call [`GmsNode::drive`] and
/// then drain the `Rpc`'s transmits.
pub struct GmsNode<
    F: Copy,
    H,
    const MEMBERS: usize = 16,
    const HELD: usize = 1024,
    const DIR: usize = 2048,
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
    pub(super) held: Table<PageId, Held<F>, HELD>,
    pub(super) dir: Directory<DIR>,
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
    pub(super) stats: GmsStats,
}

impl<
        F: Copy + PartialEq,
        H: Host<F>,
        const MEMBERS: usize,
        const HELD: usize,
        const DIR: usize,
        const OPS: usize,
        const TASKS: usize,
        const OUTQ: usize,
    > GmsNode<F, H, MEMBERS, HELD, DIR, OPS, TASKS, OUTQ>
{
    const _FITS: () = assert!(OPS > 0 && OPS <= u16::MAX as usize && TASKS > 0 && TASKS <= u16::MAX as usize);

    /// Node `id`, alone in view 0 until the runtime sets the members. A `const fn`: the
    /// kernel module copies a `static` made with it into its heap allocation (a node is
    /// too large for a kernel stack), then calls [`GmsNode::set_identity`]. With
    /// `MEMBERS` = 0 the node is alone with no directory.
    pub const fn new(id: u16, cfg: GmsConfig, host: H) -> Self {
        let () = Self::_FITS;
        let members = Members::single(id);
        GmsNode {
            host,
            id,
            cfg,
            now: 0,
            epoch: 0,
            members,
            held: Table::new(),
            dir: Directory::new(cfg.tombstone_ttl),
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
            stats: GmsStats::ZERO,
        }
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
    pub fn directory(&self) -> &Directory<DIR> {
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
    /// The memory budget in pages.
    pub fn budget(&self) -> usize {
        self.cfg.budget.min(HELD)
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

    // ---- membership ------------------------------------------------------------------

    /// A new view from the membership service.
    pub fn set_members<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        view: u64,
        ids: &[u16],
    ) -> Result<(), GmsError> {
        self.enter(now);
        let old = self.members;
        self.members.set(view, ids).map_err(|_| GmsError::MembersFull)?;
        self.view_changed(rpc, &old);
        Ok(())
    }

    /// Node `n` joined (the view number advances by one on every node).
    pub fn join<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        n: u16,
    ) -> Result<(), GmsError> {
        self.enter(now);
        let old = self.members;
        if self.members.add(n).map_err(|_| GmsError::MembersFull)? {
            self.view_changed(rpc, &old);
        }
        Ok(())
    }

    /// Node `n` left or died: directory entries naming it are removed, pages whose
    /// directory it was are dropped (their records died with it), operations waiting on
    /// it fail now.
    pub fn node_failed<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        n: u16,
    ) {
        self.enter(now);
        let old = self.members;
        if self.members.remove(n) {
            self.view_changed(rpc, &old);
        }
    }

    /// A graceful leave is a failure as far as the protocol core goes (move pages away
    /// first with [`GmsNode::movepage`]).
    pub fn leave<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        n: u16,
    ) {
        self.node_failed(now, rpc, n)
    }

    fn view_changed<const C: usize, const K: usize, const X: usize>(
        &mut self,
        rpc: &mut Rpc<Self, F, C, K, X>,
        old: &Members<MEMBERS>,
    ) {
        let me = self.id;
        let new = self.members;
        let now = self.now;
        // The directory keeps only pages it still owns, and forgets departed holders.
        self.dir.retain_pages(|p| new.directory_of(p) == Some(me));
        for &n in old.ids() {
            if !new.contains(n) {
                self.dir.site_failed(n, now);
            }
        }
        // A copy whose directory moved has lost its record (or has it elsewhere): drop it.
        let stay = new.contains(me);
        let host = &mut self.host;
        let mut dropped = 0;
        self.held.retain(|p, h| {
            if stay && old.directory_of(p) == new.directory_of(p) {
                true
            } else {
                host.dropped(*p, h.frame, h.dirty);
                dropped += 1;
                false
            }
        });
        self.stats.pages_dropped += dropped;
        // Background work that lost its object.
        for i in 0..TASKS {
            let t = self.tasks[i];
            let keep = match t.kind {
                _ if !t.live() => continue,
                TaskKind::Register => self.held.get(&t.page).is_some_and(|h| h.version == t.version),
                TaskKind::Remove => old.directory_of(&t.page) == new.directory_of(&t.page),
                TaskKind::Drop => new.contains(t.site),
                TaskKind::Verify => new.contains(t.site) && new.directory_of(&t.page) == Some(me),
            };
            if !keep {
                self.end_task(i, PutStatus::Failed);
                if let TaskState::Cancel(call) = self.tasks[i].state {
                    // Its continuation finds the task gone and ignores the outcome.
                    let _ = rpc.cancel(self, call);
                    self.tasks[i].state = TaskState::Free;
                }
            }
        }
        // Operations waiting on a departed node fail now.
        for i in 0..OPS {
            let o = self.ops[i];
            if o.state != OpState::InFlight || new.contains(o.dst) || o.dst == NO_SITE {
                continue;
            }
            match o.call {
                Some(call) => {
                    if rpc.cancel(self, call).is_err() {
                        self.fail_op(i, RpcError::Cancelled);
                    }
                }
                None => self.fail_op(i, RpcError::Cancelled),
            }
        }
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
        if self.held.contains(&page) {
            return Err(GmsError::Busy);
        }
        if self.held.len() >= self.budget() || (dir != self.id && self.free_task().is_none()) {
            return Err(GmsError::Full);
        }
        let h = Held { frame, len, version, dirty, last_access: self.epoch, state: HeldState::Registering };
        self.held.insert(page, h).map_err(|_| GmsError::Full)?;
        self.register(page, None);
        Ok(())
    }

    /// Take a held page back (e.g. the global LRU ages it out): GMS forgets it and tells
    /// the directory; the frame is the runtime's again.
    pub fn drop_local(&mut self, now: u64, page: &PageId) -> Option<Held<F>> {
        self.enter(now);
        let h = self.held.remove(page)?;
        self.cancel_register(page, PutStatus::Failed);
        self.forget_site(*page, h.version);
        Some(h)
    }

    // ---- internals shared by the client, server and task halves ---------------------------

    /// Every entry point: note the time, and forget the frame lent to the last reply (its
    /// send was either queued or refused by now: NetRPC refuses it synchronously, and the
    /// runtime calls `drive` after every input).
    pub(super) fn enter(&mut self, now: u64) {
        self.now = self.now.max(now);
        self.lent = None;
    }

    pub(super) fn op_id(&self, i: usize) -> OpId {
        OpId { slot: i as u16, generation: self.ops[i].generation }
    }

    pub(super) fn alloc_op(
        &mut self,
        kind: OpKind,
        mode: Mode,
        page: PageId,
        version: Version,
    ) -> Result<usize, GmsError> {
        let start = self.op_hint % OPS;
        let i = (start..OPS).chain(0..start).find(|&i| self.ops[i].state == OpState::Free).ok_or(GmsError::OpsFull)?;
        self.op_hint = i + 1;
        let deadline = self.now.saturating_add(self.cfg.op_timeout);
        self.ops_deadline = self.ops_deadline.min(deadline);
        let o = &mut self.ops[i];
        o.state = OpState::InFlight;
        o.kind = kind;
        o.mode = mode;
        o.page = page;
        o.version = version;
        o.dst = NO_SITE;
        o.view = self.members.view();
        o.moving = false;
        o.call = None;
        o.deadline = deadline;
        o.timed_out = false;
        o.done = None;
        Ok(i)
    }

    pub(super) fn free_op(&mut self, i: usize) {
        let o = &mut self.ops[i];
        o.state = OpState::Free;
        o.generation = o.generation.wrapping_add(1).max(1);
        o.call = None;
        o.done = None;
    }

    /// Finish operation `i` exactly once: hand the result to the host (nonblocking) or
    /// park it for `take` (wait).
    pub(super) fn finish(&mut self, i: usize, result: OpResult<F>) {
        let o = self.ops[i];
        if o.state != OpState::InFlight {
            return;
        }
        let done = Completion { op: self.op_id(i), page: o.page, result };
        match o.mode {
            Mode::NonBlocking => {
                self.free_op(i);
                self.host.completed(done);
            }
            Mode::Wait => {
                self.ops[i].state = OpState::Done;
                self.ops[i].call = None;
                self.ops[i].done = Some(done);
                // Cannot overflow: one event per slot until it is taken.
                let _ = self.events.push(done.op);
            }
        }
    }

    /// Finish operation `i` as failed (no reply will come).
    pub(super) fn fail_op(&mut self, i: usize, e: RpcError) {
        let result = match self.ops[i].kind {
            OpKind::Get => {
                self.stats.get_failures += 1;
                OpResult::Get(GetResult::Miss { reason: MissReason::Failed(e), frame: None })
            }
            OpKind::Put | OpKind::Move => OpResult::Put(PutResult::Failed),
            OpKind::Discard => OpResult::Discard(DiscardResult::Failed),
        };
        self.finish(i, result);
    }

    /// Queue a one-way `PUTDONE`.
    pub(super) fn notify(&mut self, to: Option<(u16, OpId)>, page: PageId, version: Version, status: PutStatus) {
        let Some((dst, tag)) = to else { return };
        let done = PutDone { page, version, tag, status, site: self.id };
        if self.outq.push(Notice { dst, done }).is_err() {
            self.stats.outq_overflow += 1;
        }
    }

    pub(super) fn free_task(&self) -> Option<usize> {
        self.tasks.iter().position(|t| t.state == TaskState::Free)
    }

    /// Queue background work (merged with the same work already queued). `false` if the
    /// table is full.
    pub(super) fn queue_task(
        &mut self,
        kind: TaskKind,
        page: PageId,
        version: Version,
        site: u16,
        notify: Option<(u16, OpId)>,
    ) -> bool {
        let same = |t: &Task| t.live() && t.kind == kind && t.page == page && t.site == site;
        if let Some(t) = self.tasks.iter_mut().find(|t| same(t)) {
            // A registration is for the copy held now; removals and drops cover the
            // newest version asked for.
            t.version = if kind == TaskKind::Register { version } else { t.version.max(version) };
            if notify.is_some() {
                t.notify = notify;
            }
            return true;
        }
        let Some(i) = self.free_task() else {
            self.stats.task_overflow += 1;
            return false;
        };
        let now = self.now;
        self.tasks_idle = false;
        let t = &mut self.tasks[i];
        t.state = TaskState::Due(now);
        t.kind = kind;
        t.page = page;
        t.version = version;
        t.sent = version;
        t.site = site;
        t.notify = notify;
        t.attempts = 0;
        true
    }

    /// End task `i`, telling a waiting putter `status`. A call in flight is cancelled by
    /// the next `drive` (its outcome is ignored: the generation moved on).
    pub(super) fn end_task(&mut self, i: usize, status: PutStatus) {
        let t = self.tasks[i];
        if matches!(t.state, TaskState::Free | TaskState::Cancel(_)) {
            return;
        }
        self.tasks[i].state = match t.state {
            TaskState::InFlight { call, .. } => TaskState::Cancel(call),
            _ => TaskState::Free,
        };
        self.tasks[i].notify = None;
        self.tasks[i].generation = t.generation.wrapping_add(1).max(1);
        if t.kind == TaskKind::Register {
            self.notify(t.notify, t.page, t.version, status);
        }
    }

    /// A held copy went away: its pending registration ends.
    pub(super) fn cancel_register(&mut self, page: &PageId, status: PutStatus) {
        if let Some(i) = self.tasks.iter().position(|t| t.live() && t.kind == TaskKind::Register && t.page == *page) {
            self.end_task(i, status);
        }
    }

    /// Have the directory name this node for its held copy of `page`: applied here when
    /// this node is the directory, else through a `DIRUPDATE` task (the caller checked
    /// there is room).
    pub(super) fn register(&mut self, page: PageId, notify: Option<(u16, OpId)>) {
        let Some(h) = self.held.get(&page).copied() else { return };
        if self.members.directory_of(&page) == Some(self.id) {
            let status = self.apply_update(page, self.id, h.version);
            self.registered(page, h.version, status, notify);
        } else if !self.queue_task(TaskKind::Register, page, h.version, self.id, notify) {
            self.drop_held(&page, h.version);
            self.notify(notify, page, h.version, PutStatus::Refused);
        }
    }

    /// The directory answered a registration of `page` at `version`.
    pub(super) fn registered(
        &mut self,
        page: PageId,
        version: Version,
        status: AckStatus,
        notify: Option<(u16, OpId)>,
    ) {
        let ours = self.held.get(&page).is_some_and(|h| h.version == version);
        match status {
            AckStatus::Ok if ours => {
                if let Some(h) = self.held.get_mut(&page) {
                    h.state = HeldState::Registered;
                }
                self.notify(notify, page, version, PutStatus::Stored);
            }
            AckStatus::Ok => {
                // Named for a copy this node no longer has: take the name back.
                self.forget_site(page, version);
                self.notify(notify, page, version, PutStatus::Failed);
            }
            AckStatus::Rejected => {
                // A rejected version is older than what the directory names (a live
                // entry's version is at least its floor), so no copy of ours is named.
                if ours {
                    self.drop_held(&page, version);
                }
                self.notify(notify, page, version, PutStatus::Superseded);
            }
            AckStatus::WrongView => {
                self.drop_held(&page, version);
                self.notify(notify, page, version, PutStatus::WrongView);
            }
            AckStatus::NotDirectory | AckStatus::Busy => {
                self.drop_held(&page, version);
                self.notify(notify, page, version, PutStatus::Refused);
            }
        }
    }

    /// This node no longer holds `page` up to `version`: un-name it in the directory.
    pub(super) fn forget_site(&mut self, page: PageId, version: Version) {
        if self.members.directory_of(&page) == Some(self.id) {
            if self.dir.remove(&page, self.id, version, self.now) {
                self.stats.dir_removes += 1;
            }
        } else {
            self.queue_task(TaskKind::Remove, page, version, self.id, None);
        }
    }

    /// Drop the held copy of `page` if it is at `version` or older. Returns whether it did.
    pub(super) fn drop_held(&mut self, page: &PageId, version: Version) -> bool {
        match self.held.get(page) {
            Some(h) if h.version <= version => {}
            _ => return false,
        }
        let Some(h) = self.held.remove(page) else { return false };
        self.cancel_register(page, PutStatus::Superseded);
        self.stats.pages_dropped += 1;
        self.host.dropped(*page, h.frame, h.dirty);
        true
    }

    /// The directory side of `DIRUPDATE` (also applied locally): name `site` as the holder
    /// of `page` at `version`, and have a displaced holder drop its copy.
    pub(super) fn apply_update(&mut self, page: PageId, site: u16, version: Version) -> AckStatus {
        if !self.members.contains(site) {
            self.stats.dir_rejects += 1;
            return AckStatus::Rejected;
        }
        let Some(prev) = self.dir.check(&page, version) else {
            self.stats.dir_rejects += 1;
            return AckStatus::Rejected;
        };
        let displaced = prev.filter(|&(p, _)| p != site);
        if displaced.is_some_and(|(p, _)| p != self.id) && self.free_task().is_none() {
            return AckStatus::Busy;
        }
        match self.dir.update(page, site, version, self.now) {
            Update::Accepted { .. } => {
                self.stats.dir_updates += 1;
                match displaced {
                    Some((p, v)) if p == self.id => {
                        self.drop_held(&page, v);
                    }
                    Some((p, v)) => {
                        self.queue_task(TaskKind::Drop, page, v, p, None);
                    }
                    None => {}
                }
                AckStatus::Ok
            }
            Update::Rejected => {
                self.stats.dir_rejects += 1;
                AckStatus::Rejected
            }
            Update::Full => AckStatus::Busy,
        }
    }

    /// The directory side of a discard (requester's or local). The holder is told to drop
    /// its copy; if that cannot be queued, its scrub's re-registration is refused by the
    /// new floor and it drops the copy then.
    pub(super) fn apply_discard(&mut self, page: PageId, version: Version) -> AckStatus {
        match self.dir.discard(page, version, self.now) {
            Ok(holder) => {
                self.stats.dir_discards += 1;
                match holder {
                    Some((site, _)) if site == self.id => {
                        self.drop_held(&page, version);
                    }
                    Some((site, _)) => {
                        self.queue_task(TaskKind::Drop, page, version, site, None);
                    }
                    None => {}
                }
                AckStatus::Ok
            }
            Err(_) => AckStatus::Busy,
        }
    }
}
