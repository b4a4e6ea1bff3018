// SPDX-License-Identifier: GPL-2.0-only
//! Replicated writes and reads at a port: a page kept as `r` copies is `r` GMS pages
//! ([`gms::replica::replica`]), each put to a different target; the write is done when
//! every replica is stored, and a read takes replica 0, then the next while one misses or
//! is older than the version the reader knows was written.
//!
//! Versions: every replica of one write is first put at the write's version; a replica
//! put again (its target refused it or never answered) gets a newer one, so every copy
//! the write leaves is at the write's version or newer. A reader that knows the write's
//! version (the writer) takes a copy only at that version or newer: a replica left at an
//! older version (its put failed, a restarted node's) is never returned as current.
//!
//! Placement: a stored replica supersedes the older copies of the same replica only, so
//! the page's last acknowledged data lives on in the replicas a write has not stored yet.
//! Replica `k`'s target therefore avoids every node that may hold another replica's
//! newest data ([`Sites`]): the targets of this write's other replicas, and, for a replica
//! this write has not stored, where earlier writes stored it or may have (a put whose
//! answer never came). Avoiding only this write's own targets let a failed write put a
//! replica beside the acknowledged data's other replica, and one crash lost both. Should
//! those nodes be every member, the write avoids only its own other targets rather than
//! never being placed ([`ReplicaWrite::avoid`]).

use super::GmsPort;
use anyhow::Context;
use gms::prelude::*;
pub use gms::replica::{default_replicas, replica, MAX_REPLICAS};

/// The nodes that may hold the newest data of each replica of a page, as its writer
/// knows them: `(replica, node)` pairs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sites(Vec<(u8, u16)>);

impl Sites {
    /// Replica `k` at `holders[k]` (the holders of a completed write).
    pub fn stored(holders: &[u16]) -> Self {
        Sites(holders.iter().enumerate().map(|(k, &n)| (k as u8, n)).collect())
    }

    /// Replica `k` may be at `node` (too).
    pub fn add(&mut self, k: u8, node: u16) {
        if !self.0.contains(&(k, node)) {
            self.0.push((k, node));
        }
    }

    /// Replica `k` is at `node` alone (stored there: its older copies are superseded).
    pub fn set(&mut self, k: u8, node: u16) {
        self.0.retain(|s| s.0 != k);
        self.0.push((k, node));
    }

    /// Where replica `k` may be.
    pub fn of(&self, k: u8) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().filter(move |s| s.0 == k).map(|s| s.1)
    }

    /// The nodes that may hold a replica other than `k`.
    pub fn others(&self, k: u8) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().filter(move |s| s.0 != k).map(|s| s.1)
    }

    /// The nodes among `members` a copy of replica `k` must not go to: those that may hold
    /// another replica (sorted). When that is every member (another replica's puts went
    /// unanswered at so many members that it may be on any of them, and no later answer
    /// will say where), `fallback`: the caller's narrower set, so that the page is still
    /// written, at the risk the module's placement note describes.
    pub fn avoid(&self, k: u8, members: &[u16], fallback: impl FnOnce() -> Vec<u16>) -> Vec<u16> {
        let mut v: Vec<u16> = self.others(k).collect();
        if members.iter().all(|m| v.contains(m)) {
            v = fallback();
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// One replica's state in a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Not put yet, or put and not stored (refused, failed): to put (again).
    Todo,
    InFlight {
        target: u16,
        version: Version,
    },
    Stored {
        target: u16,
        version: Version,
    },
}

/// The bookkeeping of one write of a page as `r` replicas on `r` distinct targets.
#[derive(Clone, Debug)]
pub struct ReplicaWrite {
    r: u8,
    version: Version,
    slots: [Slot; MAX_REPLICAS as usize],
    /// Replicas put at least once (a put again takes a newer version).
    issued: u8,
    /// Where the replicas' data was before this write.
    before: Sites,
    /// This write's puts not known to have failed: `(replica, target, version)`.
    puts: Vec<(u8, u16, Version)>,
}

impl ReplicaWrite {
    /// A write of `r` (1..=[`MAX_REPLICAS`]) replicas at `version` of a page no earlier
    /// write left a copy of (else [`Self::over`]).
    pub fn new(r: u8, version: Version) -> Self {
        assert!((1..=MAX_REPLICAS).contains(&r), "replicas must be 1..={MAX_REPLICAS}");
        ReplicaWrite {
            r,
            version,
            slots: [Slot::Todo; MAX_REPLICAS as usize],
            issued: 0,
            before: Sites::default(),
            puts: Vec::new(),
        }
    }

    /// The write replaces copies at `before` (the page's [`Self::sites`] after its last
    /// write): their nodes are avoided as long as they may hold another replica's data.
    pub fn over(mut self, before: Sites) -> Self {
        self.before = before;
        self
    }

    pub fn replicas(&self) -> u8 {
        self.r
    }

    /// The write's version: every copy it leaves is at this version or newer.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn slot(&self, k: u8) -> Slot {
        self.slots[k as usize]
    }

    /// The version replica `k`'s next put takes: the write's for its first put, else
    /// `newer()` (a newer one than any put before).
    pub fn version_for(&self, k: u8, newer: impl FnOnce() -> Version) -> Version {
        if self.issued & (1 << k) == 0 {
            self.version
        } else {
            newer()
        }
    }

    /// The nodes that may hold each replica's newest data now: a replica this write
    /// stored is at its holder alone; another may be where it was before the write, and at
    /// any target of its puts whose answer never came (or has not come yet).
    pub fn sites(&self) -> Sites {
        let mut s = Sites::default();
        for k in 0..self.r {
            match self.slots[k as usize] {
                Slot::Stored { target, .. } => s.add(k, target),
                _ => {
                    self.before.of(k).for_each(|n| s.add(k, n));
                    self.puts.iter().filter(|p| p.0 == k).for_each(|p| s.add(k, p.1));
                }
            }
        }
        s
    }

    /// The nodes among `members` (the candidate targets) replica `k` must not go to: those
    /// that may hold another replica's newest data (see the module's placement note), or,
    /// should that be every member, only this write's targets of the other replicas
    /// ([`Sites::avoid`]).
    pub fn avoid(&self, k: u8, members: &[u16]) -> Vec<u16> {
        self.sites().avoid(k, members, || {
            (0..self.r)
                .filter(|&j| j != k)
                .filter_map(|j| match self.slots[j as usize] {
                    Slot::InFlight { target, .. } | Slot::Stored { target, .. } => Some(target),
                    Slot::Todo => None,
                })
                .collect()
        })
    }

    /// Replica `k` was put to `target` at `version`.
    pub fn issued(&mut self, k: u8, target: u16, version: Version) {
        self.slots[k as usize] = Slot::InFlight { target, version };
        self.issued |= 1 << k;
        self.puts.push((k, target, version));
    }

    /// The put of replica `k` at `version` ended with `r`: whether it was that replica's
    /// put in flight (an answer to an older put of it changes nothing).
    pub fn done(&mut self, k: u8, version: Version, r: &PutResult) -> bool {
        match self.slots[k as usize] {
            Slot::InFlight { version: v, .. } if v == version => {}
            _ => return false,
        }
        self.slots[k as usize] = match r {
            PutResult::Stored { target } => Slot::Stored { target: *target, version },
            // The target kept no copy of this put (its older copy, if any, stays).
            PutResult::Refused | PutResult::Superseded => {
                self.puts.retain(|p| (p.0, p.2) != (k, version));
                Slot::Todo
            }
            // No answer, or another view: the target may hold the copy.
            PutResult::Failed | PutResult::WrongView => Slot::Todo,
        };
        true
    }

    /// Every replica is stored.
    pub fn complete(&self) -> bool {
        self.slots[..self.r as usize].iter().all(|s| matches!(s, Slot::Stored { .. }))
    }

    /// The replicas stored so far and their holders: `(replica, holder)`, in order.
    pub fn stored(&self) -> Vec<(u8, u16)> {
        (0..self.r)
            .filter_map(|k| match self.slots[k as usize] {
                Slot::Stored { target, .. } => Some((k, target)),
                _ => None,
            })
            .collect()
    }

    /// The holders of replicas 0.. in order, as far as stored.
    pub fn holders(&self) -> Vec<u16> {
        self.stored().into_iter().map(|(_, h)| h).collect()
    }
}

/// What a read of a replicated page does after replica `k` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// Replica `k`'s copy is current: it is the answer.
    Take,
    /// Replica `k` missed or is stale: read replica `k` (the next).
    Next(u8),
    /// Every replica missed or was stale: a miss.
    Miss,
}

/// After replica `k` of `r` answered (`hit`: the version it found, `None` a miss), given
/// the version the reader knows was written (`floor`, if any): take it, or go on.
pub fn read_step(r: u8, k: u8, hit: Option<Version>, floor: Option<Version>) -> ReadStep {
    match hit {
        Some(v) if floor.is_none_or(|f| v >= f) => ReadStep::Take,
        _ if k + 1 < r => ReadStep::Next(k + 1),
        _ => ReadStep::Miss,
    }
}

impl GmsPort {
    /// [`Self::choose_target`] among the members not in `avoid` (the holders of the page's
    /// other replicas); `None` when no such member takes puts now.
    pub fn choose_target_avoiding(&mut self, avoid: &[u16]) -> Option<u16> {
        let me = self.id();
        let others = || self.node.members().ids().iter().copied().filter(move |&n| n != me);
        if !self.placement.targets().eq(others()) {
            let nodes: Vec<u16> = others().collect();
            self.placement.set_targets(nodes);
        }
        let (now, c) = (self.now(), self.coordinator());
        self.placement.pick_avoiding(now, &mut self.lru, c, avoid).map(|(t, _)| t)
    }

    /// Put replica `k` of `w`'s page `page` (`data`) to a target none of the other
    /// replicas is on (at `w`'s version the first time, else at `newer()`): the operation
    /// and where it went. Its result comes in [`Self::put_log`] under `replica(page, k)`.
    pub fn put_replica(
        &mut self,
        w: &mut ReplicaWrite,
        page: PageId,
        k: u8,
        data: &[u8],
        newer: impl FnOnce() -> Version,
    ) -> anyhow::Result<(OpId, u16)> {
        let me = self.id();
        let members: Vec<u16> = self.node.members().ids().iter().copied().filter(|&n| n != me).collect();
        let avoid = w.avoid(k, &members);
        let target = self.choose_target_avoiding(&avoid).context("no put target for the replica")?;
        let version = w.version_for(k, newer);
        match self.put(replica(page, k), version, data, Some(target)) {
            Ok(op) => {
                w.issued(k, target, version);
                Ok((op, target))
            }
            Err(e) => {
                // Never sent: give the target's slot back.
                let now = self.now();
                self.placement.done(target, gms::placement::Outcome::Failed, now);
                Err(e)
            }
        }
    }
}
