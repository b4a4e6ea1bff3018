// SPDX-License-Identifier: GPL-2.0-only
//! Shared set-up for the property tests: proptest configuration and a NIC memory.
//!
//! Every proptest in a test binary runs from one RNG seed, chosen once per process
//! (or taken from `PROPTEST_RNG_SEED`) and printed to stderr. The test harness shows a
//! test's stderr only when it fails, so a failure always comes with the line
//! `proptest seed: N (rerun with PROPTEST_RNG_SEED=N)`. No failure files are written
//! (`failure_persistence: None`), so nothing lands in the work tree.

#![allow(dead_code)]

use proptest::test_runner::{Config, RngSeed};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;
use trapeze_firmware::iface::layout::NIC_MEM_BYTES;

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match Config::default().rng_seed {
        RngSeed::Fixed(s) => s,
        // RandomState is keyed randomly per process: hash nothing to get a random u64.
        RngSeed::Random => RandomState::new().build_hasher().finish(),
    })
}

/// A proptest configuration running `cases` cases from the process-wide seed.
pub fn config(cases: u32) -> Config {
    let seed = seed();
    eprintln!("proptest seed: {seed} (rerun with PROPTEST_RNG_SEED={seed})");
    Config { cases, failure_persistence: None, rng_seed: RngSeed::Fixed(seed), ..Config::default() }
}

/// A zeroed NIC memory of `layout::NIC_MEM_BYTES`, viewed with `AtomicWords::new`.
pub fn nic_memory() -> Vec<AtomicU32> {
    (0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect()
}
