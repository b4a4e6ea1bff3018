// SPDX-License-Identifier: GPL-2.0-only
//! Tools that run inside the QEMU guests: the block-device benchmark behind
//! `trapeze-blkbench` (seeded random 4 KiB reads and sequential reads with `O_DIRECT`,
//! an optional pattern write first, every byte read checked against the pattern), and the
//! memory-pressure workload behind `trapeze-memhog` (pattern pages beyond the guest's RAM,
//! every page checked after it came back from swap).
//!
//! No `unsafe`: the `O_DIRECT` buffers are page-aligned windows into ordinary vectors.

#![forbid(unsafe_code)]

pub mod blkbench;
pub mod memhog;
