// SPDX-License-Identifier: GPL-2.0-only
//! Tools that run inside the QEMU guests: the block-device benchmark behind
//! `trapeze-blkbench` (seeded random 4 KiB reads and sequential reads with `O_DIRECT`,
//! an optional pattern write first, every byte read checked against the pattern, and the
//! kernel CPU time per page of its sequential phases from [`cputime`]), and the
//! memory-pressure workload behind `trapeze-memhog` (pattern pages beyond the guest's RAM,
//! every page checked after it came back from swap), and the file-access benchmark behind
//! `trapeze-filebench` (a pattern file written, then read back with streaming `read()` or
//! through `mmap`, every page checked).
//!
//! The `O_DIRECT` buffers are page-aligned windows into ordinary vectors; the only
//! `unsafe` is the file mapping of [`mapped`] (one of the documented unsafe modules).

pub mod blkbench;
pub mod cputime;
pub mod filebench;
#[allow(unsafe_code)] // the file mapping: one of the documented unsafe modules
pub mod mapped;
pub mod memhog;
