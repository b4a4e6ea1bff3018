// SPDX-License-Identifier: GPL-2.0-only
//! Where a replica's newest data may be, as the disk knows it: on the member it was last
//! put to ([`DiskState::targets`]), on the member that last stored it, and on the first
//! member since then whose put of it went unanswered (`Failed`, `WrongView`: stored or
//! not, nobody said).
//!
//! A replica's put keeps clear of all of these for the page's other replicas. A stored
//! replica supersedes only the older copies of itself, so while a write has not stored
//! replica `j`, the page's last acknowledged data lives on in `j`'s older copy. Were
//! replica `k` stored beside it (`j`'s put refused, say, and `k` placed clear of `j`'s
//! refused target only), one crash would lose the acknowledged write.
//!
//! When every member may hold another replica (its puts unanswered at all of them), the
//! put waits for those puts to settle, [`SITE_WAITS`] rounds at most; then it keeps clear
//! of the other replicas' last targets only, rather than the page never being written
//! again. Limit: between two stores of a replica, only its first unanswered put is
//! remembered besides its last put; a replica whose puts went unanswered at three or more
//! members in a row may sit on one that is not avoided.

use super::{DiskState, Waiting, NO_TARGET};
use crate::tpz::gms::epochs::Lru;
use crate::tpz::gms::placement::Via;
use crate::tpz::gms::replica::MAX_REPLICAS;

/// Where a replica's put goes.
pub(super) enum Place {
    /// To this member.
    At(u16, Via),
    /// Nowhere: fewer live members than replicas.
    UnderReplicated,
    /// Not yet: every member may hold another replica (their puts are unsettled).
    Wait,
    /// Nowhere: every member clear of the others refused lately or is at its cap.
    Nowhere,
}

/// A replica's sites besides its last put's target.
#[derive(Clone, Copy)]
pub(super) struct Sites {
    stored: u16,
    unanswered: u16,
}

impl Sites {
    pub(super) const NONE: Sites = Sites { stored: NO_TARGET, unanswered: NO_TARGET };
}

/// The most members one replica's put keeps clear of: three sites of each other replica.
pub(super) const AVOID: usize = 3 * (MAX_REPLICAS as usize - 1);

/// Rounds (`Waiting::tries`) a replica's put waits while every member may hold another
/// replica, before it keeps clear of the other replicas' last targets only.
const SITE_WAITS: u8 = 3;

impl DiskState {
    /// The replica at index `i` is stored at `node` (a put, a copy found, a re-replication):
    /// its one site from now on.
    pub(super) fn stored_at(&mut self, i: usize, node: u16) {
        self.set_target(i, node);
        self.sites[i] = Sites { stored: node, unanswered: NO_TARGET };
    }

    /// The replica at index `i` is put to (or held by) `node` now; where a NIC answered
    /// for it before is forgotten.
    pub(super) fn set_target(&mut self, i: usize, node: u16) {
        self.targets[i] = node;
        self.answers[i] = super::Answer::default();
    }

    /// The put of the replica at index `i` to `node` went unanswered: it may be there.
    pub(super) fn unanswered(&mut self, i: usize, node: u16) {
        if self.sites[i].unanswered == NO_TARGET {
            self.sites[i].unanswered = node;
        }
    }

    /// Where replica `k` of `page` is put now: a member the placement draws clear of every
    /// site of the other replicas. Out of line, so that the array of members to avoid is
    /// not in the frame of the issue loop (on the module's deepest call chain).
    #[inline(never)]
    pub(super) fn place(
        &mut self,
        page: u64,
        k: u8,
        tries: u8,
        now: u64,
        lru: &mut Lru,
        coordinator: Option<u16>,
    ) -> Place {
        if self.placement.targets().count() < usize::from(self.replicas) {
            return Place::UnderReplicated;
        }
        let (mut avoid, mut n) = self.avoid(page, k, true);
        if self.placement.targets().all(|t| avoid[..n].contains(&t)) {
            if tries < SITE_WAITS {
                return Place::Wait;
            }
            (avoid, n) = self.avoid(page, k, false);
        }
        match self.placement.pick_avoiding(now, lru, coordinator, &avoid[..n]) {
            Some((t, via)) => Place::At(t, via),
            None => Place::Nowhere,
        }
    }

    /// `w`'s replica found every member possibly holding another replica (their puts are
    /// unsettled): it is put again a little later, like a write whose target was busy.
    #[inline(never)]
    pub(super) fn wait_for_sites(&mut self, w: Waiting, now: u64) {
        self.retry_write(w, true, false, now, format_args!("no member clear of the other replicas"));
    }

    /// The members replica `k` of `page` keeps clear of: every site of the other replicas
    /// (`all`), or only the members they were last put to.
    pub(super) fn avoid(&self, page: u64, k: u8, all: bool) -> ([u16; AVOID], usize) {
        let mut out = [NO_TARGET; AVOID];
        let mut n = 0;
        for i in (0..self.replicas).filter(|&j| j != k).filter_map(|j| self.at(page, j)) {
            let s = if all { self.sites[i] } else { Sites::NONE };
            for t in [self.targets[i], s.stored, s.unanswered] {
                if t != NO_TARGET && !out[..n].contains(&t) && n < AVOID {
                    out[n] = t;
                    n += 1;
                }
            }
        }
        (out, n)
    }

    /// `node` came back without the copies it held: it is no replica's site any more.
    pub(super) fn forget_sites(&mut self, node: u16) {
        for t in self.targets.iter_mut().filter(|t| **t == node) {
            *t = NO_TARGET;
        }
        for s in self.sites.iter_mut() {
            if s.stored == node {
                s.stored = NO_TARGET;
            }
            if s.unanswered == node {
                s.unanswered = NO_TARGET;
            }
        }
    }
}
