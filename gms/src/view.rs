// SPDX-License-Identifier: GPL-2.0-only
//! Membership changes at a node (view, join, failure, leave) and what each one invalidates.

use super::directory::{Named, NO_SITE};
use super::members::Members;
use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{let_go, GmsNode, HeldState, Host, Rebuild};
use super::ops::PutStatus;
use super::page::{PageId, Version};
use super::slots::{OpState, TaskKind, TaskState};
use super::table::Scan;
use super::types::*;

/// Slots of the held table one step of the repair sweep looks at, at most.
const REPAIR_SLOTS: usize = 1024;

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

    /// Node `n` left or died: directory entries naming it are removed, copies whose
    /// directory it was are registered again with their new directory node (their records
    /// died with it), operations waiting on it fail now.
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

    /// Node `n` is back: heard again after it was declared failed, or restarted. GMS
    /// forgets it as for a failure (directory entries naming it, calls waiting on it)
    /// before the runtime's next view readmits it, so nothing known of it from before the
    /// gap outlives it: what it held was written off when it failed, or died with its
    /// restart (the store keeps its own record of which copies a suspected member kept).
    /// Nothing happens for a node that is not a member.
    pub fn member_back<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        n: u16,
    ) {
        self.node_failed(now, rpc, n)
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
        // The directory keeps only pages it still owns, and forgets departed holders. The
        // pages it took over are registered with it by their holders over the next moments.
        self.dir.retain_pages(|p| new.directory_of(p) == Some(me));
        // After a second change within the window the views between are gone: then every
        // page it directs is being rebuilt. (A node that was alone cannot tell a cluster
        // forming from one it joins: what it takes over then is answered as before.)
        let before = match self.rebuild {
            Rebuild::Since { since, .. } if now < since.saturating_add(self.cfg.rebuild_window) => Members::new(),
            _ => *old,
        };
        self.rebuild = Rebuild::Since { before, since: now };
        for &n in old.ids() {
            if !new.contains(n) {
                self.dir.site_failed(n, now);
            }
        }
        // A node leaving the view keeps nothing.
        let stay = new.contains(me);
        if !stay {
            let host = &mut self.host;
            let mut dropped = 0;
            self.held.retain(|p, h| {
                let_go(host, *p, h);
                dropped += 1;
                false
            });
            self.stats.pages_dropped += dropped;
        }
        // Background work that lost its object.
        for i in 0..TASKS {
            let t = self.tasks[i];
            let keep = match t.kind {
                _ if !t.live() => continue,
                // A registration withdrawn (its copy taken back) still learns what to un-name
                // while the directory stays.
                TaskKind::Register => match self.held.get(&t.page) {
                    Some(h) => h.version == t.version,
                    None => old.directory_of(&t.page) == new.directory_of(&t.page),
                },
                TaskKind::Remove => old.directory_of(&t.page) == new.directory_of(&t.page),
                TaskKind::Drop => new.contains(t.site),
                TaskKind::Verify | TaskKind::Confirm => new.contains(t.site) && new.directory_of(&t.page) == Some(me),
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
        // A copy whose directory moved lost its record with it: register it again with the
        // new directory node (repair), claiming its identity. A copy still registering is
        // already covered by its registration (sent again, to the new directory, below).
        if stay {
            self.repair_moved(rpc, old);
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

    /// Register every held copy whose directory node changed with its new one (the old
    /// one's record is gone: it died, or a joining node took the page over). Registered
    /// copies claim their identity; a registration in flight to the old directory is sent
    /// again to the new one. The new directory keeps the newest version it is told of (an
    /// older copy is refused, and its holder drops it) and, at one version, one copy.
    ///
    /// A node may hold far more moved copies than its task table has room for: they are
    /// marked here and registered by the repair sweep as tasks free up.
    fn repair_moved<const C: usize, const K: usize, const X: usize>(
        &mut self,
        rpc: &mut Rpc<Self, F, C, K, X>,
        old: &Members<MEMBERS>,
    ) {
        let new = self.members;
        let moved = |p: &super::page::PageId| old.directory_of(p) != new.directory_of(p);
        // Registrations on their way to the old directory: send them to the new one.
        for i in 0..TASKS {
            let t = self.tasks[i];
            if t.kind != TaskKind::Register || !t.live() || !moved(&t.page) {
                continue;
            }
            if let TaskState::InFlight { call, .. } = t.state {
                // Its continuation ignores the outcome (the generation moved on).
                self.tasks[i].generation = t.generation.wrapping_add(1).max(1);
                let _ = rpc.cancel(self, call);
            }
            self.tasks[i].state = TaskState::Due(self.now);
            self.tasks_idle = false;
        }
        let mut marked = 0;
        self.held.retain(|page, h| {
            if moved(page) && h.state == HeldState::Registered {
                h.repair = true;
                marked += 1;
            }
            true
        });
        if marked > 0 {
            self.stats.reregistered += marked;
            self.repair_from = Some(0);
            self.repair_step();
        }
    }

    /// The repair sweep: register copies marked `repair` with their directory node, going
    /// on from where it stopped, while the task table keeps a quarter of its room for
    /// client operations (a put needs a task to register its copy).
    pub(super) fn repair_step(&mut self) {
        let reserve = TASKS / 4;
        let mut at = match self.repair_from {
            Some(at) => at,
            None => return,
        };
        // A step looks at a bounded number of slots, so a large table is swept over many
        // drives rather than in one.
        let end = at.saturating_add(REPAIR_SLOTS);
        loop {
            let (i, page, h) = match self.held.scan(at, end.saturating_sub(at), |_, h| h.repair) {
                Scan::Found(i, page, h) => (i, page, h),
                Scan::Stopped(stop) => {
                    self.repair_from = Some(stop);
                    return;
                }
                Scan::End => break,
            };
            at = i + 1;
            let local = self.members.directory_of(&page) == Some(self.id);
            if !local && self.tasks.iter().filter(|t| t.state == TaskState::Free).count() <= reserve {
                self.repair_from = Some(i);
                return;
            }
            if let Some(h) = self.held.get_mut(&page) {
                h.repair = false;
            }
            if h.state != HeldState::Registered {
                continue;
            }
            if local {
                let (status, seq) = self.apply_update(page, self.id, h.version, h.seq);
                self.registered(page, h.version, h.seq, status, seq, None);
                if self.held.get(&page).is_none() {
                    // Dropped: whatever shifted into its slot is looked at next.
                    at = i;
                }
            } else {
                self.queue_task(TaskKind::Register, page, h.version, h.seq, self.id, None);
            }
        }
        self.repair_from = None;
    }

    /// Held copies still to be registered with the directory node a membership change
    /// gave them (marked for the repair sweep, or their registration under way): when
    /// every member has none, the directory is rebuilt. Walks the held table.
    pub fn reregistrations_pending(&self) -> usize {
        let marked = self.held.iter().filter(|(_, h)| h.repair).count();
        let under_way = |t: &&super::slots::Task| {
            t.live() && t.kind == TaskKind::Register && self.reregistering(&t.page, t.version)
        };
        marked + self.tasks.iter().filter(under_way).count()
    }

    /// Whether this node, `page`'s directory node, took the page over in a membership
    /// change less than [`GmsConfig::rebuild_window`] ago: its holders may not have
    /// registered their copies with it yet, so naming no copy proves nothing.
    pub(super) fn rebuilding(&self, page: &PageId) -> bool {
        match self.rebuild {
            Rebuild::Since { before, since } => {
                self.now < since.saturating_add(self.cfg.rebuild_window) && before.directory_of(page) != Some(self.id)
            }
            Rebuild::Settled => false,
        }
    }

    /// This node's directory entry for `page` at `want` or newer: the site, version and
    /// copy identity it names, or why none (`Rebuilding`: no entry while it is rebuilt).
    pub(super) fn named_at(&self, page: &PageId, want: Version) -> Result<Named, MissReason> {
        match self.dir.named(page) {
            Some(named) if named.1 >= want => Ok(named),
            Some(_) => Err(MissReason::NotCached),
            None if self.rebuilding(page) => Err(MissReason::Rebuilding),
            None => Err(MissReason::NotCached),
        }
    }
}
