// SPDX-License-Identifier: GPL-2.0-only
//! Cluster membership: the live nodes and a view number, and the directory-node function
//! (rendezvous hashing over the live nodes).
//!
//! Rendezvous (highest-random-weight) hashing gives each page to the live node with the
//! highest `weight(page, node)`. When a node leaves, only the pages it was directory for
//! move (each to its second-highest node); when a node joins, only pages it now wins move
//! to it. Every node computes the same answer from the same view.

use super::page::{weight, PageId};

/// Too many members for the table's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MembersFull;

/// Up to `M` live node ids, sorted, and the view number (bumped on every change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Members<const M: usize> {
    ids: [u16; M],
    len: usize,
    view: u64,
}

impl<const M: usize> Default for Members<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const M: usize> Members<M> {
    pub const fn new() -> Self {
        Members { ids: [0; M], len: 0, view: 0 }
    }

    /// Only node `id`, in view 0 (empty if `M` is 0).
    pub const fn single(id: u16) -> Self {
        let mut m = Self::new();
        if M > 0 {
            m.ids[0] = id;
            m.len = 1;
        }
        m
    }

    /// The view number: requests that add directory state carry it, and nodes in
    /// different views refuse each other's updates.
    pub fn view(&self) -> u64 {
        self.view
    }
    pub fn ids(&self) -> &[u16] {
        &self.ids[..self.len]
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn contains(&self, n: u16) -> bool {
        self.ids().binary_search(&n).is_ok()
    }

    /// Add `n` (a new view). `Ok(false)` if it was already a member (view unchanged).
    pub fn add(&mut self, n: u16) -> Result<bool, MembersFull> {
        match self.ids().binary_search(&n) {
            Ok(_) => Ok(false),
            Err(_) if self.len == M => Err(MembersFull),
            Err(i) => {
                self.ids.copy_within(i..self.len, i + 1);
                self.ids[i] = n;
                self.len += 1;
                self.view += 1;
                Ok(true)
            }
        }
    }

    /// Remove `n` (a new view). `false` if it was not a member (view unchanged).
    pub fn remove(&mut self, n: u16) -> bool {
        match self.ids().binary_search(&n) {
            Ok(i) => {
                self.ids.copy_within(i + 1..self.len, i);
                self.len -= 1;
                self.view += 1;
                true
            }
            Err(_) => false,
        }
    }

    /// Replace the whole view (as a membership service announces it).
    pub fn set(&mut self, view: u64, ids: &[u16]) -> Result<(), MembersFull> {
        let mut next = Members::<M>::new();
        for &n in ids {
            next.add(n)?;
        }
        next.view = view;
        *self = next;
        Ok(())
    }

    /// The page's directory node: the live node of highest rendezvous weight (ties, which
    /// need a 64-bit collision, go to the higher id). `None` with no members.
    pub fn directory_of(&self, page: &PageId) -> Option<u16> {
        self.ids().iter().copied().max_by_key(|&n| (weight(page, n), n))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn members(ids: &[u16]) -> Members<8> {
        let mut m = Members::new();
        m.set(1, ids).unwrap();
        m
    }

    #[test]
    fn add_remove_keep_order_and_bump_the_view() {
        let mut m: Members<3> = Members::new();
        assert_eq!(m.add(5), Ok(true));
        assert_eq!(m.add(1), Ok(true));
        assert_eq!(m.add(5), Ok(false));
        assert_eq!(m.add(3), Ok(true));
        assert_eq!(m.add(9), Err(MembersFull));
        assert_eq!(m.ids(), &[1, 3, 5]);
        assert_eq!(m.view(), 3);
        assert!(m.remove(3));
        assert!(!m.remove(3));
        assert_eq!(m.ids(), &[1, 5]);
        assert_eq!(m.view(), 4);
        assert!(m.contains(5) && !m.contains(3));
    }

    /// Only the dead node's pages change directory; they spread over the survivors.
    #[test]
    fn rendezvous_moves_only_the_dead_nodes_pages() {
        let all = members(&[0, 1, 2, 3, 4]);
        for dead in 0..5u16 {
            let rest: Vec<u16> = (0..5).filter(|&n| n != dead).collect();
            let after = members(&rest);
            let mut moved_to = [0usize; 5];
            let mut owned = 0;
            for i in 0..20_000u64 {
                let p = PageId::new(i % 7, i.wrapping_mul(0x9e37_79b9));
                let before = all.directory_of(&p).unwrap();
                let now = after.directory_of(&p).unwrap();
                if before == dead {
                    owned += 1;
                    assert_ne!(now, dead);
                    moved_to[now as usize] += 1;
                } else {
                    assert_eq!(before, now, "page {p:?} moved though its directory {before} lives");
                }
            }
            // About a fifth of the pages were the dead node's; each survivor takes about a quarter.
            assert!((3000..5000).contains(&owned), "dead {dead}: owned {owned}");
            for n in rest {
                let share = moved_to[n as usize] * 100 / owned;
                assert!((15..35).contains(&share), "dead {dead}: node {n} took {share} %");
            }
        }
    }

    /// A joining node takes pages only from others, about 1/(n+1) of them.
    #[test]
    fn rendezvous_join_moves_pages_only_to_the_new_node() {
        let before = members(&[0, 1, 2]);
        let after = members(&[0, 1, 2, 7]);
        let mut taken = 0;
        for i in 0..12_000u64 {
            let p = PageId::new(3, i);
            let (b, a) = (before.directory_of(&p).unwrap(), after.directory_of(&p).unwrap());
            if a != b {
                assert_eq!(a, 7);
                taken += 1;
            }
        }
        assert!((2400..3600).contains(&taken), "{taken}");
        assert_eq!(Members::<4>::new().directory_of(&PageId::new(0, 0)), None);
    }
}
