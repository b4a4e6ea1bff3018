// SPDX-License-Identifier: GPL-2.0-only
//! Naming held copies in the global directory (`DIRUPDATE`, `DIRREMOVE`) and applying updates and discards.

use super::directory::Update;
use super::node::{GmsNode, HeldState, Host};
use super::ops::{AckStatus, PutStatus};
use super::page::{PageId, Version};
use super::slots::TaskKind;
use super::types::*;

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
        let Some(prev) = self.dir.check(&page, version, self.now) else {
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
