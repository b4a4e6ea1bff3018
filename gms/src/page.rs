// SPDX-License-Identifier: GPL-2.0-only
//! Page ids, page versions, and the hash every node computes identically (the "globally
//! replicated function" that places a page's directory entry).

use super::table::Key;

/// A cluster-wide page name: an address space (volume, file, or VM object) and a page
/// number in it. 16 bytes on the wire, little-endian, space first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId {
    pub space: u64,
    pub page: u64,
}

impl PageId {
    pub const WIRE_BYTES: usize = 16;

    pub const fn new(space: u64, page: u64) -> PageId {
        PageId { space, page }
    }

    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.space.to_le_bytes());
        b[8..].copy_from_slice(&self.page.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; 16]) -> PageId {
        let mut s = [0u8; 8];
        let mut p = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        p.copy_from_slice(&b[8..]);
        PageId { space: u64::from_le_bytes(s), page: u64::from_le_bytes(p) }
    }
}

impl Key for PageId {
    fn hash64(&self) -> u64 {
        mix64(mix64(self.space ^ 0x6a09_e667_f3bc_c908).wrapping_add(self.page))
    }
}

/// A page's version: bumped by whoever changes the page's contents. Newer versions win
/// everywhere in the protocol; a getpage never returns a version older than the newest
/// completed putpage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub u64);

impl Version {
    pub fn next(self) -> Version {
        Version(self.0.saturating_add(1))
    }
}

/// A 64-bit finaliser (xor-shift-multiply): every input bit affects every output bit.
pub const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Rendezvous weight of `node` for `page`: the live node with the highest weight is the
/// page's directory node.
pub fn weight(page: &PageId, node: u16) -> u64 {
    mix64(page.hash64() ^ mix64(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(node as u64 + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip() {
        let p = PageId::new(0x0102_0304_0506_0708, u64::MAX - 5);
        let b = p.to_bytes();
        assert_eq!(b[0], 0x08, "little-endian, space first");
        assert_eq!(PageId::from_bytes(&b), p);
    }

    #[test]
    fn hash_separates_space_and_page() {
        let a = PageId::new(1, 2).hash64();
        let b = PageId::new(2, 1).hash64();
        assert_ne!(a, b);
        assert_ne!(PageId::new(0, 0).hash64(), 0);
    }
}
