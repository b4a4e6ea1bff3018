// SPDX-License-Identifier: GPL-2.0-only
//! What this daemon remembers of the pages its clients wrote: each write's version and
//! the holders of its replicas (and which of them failed since), at most [`RECORD`] pages.
//! A read through this daemon takes a replica only at the recorded version or newer (a
//! replica left older is stale); a miss can say the holders failed; and the replicas lost
//! with a failed node are listed to be put again from a surviving copy.
//!
//! A write that ends without every replica stored still moved the page: a replica it
//! stored supersedes the older copy of that replica, so its holder is the one recorded
//! (its data is newer than the recorded version), and a put that was never answered may
//! have stored its copy. The next write of the page places its replicas clear of all of
//! these ([`Written::sites`], [`trapeze_node::gms::ReplicaWrite::over`]).

use crate::proto::Nodes;
use gms::prelude::{PageId, Version};
use std::collections::{HashMap, VecDeque};
use trapeze_node::gms::Sites;

/// Pages whose write this daemon remembers: 4 Mi pages, 32 GiB of its own writes (a map
/// entry per page, kept only while the page is stored).
pub const RECORD: usize = 1 << 22;

/// One page's last acknowledged write through this daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub version: Version,
    /// Replica `k`'s holder at `holders[k]`.
    pub holders: Nodes,
    /// Bit `k`: replica `k`'s holder failed (or restarted) since.
    pub lost: u8,
}

impl Record {
    /// Every replica's holder failed.
    pub fn all_lost(&self) -> bool {
        self.lost.count_ones() as usize >= self.holders.len()
    }
}

/// The pages written through this daemon.
#[derive(Default)]
pub struct Written {
    pages: HashMap<PageId, Record>,
    /// Replicas whose holder failed, to put again: (page, replica).
    lost: VecDeque<(PageId, u8)>,
    /// Where the replicas of a page whose last write did not complete may be (its
    /// record's holders otherwise).
    unsettled: HashMap<PageId, Sites>,
}

impl Written {
    /// `page` was written at `version`, replica `k` stored at `holders[k]`. A holder that
    /// is not `live` any more (it failed after storing its replica, before the write's last
    /// replica was stored) lost its replica already: listed to be put again at once.
    pub fn record(&mut self, page: PageId, version: Version, holders: &[u16], live: impl Fn(u16) -> bool) {
        if self.pages.len() < RECORD || self.pages.contains_key(&page) {
            let mut r = Record { version, holders: Nodes::new(holders), lost: 0 };
            for (k, &h) in holders.iter().enumerate() {
                if !live(h) {
                    r.lost |= 1 << k;
                }
            }
            if r.lost != 0 && !r.all_lost() {
                self.lost.extend((0..holders.len() as u8).filter(|k| r.lost & (1 << k) != 0).map(|k| (page, k)));
            }
            self.pages.insert(page, r);
            self.unsettled.remove(&page);
        }
    }

    /// A write of a recorded `page` ended without every replica stored: replica `k` of
    /// `stored` is now held at its node (newer than the recorded version), and the page's
    /// replicas may be at `sites`.
    pub fn partial(&mut self, page: PageId, stored: &[(u8, u16)], sites: Sites) {
        let Some(r) = self.pages.get_mut(&page) else { return };
        let mut ids = r.holders.as_slice().to_vec();
        for &(k, node) in stored {
            let Some(id) = ids.get_mut(usize::from(k)) else { continue };
            *id = node;
            r.lost &= !(1 << k);
        }
        r.holders = Nodes::new(&ids);
        self.unsettled.insert(page, sites);
    }

    /// The nodes among `members` a copy of replica `k` of `page` must not go to: those that
    /// may hold another replica's newest data; when that is every member, the recorded
    /// holders of the other replicas (see `ReplicaWrite::avoid`).
    pub fn avoid(&self, page: &PageId, k: u8, members: &[u16]) -> Vec<u16> {
        self.sites(page).avoid(k, members, || {
            let holders = self.pages.get(page).map_or(&[][..], |r| r.holders.as_slice());
            holders.iter().enumerate().filter(|&(j, _)| j != usize::from(k)).map(|(_, &h)| h).collect()
        })
    }

    /// The nodes that may hold each replica's newest data of `page` (none known: empty).
    pub fn sites(&self, page: &PageId) -> Sites {
        match (self.unsettled.get(page), self.pages.get(page)) {
            (Some(s), _) => s.clone(),
            (None, Some(r)) => Sites::stored(r.holders.as_slice()),
            (None, None) => Sites::default(),
        }
    }

    pub fn get(&self, page: &PageId) -> Option<&Record> {
        self.pages.get(page)
    }

    /// The version of the last write of `page` through this daemon.
    pub fn version(&self, page: &PageId) -> Option<Version> {
        self.pages.get(page).map(|r| r.version)
    }

    /// Node `n` failed or restarted: the replicas it held are gone. Those of pages with a
    /// surviving replica are listed to be put again.
    pub fn node_failed(&mut self, n: u16) {
        for (page, r) in self.pages.iter_mut() {
            for (k, &h) in r.holders.as_slice().iter().enumerate() {
                if h == n && r.lost & (1 << k) == 0 {
                    r.lost |= 1 << k;
                    if !r.all_lost() {
                        self.lost.push_back((*page, k as u8));
                    }
                }
            }
        }
    }

    /// The next lost replica to put again that a live copy of its page can be read from
    /// (`None`: none left).
    pub fn next_lost(&mut self) -> Option<(PageId, u8)> {
        while let Some((page, k)) = self.lost.pop_front() {
            if self.pages.get(&page).is_some_and(|r| r.lost & (1 << k) != 0 && !r.all_lost()) {
                return Some((page, k));
            }
        }
        None
    }

    /// Put `(page, k)` back at the front of the list (it could not be started now).
    pub fn retry_lost(&mut self, page: PageId, k: u8) {
        self.lost.push_front((page, k));
    }

    /// Put `(page, k)` back at the end of the list (to try again after the others).
    pub fn retry_lost_later(&mut self, page: PageId, k: u8) {
        self.lost.push_back((page, k));
    }

    /// Lost replicas waiting to be put again.
    pub fn lost_pending(&self) -> usize {
        self.lost.len()
    }

    /// Replica `k` of `page` (written at `version`) is stored again at `node`: recorded,
    /// unless the page was written again since.
    pub fn replaced(&mut self, page: PageId, k: u8, version: Version, node: u16) -> bool {
        let Some(r) = self.pages.get_mut(&page) else { return false };
        if r.version != version || usize::from(k) >= r.holders.len() {
            return false;
        }
        let mut ids = r.holders.as_slice().to_vec();
        ids[usize::from(k)] = node;
        r.holders = Nodes::new(&ids);
        r.lost &= !(1 << k);
        if let Some(s) = self.unsettled.get_mut(&page) {
            s.set(k, node);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_holder_lists_its_replicas_to_put_again() {
        let mut w = Written::default();
        let (a, b) = (PageId::new(1, 1), PageId::new(1, 2));
        w.record(a, Version(5), &[1, 2], |_| true);
        w.record(b, Version(6), &[2], |_| true);
        w.node_failed(2);
        assert_eq!(w.next_lost(), Some((a, 1)), "page b had one replica: nothing to copy from");
        assert_eq!(w.next_lost(), None);
        assert!(w.get(&b).unwrap().all_lost() && !w.get(&a).unwrap().all_lost());
        assert!(!w.replaced(a, 1, Version(4), 3), "an older write's replica is not recorded");
        assert!(w.replaced(a, 1, Version(5), 3));
        assert_eq!(w.get(&a).unwrap().holders.as_slice(), &[1, 3]);
        assert_eq!(w.get(&a).unwrap().lost, 0);
        w.node_failed(1);
        w.node_failed(3);
        assert_eq!(w.next_lost(), None, "both replicas gone: nothing to copy from");
        assert!(w.get(&a).unwrap().all_lost());
    }

    /// A holder that failed between storing its replica and the write's completion lost
    /// that replica: the record says so and lists it to be put again.
    #[test]
    fn a_holder_that_failed_before_the_write_completed_is_lost_already() {
        let mut w = Written::default();
        let (a, b) = (PageId::new(1, 1), PageId::new(1, 2));
        w.record(a, Version(5), &[1, 3], |n| n != 3);
        assert_eq!(w.get(&a).unwrap().lost, 0b10);
        assert_eq!(w.lost_pending(), 1);
        assert_eq!(w.next_lost(), Some((a, 1)));
        w.record(b, Version(6), &[3], |n| n != 3);
        assert!(w.get(&b).unwrap().all_lost());
        assert_eq!(w.next_lost(), None, "no copy left to put again from");
    }

    /// A write that stored one replica of two: that replica's holder is recorded, the
    /// other's unanswered put is a site the next write avoids, and a completed write
    /// settles the page again.
    #[test]
    fn a_partial_write_moves_the_recorded_holders() {
        let mut w = Written::default();
        let a = PageId::new(1, 1);
        w.record(a, Version(5), &[1, 3], |_| true);
        assert_eq!(w.sites(&a), Sites::stored(&[1, 3]));
        // Replica 0 stored on node 2; replica 1's put to node 4 never answered.
        let mut s = Sites::stored(&[2, 3]);
        s.add(1, 4);
        w.partial(a, &[(0, 2)], s.clone());
        assert_eq!(w.get(&a).unwrap().holders.as_slice(), &[2, 3], "replica 0 is on node 2 now");
        assert_eq!(w.get(&a).unwrap().version, Version(5), "the acknowledged version stays the floor");
        assert_eq!(w.sites(&a), s);
        w.node_failed(2);
        assert_eq!(w.next_lost(), Some((a, 0)), "replica 0 is put again from replica 1");
        assert!(w.replaced(a, 0, Version(5), 5));
        assert_eq!(w.sites(&a).of(0).collect::<Vec<_>>(), vec![5]);
        assert_eq!(w.sites(&a).of(1).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(w.avoid(&a, 0, &[1, 3, 4, 5]), vec![3, 4]);
        // Replica 1 may be on every member: replica 0 keeps off its recorded holder only.
        assert_eq!(w.avoid(&a, 0, &[3, 4]), vec![3]);
        w.record(a, Version(9), &[5, 1], |_| true);
        assert_eq!(w.sites(&a), Sites::stored(&[5, 1]));
    }
}
