// SPDX-License-Identifier: GPL-2.0-only
//! IPT protection keys: SipHash-2-4 of a counter under a secret 128-bit seed, truncated
//! to 48 bits ([`siphash24`], from the interface crate). Keys seen on the wire reveal nothing usable about the next ones, so a
//! forged token succeeds with probability 2⁻⁴⁸ per guess.

pub use super::iface::siphash::siphash24;

/// Generator of non-zero 48-bit keys.
#[derive(Clone)]
pub struct KeyGen {
    k0: u64,
    k1: u64,
    counter: u64,
}

impl KeyGen {
    /// `seed` must be secret and random (from the OS); two endpoints must not share one.
    pub const fn new(seed: [u64; 2]) -> Self {
        KeyGen { k0: seed[0], k1: seed[1], counter: 0 }
    }

    /// The next key: non-zero, 48 bits.
    pub fn next_key(&mut self) -> u64 {
        loop {
            self.counter = self.counter.wrapping_add(1);
            let k = siphash24(self.k0, self.k1, self.counter) & super::iface::ipt::KEY_MASK;
            if k != 0 {
                return k;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_nonzero_48_bit_and_distinct() {
        let mut g = KeyGen::new([1, 2]);
        let mut seen = [0u64; 64];
        for s in seen.iter_mut() {
            *s = g.next_key();
            assert!(*s != 0 && *s >> 48 == 0);
        }
        for i in 0..seen.len() {
            for j in 0..i {
                assert_ne!(seen[i], seen[j]);
            }
        }
    }
}
