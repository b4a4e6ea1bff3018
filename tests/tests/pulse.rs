// SPDX-License-Identifier: GPL-2.0-only
//! The pulse rule (`fw::pulse::pulse_len`): how many buffered bytes a sink DMA engine
//! moves now, for each DMA policy.

mod common;

use proptest::prelude::*;
use trapeze_firmware::fw::pulse::pulse_len;
use trapeze_firmware::iface::layout::{Policy, MAX_MTU_BYTES};

const POLICIES: [Policy; 3] = [Policy::Eager, Policy::FixedPulse, Policy::StoreAndForward];

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(POLICIES.to_vec())
}

fn threshold() -> impl Strategy<Value = u32> {
    prop_oneof![0..=16u32, 1..=4096u32, 1..=MAX_MTU_BYTES, any::<u32>()]
}

/// (buffered, remaining) with buffered ≤ remaining, often at the edges.
fn progress() -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![
        3 => (0..=MAX_MTU_BYTES).prop_flat_map(|r| (0..=r, Just(r))),
        1 => (0..=MAX_MTU_BYTES).prop_map(|r| (r, r)),
        1 => (1..=MAX_MTU_BYTES).prop_map(|r| (r - 1, r)),
        1 => any::<u32>().prop_flat_map(|r| (0..=r, Just(r))),
    ]
}

/// (threshold, buffered, remaining): independent, or with buffered and remaining at
/// and around the threshold, where the rules change.
fn inputs() -> impl Strategy<Value = (u32, u32, u32)> {
    prop_oneof![
        2 => (threshold(), progress()).prop_map(|(t, (b, r))| (t, b, r)),
        1 => (0..=4096u32, -1..=1i64, prop_oneof![-1..=2i64, 0..=5000i64]).prop_map(|(t, db, dr)| {
            let b = (t.max(1) as i64 + db).max(0) as u32;
            let r = (b as i64 + dr).max(b as i64) as u32;
            (t, b, r)
        }),
    ]
}

proptest! {
    #![proptest_config(common::config(2048))]

    #[test]
    fn pulse_rule_holds(policy in policy(), (threshold, buffered, remaining) in inputs()) {
        let got = pulse_len(policy, threshold, buffered, remaining);
        let t = threshold.max(1);
        let tail_here = buffered == remaining;
        if let Some(n) = got {
            prop_assert!(n > 0, "a zero-length pulse");
            prop_assert!(n <= buffered, "overrun: {} > buffered {}", n, buffered);
            let whole_tail = n == remaining;
            prop_assert!(
                policy == Policy::StoreAndForward || n >= t || whole_tail,
                "pulse {} below threshold {} and not the whole tail {}", n, t, remaining
            );
        }
        match policy {
            Policy::StoreAndForward => {
                let want = (tail_here && buffered > 0).then_some(buffered);
                prop_assert_eq!(got, want);
            }
            Policy::Eager => {
                // Moves everything buffered once the threshold or the tail is there.
                let want = (buffered > 0 && (buffered >= t || tail_here)).then_some(buffered);
                prop_assert_eq!(got, want);
            }
            Policy::FixedPulse => {
                if let Some(n) = got {
                    // Exactly one pulse, except for a tail of at most one pulse.
                    prop_assert!(n == t || (tail_here && n == remaining && n <= t),
                        "fixed pulse of {} (threshold {}, buffered {}, remaining {})", n, t, buffered, remaining);
                }
                // Progress whenever a pulse (or the whole tail) is buffered.
                prop_assert_eq!(got.is_some(), buffered > 0 && (buffered >= t || tail_here));
            }
        }
        // Nothing buffered: nothing to move. Tail here: something always moves.
        if buffered == 0 {
            prop_assert_eq!(got, None);
        }
        if tail_here && remaining > 0 {
            prop_assert!(got.is_some(), "stalled with the whole tail buffered");
        }
    }

}

proptest! {
    #![proptest_config(common::config(256))]

    /// Feed a packet in random chunks; after each arrival the sink pulses until told to
    /// wait. Every byte moves exactly once, in order, never before it arrived, and the
    /// packet always drains completely.
    #[test]
    fn draining_moves_every_byte_once_in_order(
        policy in policy(),
        threshold in prop_oneof![0..=64u32, 1..=9000u32],
        total in prop_oneof![1..=64u32, 1..=20_000u32],
        chunks in prop::collection::vec(prop_oneof![1..=16u32, 1..=4096u32], 1..200),
    ) {
        let t = threshold.max(1);
        let mut arrived = 0u32; // bytes the source has deposited
        let mut moved = 0u32; // bytes the sink has taken (the next offset to move)
        let mut pulses: Vec<(u32, u32)> = Vec::new(); // (offset, len)
        let mut arrivals = 0usize;
        let mut chunks = chunks.into_iter().cycle();
        while moved < total {
            if arrived < total {
                arrived = (arrived + chunks.next().unwrap()).min(total);
                arrivals += 1;
            }
            // Pulse while the rule allows; bounded so a bug cannot hang the test.
            for _ in 0..=total {
                let (buffered, remaining) = (arrived - moved, total - moved);
                let Some(n) = pulse_len(policy, threshold, buffered, remaining) else { break };
                prop_assert!(moved + n <= arrived, "pulse [{}, +{}) past arrived {}", moved, n, arrived);
                pulses.push((moved, n));
                moved += n;
            }
            if arrived == total {
                prop_assert_eq!(moved, total, "packet not drained once fully buffered");
            }
        }
        // Pulses tile [0, total) in order.
        let mut at = 0;
        for &(off, n) in &pulses {
            prop_assert_eq!(off, at);
            at += n;
        }
        prop_assert_eq!(at, total);
        match policy {
            Policy::StoreAndForward => prop_assert_eq!(pulses, vec![(0, total)]),
            Policy::FixedPulse => {
                prop_assert_eq!(pulses.len() as u32, total.div_ceil(t));
                for &(_, n) in &pulses[..pulses.len() - 1] {
                    prop_assert_eq!(n, t);
                }
            }
            Policy::Eager => {
                // Everything buffered goes at once, so at most one pulse per arrival.
                prop_assert!(pulses.len() <= arrivals);
                for &(off, n) in &pulses[..pulses.len() - 1] {
                    prop_assert!(n >= t || off + n == total);
                }
            }
        }
    }
}

#[test]
fn zero_threshold_behaves_as_one() {
    for policy in POLICIES {
        for (b, r) in [(0, 0), (0, 5), (1, 5), (5, 5), (3, 7)] {
            assert_eq!(pulse_len(policy, 0, b, r), pulse_len(policy, 1, b, r), "{policy:?} {b}/{r}");
        }
    }
}
