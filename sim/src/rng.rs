// SPDX-License-Identifier: GPL-2.0-only
//! The one seeded generator of the simulations: splitmix64.
//!
//! A scenario is a function of its seed. Each independent source of choices (the
//! workload, the faults, a plan drawn before the run) takes its own *stream* of the seed,
//! so that adding draws to one leaves the others' sequences unchanged and a seed keeps
//! replaying the same faults while a workload grows.
//!
//! Stream 0 is the seed itself: `Rng::new(seed, 0)` yields the sequence the simulators
//! produced from `seed` before they shared this crate, so seeds recorded then replay.

/// The splitmix64 increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output function: a bijection of `u64` with full avalanche, and
/// `mix(0) == 0` (stream 0 leaves the seed as it is).
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic generator: the same `(seed, stream)` always gives the same sequence.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// Stream `stream` of `seed`. Different streams start at states far apart on the
    /// splitmix64 sequence (the stream number is mixed), so their outputs are unrelated.
    pub const fn new(seed: u64, stream: u64) -> Rng {
        Rng { state: seed ^ mix(stream) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// A value in `0..n` (`0` when `n` is 0). The modulo bias is below 2^-40 for the
    /// ranges simulations use and keeps every draw one call of [`Self::next_u64`].
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p` percent (one draw, also when `p` is 0 or ≥ 100).
    pub fn pct(&mut self, p: u32) -> bool {
        self.below(100) < u64::from(p)
    }

    /// True with probability `ppm` parts per million (one draw).
    pub fn chance(&mut self, ppm: u32) -> bool {
        self.below(1_000_000) < u64::from(ppm)
    }

    /// A uniformly chosen element, `None` from an empty slice (which draws nothing).
    pub fn pick<'a, T>(&mut self, from: &'a [T]) -> Option<&'a T> {
        if from.is_empty() {
            return None;
        }
        Some(&from[self.below(from.len() as u64) as usize])
    }

    /// A fresh seed for another scenario (a sequence of seeds from one base seed).
    pub fn seed(&mut self) -> u64 {
        self.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference splitmix64 outputs for state 0 (Vigna's splitmix64.c).
    #[test]
    fn stream_zero_is_splitmix64_of_the_seed() {
        let mut r = Rng::new(0, 0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn streams_of_one_seed_differ_and_replay() {
        let draw = |stream| {
            let mut r = Rng::new(42, stream);
            (0..8).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(0), draw(1));
        assert_ne!(draw(1), draw(2));
        // No stream is a shifted copy of another.
        let (a, b) = (draw(1), draw(2));
        assert!(a.iter().all(|x| !b.contains(x)));
    }

    #[test]
    fn ranges_and_odds() {
        let mut r = Rng::new(7, 3);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[r.below(5) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (1800..2200).contains(&c)), "{seen:?}");
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| !r.pct(0) && r.pct(100) && !r.chance(0) && r.chance(1_000_000)));
        let hits = (0..100_000).filter(|_| r.chance(10_000)).count();
        assert!((800..1200).contains(&hits), "1% of 100 000: {hits}");
        assert_eq!(r.pick::<u8>(&[]), None);
        let from = [3, 5, 9];
        assert!((0..100).all(|_| from.contains(r.pick(&from).unwrap())));
    }
}
