// SPDX-License-Identifier: GPL-2.0-only
//! Naming held copies in the global directory (`DIRUPDATE`, `DIRREMOVE`) and applying updates and discards.

use super::directory::{Update, ANY_SEQ};
use super::net::prelude::Body;
use super::net::storage::Storage;
use super::node::{let_go, GmsNode, HeldState, Host};
use super::ops::{AckStatus, GetReply, GetStatus, PutStatus, REPLY_DIRTY};
use super::page::{PageId, Version};
use super::slots::TaskKind;
use super::types::*;

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
    /// Have the directory name this node for its held copy of `page`: applied here when
    /// this node is the directory, else through a `DIRUPDATE` task (the caller checked
    /// there is room). The registration claims the copy's `seq` (see [`super::directory`]).
    pub(super) fn register(&mut self, page: PageId, notify: Option<(u16, OpId)>) {
        let Some(h) = self.held.get(&page).copied() else { return };
        if self.members.directory_of(&page) == Some(self.id) {
            let (status, seq) = self.apply_update(page, self.id, h.version, h.seq);
            self.registered(page, h.version, h.seq, status, seq, notify);
        } else if !self.queue_task(TaskKind::Register, page, h.version, h.seq, self.id, notify) {
            self.drop_held(&page, h.version, ANY_SEQ);
            self.notify(notify, page, h.version, PutStatus::Refused);
        }
    }

    /// The directory answered a registration of `page` at `version` claiming `claim`;
    /// `seq` is the identity it gave the copy (`Ok`).
    pub(super) fn registered(
        &mut self,
        page: PageId,
        version: Version,
        claim: u64,
        status: AckStatus,
        seq: u64,
        notify: Option<(u16, OpId)>,
    ) {
        // The copy this registration was for (a copy registering again keeps its claim;
        // a registered one is re-registered by the scrub under its identity).
        let ours = self
            .held
            .get(&page)
            .is_some_and(|h| h.version == version && (h.state == HeldState::Registered || h.seq == claim));
        match status {
            AckStatus::Ok if ours => {
                if let Some(h) = self.held.get_mut(&page) {
                    h.state = HeldState::Registered;
                    h.seq = seq;
                }
                self.export(page);
                self.notify(notify, page, version, PutStatus::Stored);
            }
            AckStatus::Ok => {
                // Named for a copy this node no longer has: take the name back.
                self.forget_copy(page, version, seq);
                self.notify(notify, page, version, PutStatus::Failed);
            }
            AckStatus::Rejected => {
                // Older than what the directory names (a live entry's version is at least
                // its floor), or a stale claim at that version (the copy it descends from
                // was handed over or given up): no copy of ours is named.
                if ours {
                    self.drop_held(&page, version, ANY_SEQ);
                }
                self.notify(notify, page, version, PutStatus::Superseded);
            }
            // A copy named before keeps its place: the scrub registers it again.
            AckStatus::WrongView | AckStatus::NotDirectory | AckStatus::Busy if self.reregistering(&page, version) => {}
            AckStatus::WrongView => {
                self.drop_held(&page, version, ANY_SEQ);
                self.notify(notify, page, version, PutStatus::WrongView);
            }
            AckStatus::NotDirectory | AckStatus::Busy => {
                self.drop_held(&page, version, ANY_SEQ);
                self.notify(notify, page, version, PutStatus::Refused);
            }
        }
    }

    /// Have this node's NIC answer hinted getpages of its registered copy of `page` (the
    /// reply a hit of it is, [`super::node::Host::export`]); again after each registration,
    /// which may have given it a new identity.
    fn export(&mut self, page: PageId) {
        let Some(h) = self.held.get(&page).copied() else { return };
        let flags = if h.dirty { REPLY_DIRTY } else { 0 };
        let rep = GetReply { status: GetStatus::Hit, page, version: h.version, seq: h.seq, server: self.id, flags };
        let answer = Body::encode(&rep).ok().and_then(|b| self.host.export(h.answer, &h.frame, h.len, b.as_slice()));
        if let Some(h) = self.held.get_mut(&page) {
            h.answer = answer;
        }
    }

    /// Whether this node's copy of `page` at `version` is one a directory named before (a
    /// registration of it is a re-registration: the repair after a membership change, or
    /// the scrub), which a directory's refusal for want of a shared view or of room does
    /// not drop.
    pub(super) fn reregistering(&self, page: &PageId, version: Version) -> bool {
        self.held.get(page).is_some_and(|h| h.version == version && h.state == HeldState::Registered)
    }

    /// This node does not hold `page` up to `version` (at `version`, the copies up to
    /// identity `seq`), which it was named for: un-name it in the directory.
    pub(super) fn forget_site(&mut self, page: PageId, version: Version, seq: u64) {
        if self.members.directory_of(&page) == Some(self.id) {
            if self.dir.remove(&page, self.id, version, seq, self.now) {
                self.stats.dir_removes += 1;
            }
        } else {
            self.queue_task(TaskKind::Remove, page, version, seq, self.id, None);
        }
    }

    /// [`Self::forget_site`] for a copy this node held and gave up (taken back, handed
    /// over): until the directory has the removal, this node confirms the copy existed
    /// (a `DIRVERIFY` of it is answered `Ok`), so that its directory never takes the
    /// removal for a copy that was never held (see [`super::directory`]).
    pub(super) fn forget_copy(&mut self, page: PageId, version: Version, seq: u64) {
        self.forget_site(page, version, seq);
        let me = self.id;
        let removal =
            |t: &&mut super::slots::Task| t.live() && t.kind == TaskKind::Remove && t.page == page && t.site == me;
        if let Some(t) = self.tasks.iter_mut().find(removal) {
            t.gave_up = true;
        }
    }

    /// The directory asked for `page` at `version` or newer: whether this node holds such a
    /// copy, or gave one up and has not yet told the directory.
    pub(super) fn holds_or_gave_up(&self, page: &PageId, version: Version) -> bool {
        self.held.get(page).is_some_and(|h| h.version >= version)
            || self
                .tasks
                .iter()
                .any(|t| t.live() && t.kind == TaskKind::Remove && t.gave_up && t.page == *page && t.version >= version)
    }

    /// The directory's confirmation of task `t` came back: whether `t.site` holds the copy
    /// it was named for (or gave it up since). If it does not and the entry still names
    /// that copy, the copy it displaced is named again, or a leap that displaced none is
    /// withdrawn; otherwise the displaced copy is dropped (see [`super::directory`]'s
    /// module doc).
    pub(super) fn confirmed(&mut self, t: &super::slots::Task, holds: bool) {
        let named = (t.site, t.version, t.seq);
        if !holds && self.members.directory_of(&t.page) == Some(self.id) {
            let undone = match t.then {
                // A displaced copy is named again only at a member (here: while held).
                Some((site, version, _)) if site == self.id => self
                    .held
                    .get(&t.page)
                    .filter(|h| h.version == version)
                    .and_then(|_| self.dir.reinstate(&t.page, named, (site, version), self.now))
                    .inspect(|&seq| {
                        if let Some(h) = self.held.get_mut(&t.page) {
                            h.seq = seq;
                        }
                    })
                    .is_some(),
                Some((site, version, _)) => {
                    self.members.contains(site)
                        && self.dir.reinstate(&t.page, named, (site, version), self.now).is_some()
                }
                None => self.dir.withdraw(&t.page, named, self.now),
            };
            if undone {
                self.stats.rejected_claims += 1;
                return;
            }
        }
        if let Some(then) = t.then {
            self.displaced_dropped(t.page, then);
        }
    }

    /// Drop the held copy of `page` if it is older than `version`, or at `version` with
    /// an identity up to `seq` ([`ANY_SEQ`]: any; a copy still registering will get an
    /// identity above its claim). Returns whether it did.
    pub(super) fn drop_held(&mut self, page: &PageId, version: Version, seq: u64) -> bool {
        let covered = |h: &super::node::Held<F>| match h.state {
            _ if h.version < version || seq == ANY_SEQ => h.version <= version,
            HeldState::Registered => h.version == version && h.seq <= seq,
            HeldState::Registering => h.version == version && h.seq < seq,
        };
        match self.held.get(page) {
            Some(h) if covered(h) => {}
            _ => return false,
        }
        let Some(h) = self.held.remove(page) else { return false };
        self.cancel_register(page, PutStatus::Superseded);
        self.stats.pages_dropped += 1;
        let_go(&mut self.host, *page, &h);
        true
    }

    /// The directory side of `DIRUPDATE` (also applied locally): name `site` as the holder
    /// of `page` at `version` (its registration claiming `claim`), and have a displaced
    /// holder drop its copy. Returns the answer and, if `Ok`, the copy's identity.
    pub(super) fn apply_update(&mut self, page: PageId, site: u16, version: Version, claim: u64) -> (AckStatus, u64) {
        if !self.members.contains(site) {
            self.stats.dir_rejects += 1;
            return (AckStatus::Rejected, 0);
        }
        let Some((prev, _)) = self.dir.check(&page, site, version, claim, self.now) else {
            self.stats.dir_rejects += 1;
            return (AckStatus::Rejected, 0);
        };
        // A displaced copy is dropped by a task: a `DROPPAGE`, or first a confirmation; so
        // is another member's leap confirmed.
        let displaced = prev.filter(|&(p, _, _)| p != site);
        let leap = site != self.id && !self.dir.step(&page, version, self.now);
        if (displaced.is_some() || leap) && self.free_task().is_none() {
            return (AckStatus::Busy, 0);
        }
        match self.dir.update(page, site, version, claim, self.now) {
            Update::Accepted { seq, .. } => {
                self.stats.dir_updates += 1;
                match displaced {
                    // This node's own copy (stored or read here): it holds it.
                    Some(d) if site == self.id => self.displaced_dropped(page, d),
                    // Another member's: the displaced copy goes once it confirms it holds
                    // the copy named (one message may claim a copy it does not hold).
                    Some(d) => {
                        self.queue_confirm(page, (site, version, seq), Some(d));
                    }
                    // A leap binds lower versions (a new page's first put): withdrawn if its
                    // sender does not hold it.
                    None if leap => {
                        self.queue_confirm(page, (site, version, seq), None);
                    }
                    None => {}
                }
                (AckStatus::Ok, seq)
            }
            Update::Rejected => {
                self.stats.dir_rejects += 1;
                (AckStatus::Rejected, 0)
            }
            Update::Full => {
                self.stats.dir_full += 1;
                (AckStatus::Busy, 0)
            }
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
                        self.drop_held(&page, version, ANY_SEQ);
                    }
                    Some((site, _)) => {
                        self.queue_task(TaskKind::Drop, page, version, ANY_SEQ, site, None);
                    }
                    None => {}
                }
                AckStatus::Ok
            }
            Err(_) => AckStatus::Busy,
        }
    }
}
