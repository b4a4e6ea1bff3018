// SPDX-License-Identifier: GPL-2.0-only
//! Replicas: a page kept as `r` copies on `r` distinct nodes is `r` GMS pages, replica `k`
//! of page `(space, n)` being page `(space ^ k << 60, n)`.
//!
//! The protocol core keeps one copy per GMS page; replication is the writer's: it puts each
//! replica to a different target ([`super::placement::Placement::pick_avoiding`]), counts
//! the write done when every replica is stored, and reads replica 0, then the next while
//! one misses. Each replica has its own directory entry, placed by hashing its own id, so
//! the copies usually have different directory nodes as well as different holders: one
//! node's death costs a page at most one copy and its directory record for one replica.
//! Replica 0 is the page itself, so `r = 1` is the unreplicated layout.

use super::page::PageId;

/// Replicas a writer may ask for (the space's top four bits number them).
pub const MAX_REPLICAS: u8 = 4;

/// Replica `k` (< [`MAX_REPLICAS`]) of `page`.
pub const fn replica(page: PageId, k: u8) -> PageId {
    PageId::new(page.space ^ ((k as u64 & 0xf) << 60), page.page)
}

/// The replica count a writer uses by default among `members` nodes (itself included):
/// two copies once there are at least two other nodes to hold them, else one.
pub const fn default_replicas(members: usize) -> u8 {
    if members >= 3 {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_distinct_pages_and_replica_zero_is_the_page() {
        let p = PageId::new(0x6d73_6730, 77);
        assert_eq!(replica(p, 0), p);
        let ids: [PageId; MAX_REPLICAS as usize] = core::array::from_fn(|k| replica(p, k as u8));
        for a in 0..ids.len() {
            for b in a + 1..ids.len() {
                assert_ne!(ids[a], ids[b]);
            }
            assert_eq!(ids[a].page, 77);
        }
        assert_eq!(default_replicas(2), 1);
        assert_eq!(default_replicas(3), 2);
    }
}
