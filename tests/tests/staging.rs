// SPDX-License-Identifier: GPL-2.0-only
//! The FIFO staging allocator (`fw::staging::Staging`) against a model of its live
//! allocations.

mod common;

use proptest::prelude::*;
use std::collections::VecDeque;
use trapeze_firmware::fw::staging::Staging;
use trapeze_firmware::iface::layout::{RECV_STAGING_BYTES, SEND_STAGING_BYTES};

#[derive(Clone, Debug)]
enum Op {
    Alloc(u32),
    FreeOldest,
}

fn size_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0..=4096u32,
        1 => Just(SEND_STAGING_BYTES),
        1 => Just(RECV_STAGING_BYTES),
        1 => any::<u32>(),
    ]
}

fn len_strategy(size: u32) -> impl Strategy<Value = u32> {
    let third = (size / 3).max(1);
    prop_oneof![
        8 => 0..=third,
        3 => 0..=64u32,
        2 => 0..=size.saturating_add(16),
        1 => any::<u32>(),
        1 => u32::MAX - 16..=u32::MAX,
    ]
}

fn ops(size: u32) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => len_strategy(size).prop_map(Op::Alloc),
            2 => Just(Op::FreeOldest),
        ],
        0..120,
    )
}

/// Bytes an allocation of `len` takes: at least 8, rounded up to 8 (computed in u64).
fn footprint(len: u32) -> u64 {
    (len.max(1) as u64).div_ceil(8) * 8
}

/// The largest allocation a FIFO ring of contiguous buffers can still make: after the
/// newest allocation up to the end and before the oldest one when not wrapped, the gap
/// between newest and oldest when wrapped.
fn model_largest_free(live: &VecDeque<(u32, u64)>, cap: u32) -> u64 {
    let (Some(&(head, _)), Some(&(newest, newest_len))) = (live.front(), live.back()) else {
        return cap as u64;
    };
    let tail = newest as u64 + newest_len;
    if newest >= head {
        (cap as u64 - tail).max(head as u64)
    } else {
        head as u64 - tail
    }
}

fn check_live(live: &VecDeque<(u32, u64)>, cap: u32) -> Result<(), TestCaseError> {
    for (i, &(off, len)) in live.iter().enumerate() {
        prop_assert_eq!(off % 8, 0, "aligned");
        prop_assert!(off as u64 + len <= cap as u64, "inside the region");
        for &(o2, l2) in live.iter().skip(i + 1) {
            let disjoint = off as u64 + len <= o2 as u64 || o2 as u64 + l2 <= off as u64;
            prop_assert!(disjoint, "overlap: {:?} and {:?}", (off, len), (o2, l2));
        }
    }
    // FIFO order around the ring: offsets rise, wrapping at most once.
    let wraps = live.iter().zip(live.iter().skip(1)).filter(|(a, b)| b.0 < a.0).count();
    prop_assert!(wraps <= 1, "allocations out of ring order: {:?}", live);
    Ok(())
}

/// `largest_free` is exact: an allocation of that size succeeds and one byte more fails.
fn check_largest_free(s: &Staging, live: &VecDeque<(u32, u64)>, cap: u32) -> Result<(), TestCaseError> {
    let lf = s.largest_free();
    prop_assert_eq!(lf as u64, model_largest_free(live, cap));
    prop_assert_eq!(lf % 8, 0);
    let mut probe = *s;
    if lf > 0 {
        prop_assert!(probe.alloc(lf).is_some(), "alloc(largest_free = {}) failed", lf);
    } else {
        prop_assert_eq!(probe.alloc(0), None, "no room, yet a zero-length request succeeded");
    }
    let mut probe = *s;
    prop_assert_eq!(probe.alloc(lf.saturating_add(1)), None, "alloc(largest_free + 1 = {}) succeeded", lf + 1);
    Ok(())
}

proptest! {
    #![proptest_config(common::config(512))]

    #[test]
    fn fifo_allocator_matches_model((size, ops) in size_strategy().prop_flat_map(|s| (Just(s), ops(s)))) {
        let cap = size & !7;
        let mut s = Staging::new(size);
        let mut live: VecDeque<(u32, u64)> = VecDeque::new();
        prop_assert!(s.is_empty());
        prop_assert_eq!(s.largest_free(), cap);

        for op in ops {
            match op {
                Op::Alloc(len) => {
                    let before = s.largest_free();
                    let got = s.alloc(len);
                    let need = footprint(len);
                    // Exactly the requests that fit in the largest free run succeed.
                    prop_assert_eq!(got.is_some(), need <= before as u64,
                        "alloc({}) with largest_free {} gave {:?}", len, before, got);
                    if let Some(off) = got {
                        live.push_back((off, need));
                    } else {
                        prop_assert_eq!(s.largest_free(), before, "a failed alloc changed the state");
                    }
                }
                Op::FreeOldest => {
                    if live.pop_front().is_some() {
                        s.free_oldest(live.front().map(|&(off, _)| off));
                    }
                }
            }
            prop_assert_eq!(s.is_empty(), live.is_empty());
            check_live(&live, cap)?;
            check_largest_free(&s, &live, cap)?;
        }

        // Drain in FIFO order: the empty allocator has the whole region again.
        while live.pop_front().is_some() {
            s.free_oldest(live.front().map(|&(off, _)| off));
            check_largest_free(&s, &live, cap)?;
        }
        prop_assert!(s.is_empty());
        prop_assert_eq!(s.largest_free(), cap);
        if cap > 0 {
            prop_assert_eq!(s.alloc(cap), Some(0));
        }
    }

    #[test]
    fn empty_allocator_takes_the_whole_region(size in size_strategy()) {
        let cap = size & !7;
        let mut s = Staging::new(size);
        if cap > 0 {
            prop_assert_eq!(s.alloc(cap), Some(0));
            prop_assert_eq!(s.largest_free(), 0);
            prop_assert_eq!(s.alloc(1), None);
        } else {
            prop_assert_eq!(s.alloc(0), None);
        }
    }

    /// Requests beyond the region fail cleanly, however large (no overflow in rounding).
    #[test]
    fn oversized_requests_fail(size in size_strategy(), len in any::<u32>()) {
        let cap = size & !7;
        let mut s = Staging::new(size);
        let got = s.alloc(len);
        prop_assert_eq!(got.is_some(), footprint(len) <= cap as u64, "alloc({}) of {} gave {:?}", len, cap, got);
    }
}

#[test]
fn requests_near_u32_max_fail_cleanly() {
    let mut full = Staging::new(u32::MAX);
    let cap = !7u32;
    for len in u32::MAX - 10..=u32::MAX {
        let mut s = full;
        let want = (footprint(len) <= cap as u64).then_some(0);
        assert_eq!(s.alloc(len), want, "alloc({len:#x}) of {cap:#x}");
    }
    // And on a small region.
    for len in u32::MAX - 10..=u32::MAX {
        let mut s = Staging::new(4096);
        assert_eq!(s.alloc(len), None, "alloc({len:#x}) of 4096");
        assert!(s.is_empty());
    }
    assert_eq!(full.alloc(cap), Some(0));
}
