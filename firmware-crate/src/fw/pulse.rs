// SPDX-License-Identifier: GPL-2.0-only
//! The pulse rule: how many buffered bytes a sink DMA engine moves now.
//!
//! A sink (link out when sending, host bus when receiving) drains the bytes that a
//! source has deposited in NIC memory. Store-and-forward waits for the whole packet;
//! fixed pulses move exactly `threshold` bytes whenever that many are buffered; eager DMA
//! starts at `threshold` and then moves *everything* buffered. Under load data backs up
//! behind a slow sink, so eager transfers grow on their own (adaptive pipelining).

use crate::iface::layout::Policy;

/// Bytes to move now, or `None` to wait.
///
/// * `buffered` — bytes in NIC memory not yet moved to the sink;
/// * `remaining` — bytes of the packet not yet moved (buffered or still to come), so
///   `buffered <= remaining`, and `buffered == remaining` means the tail is all here.
///
/// The answer is never more than `buffered` (no overrun), and is at least `threshold`
/// unless it is the packet's whole remaining tail.
pub fn pulse_len(policy: Policy, threshold: u32, buffered: u32, remaining: u32) -> Option<u32> {
    let buffered = buffered.min(remaining);
    if buffered == 0 {
        return None;
    }
    let threshold = threshold.max(1);
    let tail_here = buffered == remaining;
    match policy {
        Policy::StoreAndForward => tail_here.then_some(buffered),
        Policy::Eager => (buffered >= threshold || tail_here).then_some(buffered),
        Policy::FixedPulse => {
            if buffered >= threshold && remaining > threshold {
                Some(threshold)
            } else if tail_here {
                Some(buffered)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Policy::*;

    #[test]
    fn waits_for_threshold_then_moves_per_policy() {
        assert_eq!(pulse_len(Eager, 512, 100, 8192), None);
        assert_eq!(pulse_len(Eager, 512, 3000, 8192), Some(3000));
        assert_eq!(pulse_len(FixedPulse, 512, 3000, 8192), Some(512));
        assert_eq!(pulse_len(StoreAndForward, 512, 3000, 8192), None);
        assert_eq!(pulse_len(StoreAndForward, 512, 8192, 8192), Some(8192));
    }

    #[test]
    fn tail_goes_even_below_threshold() {
        assert_eq!(pulse_len(Eager, 512, 100, 100), Some(100));
        assert_eq!(pulse_len(FixedPulse, 512, 100, 100), Some(100));
        // Fixed: a remainder of exactly one pulse goes as one pulse.
        assert_eq!(pulse_len(FixedPulse, 512, 512, 512), Some(512));
        assert_eq!(pulse_len(Eager, 512, 0, 100), None);
    }
}
