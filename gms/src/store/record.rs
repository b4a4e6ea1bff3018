// SPDX-License-Identifier: GPL-2.0-only
//! What the store knows of each replica of each page it wrote: its newest version, who
//! holds it, and where else its newest data may be.
//!
//! A write takes a new version from the store's clock ([`Clock`]): one counter per disk
//! identity, above every version an earlier load of the same identity used (its epoch,
//! recovered at load, is in the top bits), never from the wall clock. A write's replicas
//! are first put at the write's version; a replica put again takes the next version of the
//! same *generation* (the version less its low [`RETRY_BITS`]). So each copy a write
//! leaves is at the write's version or newer, the copies of one write share a generation
//! (what a reload compares, [`super::survey`]), and a copy older than the recorded version
//! is never taken as current.
//!
//! **Sites.** A stored replica supersedes only the older copies of itself: while a write
//! has not stored replica `j`, the page's last acknowledged data lives on in `j`'s older
//! copy. Every member that may hold replica `j`'s newest data — its holder, and every
//! target of a put of it that was never answered (stored or not, nobody said) — is one of
//! `j`'s *sites*, and a put of any other replica keeps clear of all of them. A store
//! answer narrows the sites to those that may hold that write's data: the holder, the
//! targets of the same write's unanswered puts of `j`, and, for a replica made again at
//! its own version, the sites it had; a member that restarts leaves every set (its
//! memory is gone).
//!
//! **Strays.** A copy superseded on a member the newer write did not reach (the replica
//! moved: its holder did not answer, refused, or failed) is not dropped there. Such
//! members are the replica's *strays*; a reload, knowing no versions, could take a stray
//! for the page's newest copy when the newest copies are out of reach. So a write that
//! leaves strays raises the page's *floor* in the volume's map to its own generation
//! before it is acknowledged ([`super::volume`]): a reload asks only for copies at the
//! floor or newer. Rewrites keep a replica on its holder where they can, replacing its
//! copy in place, so a floor is written only when a replica moves.

use super::super::page::Version;
use super::super::types::Answer;
use super::nodes::NodeSet;

/// One replica of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replica {
    /// Never written by this identity.
    Unwritten,
    /// Stored at `version` on `holder`, whose NIC answers hinted reads of it itself at
    /// `answer` (when its `PUTDONE` said so).
    Held { version: Version, holder: u16, answer: Option<Answer> },
    /// Written at `version`, but no live member is known to hold it (its holder failed,
    /// or its put never completed): repaired from another replica, or a read that finds
    /// nothing newer fails.
    Lost { version: Version },
    /// Written by an earlier load (the floor map says so): version and holder unknown
    /// until it is read or written again; a read asks its directory for any version.
    Unknown,
}

impl Replica {
    /// The newest version written of this replica (`None`: never written).
    pub fn version(&self) -> Option<Version> {
        match *self {
            Replica::Unwritten | Replica::Unknown => None,
            Replica::Held { version, .. } | Replica::Lost { version } => Some(version),
        }
    }

    pub fn holder(&self) -> Option<u16> {
        match *self {
            Replica::Held { holder, .. } => Some(holder),
            _ => None,
        }
    }
}

/// A replica's record: its state, its sites and its strays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub replica: Replica,
    pub sites: NodeSet,
    /// Members that may hold a copy older than the newest this replica's page has a
    /// floor for ([`NodeSet::ALL`]: unknown, as after a reload).
    pub strays: NodeSet,
}

impl Entry {
    pub const NEW: Entry = Entry { replica: Replica::Unwritten, sites: NodeSet::EMPTY, strays: NodeSet::EMPTY };

    /// Written by an earlier load: where its copies are, and which are old, is unknown.
    pub const UNKNOWN: Entry = Entry { replica: Replica::Unknown, sites: NodeSet::EMPTY, strays: NodeSet::ALL };

    /// Stored at `holder` at `version`: the copies of older writes are superseded, so
    /// their sites are no longer; the sites of copies of the same write (a replica made
    /// again at the version it had) stay.
    pub fn stored(&mut self, holder: u16, version: Version, answer: Option<Answer>) {
        let same_write = self.replica.version().is_some_and(|v| Clock::generation(v) == Clock::generation(version));
        if !same_write {
            // The older copies on other sites are left behind there.
            let mut left = self.sites;
            left.remove(holder);
            self.strays = self.strays.union(left);
            self.sites = NodeSet::EMPTY;
        }
        self.sites.insert(holder);
        self.replica = Replica::Held { version, holder, answer };
    }

    /// A put to `target` went unanswered: a copy of this replica may be there. The
    /// record keeps the last stored version: an unacknowledged write may or may not have
    /// left newer data, and either is a correct read until a write is acknowledged.
    pub fn unanswered(&mut self, target: u16) {
        self.sites.insert(target);
    }

    /// `node` failed (it may only be suspected: it stays a site) or restarted (`restarted`:
    /// nothing of this replica is there any more). Either way no live holder is known.
    pub fn gone(&mut self, node: u16, restarted: bool) {
        if restarted {
            self.sites.remove(node);
            self.strays.remove(node);
        }
        if let Replica::Held { version, holder, .. } = self.replica {
            if holder == node {
                self.replica = Replica::Lost { version };
            }
        }
    }
}

/// The versions of one disk identity: `epoch` in the top 24 bits (one per load, recovered
/// from the cluster), a counter below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    next: u64,
}

/// Bits of a version below the epoch.
pub const EPOCH_SHIFT: u32 = 40;
/// Bits of a version below its generation: a write's replicas put again keep the write's
/// generation ([`Clock::again`]), so the copies of one write can be told by it.
pub const RETRY_BITS: u32 = 4;

impl Clock {
    /// The last epoch a version holds.
    pub const MAX_EPOCH: u32 = (1 << (64 - EPOCH_SHIFT)) - 1;

    /// The clock of a load in `epoch` (≥ 1, at most [`Self::MAX_EPOCH`]; the previous
    /// load's epoch + 1).
    pub const fn new(epoch: u32) -> Clock {
        Clock { next: ((epoch as u64) << EPOCH_SHIFT) | (1 << RETRY_BITS) }
    }

    /// A version of a new generation, newer than every one this identity used before.
    pub fn tick(&mut self) -> Version {
        let v = self.next;
        self.next += 1 << RETRY_BITS;
        Version(v)
    }

    /// The version a copy put again after one at `v` takes: newer than `v` (a directory
    /// never takes a second copy at the same version), of the same generation while there
    /// is room, else of a new one.
    pub fn again(&mut self, v: Version) -> Version {
        if (v.0 + 1) & ((1 << RETRY_BITS) - 1) != 0 && v.0 < self.next {
            Version(v.0 + 1)
        } else {
            self.tick()
        }
    }

    /// The write a version belongs to: the copies of one write share it.
    pub const fn generation(v: Version) -> u64 {
        v.0 >> RETRY_BITS
    }

    /// The oldest version of `v`'s generation: any copy at it or newer holds that write's
    /// data or a newer write's.
    pub const fn generation_start(v: Version) -> Version {
        Version(v.0 & !((1 << RETRY_BITS) - 1))
    }

    /// The epoch a version was written in.
    pub const fn epoch_of(v: Version) -> u32 {
        (v.0 >> EPOCH_SHIFT) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanswered_put_adds_a_site_and_a_store_of_a_newer_write_narrows_the_sites_to_the_holder() {
        let (first, second) = (Version(5 << RETRY_BITS), Version(7 << RETRY_BITS));
        let mut e = Entry::NEW;
        e.stored(1, first, None);
        e.unanswered(2);
        assert_eq!(e.replica.version(), Some(first));
        assert!(e.sites.contains(1) && e.sites.contains(2));
        e.stored(3, second, None);
        assert_eq!(e.sites, NodeSet::one(3));
        assert_eq!(e.strays, NodeSet::of(&[1, 2]).unwrap(), "the first write's copies are left behind");
        e.gone(3, false);
        assert_eq!(e.replica, Replica::Lost { version: second });
        assert_eq!(e.sites, NodeSet::one(3), "a member declared failed may only be suspected");
        e.gone(3, true);
        assert!(e.sites.is_empty());
    }

    #[test]
    fn a_replica_made_again_at_its_version_keeps_the_sites_of_that_version() {
        let v = Version(7 << RETRY_BITS);
        let mut e = Entry::NEW;
        e.stored(3, v, None);
        e.gone(3, false);
        e.stored(4, v, None);
        assert!(e.sites.contains(3) && e.sites.contains(4), "3, only suspected, may still hold it");
    }

    #[test]
    fn a_later_epoch_is_newer_than_anything_before() {
        let mut a = Clock::new(1);
        for _ in 0..1000 {
            a.tick();
        }
        let last = a.tick();
        let mut b = Clock::new(2);
        assert!(b.tick() > last);
        assert_eq!(Clock::epoch_of(last), 1);
    }

    #[test]
    fn a_copy_put_again_keeps_its_writes_generation_while_there_is_room() {
        let mut c = Clock::new(1);
        let w = c.tick();
        let mut v = w;
        for _ in 0..(1 << RETRY_BITS) - 1 {
            let a = c.again(v);
            assert!(a > v && Clock::generation(a) == Clock::generation(w));
            v = a;
        }
        let full = c.again(v);
        assert!(full > v && Clock::generation(full) > Clock::generation(w));
        assert!(c.tick() > full, "a new generation is newer than every one handed out");
    }
}
