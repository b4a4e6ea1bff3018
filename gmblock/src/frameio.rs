// SPDX-License-Identifier: GPL-2.0-only
//! With `uring` (reads in flight), the crate's `unsafe` code: I/O vectors over pieces of a shared region's frames,
//! so that `O_DIRECT` `preadv`/`pwritev` move blocks between the disk and the frames
//! themselves — NIC-local memory on the direct path, host RAM on the via-RAM path — with
//! no bounce buffer.
//!
//! The region is a [`Mapping`] of a memfd registered with this process's own virtual NIC.
//! Its frames are handed out by the runtime's port; a frame the server holds (allocated,
//! not armed in the IPT, not in a receive slot, not posted) is touched by nobody else:
//! the NIC is driven inline from the server's one thread, so no engine runs while a
//! slice made here lives, and no other process maps the region.

#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use trapeze_vnic::shm::Mapping;

/// Whether `pieces` (offset, length) lie inside a region of `len` bytes and are pairwise
/// disjoint.
pub(crate) fn valid(len: usize, pieces: &[(usize, usize)]) -> bool {
    let mut sorted: Vec<(usize, usize)> = pieces.to_vec();
    sorted.sort_unstable();
    let inside = sorted.iter().all(|&(o, l)| o.checked_add(l).is_some_and(|e| e <= len));
    inside && sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0)
}

/// Run `f` on mutable I/O vectors over `pieces` of `map` (for a read into them). `None`:
/// a piece is out of bounds or two overlap.
pub fn with_pieces_mut<R>(
    map: &Mapping,
    pieces: &[(usize, usize)],
    f: impl FnOnce(&mut [IoSliceMut<'_>]) -> R,
) -> Option<R> {
    if !valid(map.len(), pieces) {
        return None;
    }
    let base = map.as_mut_ptr();
    let mut iov: Vec<IoSliceMut<'_>> = pieces
        .iter()
        .map(|&(o, l)| {
            // SAFETY: `valid` checked that every piece lies inside the mapping (which
            // lives as long as `map` is borrowed) and that no two overlap, so these are
            // disjoint exclusive slices. The pieces are frames the caller holds: per the
            // module doc nothing else reads or writes them while `f` runs.
            IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(base.add(o), l) })
        })
        .collect();
    Some(f(&mut iov))
}

/// Run `f` on I/O vectors over `pieces` of `map` (for a write from them). `None`: a
/// piece is out of bounds.
pub fn with_pieces<R>(map: &Mapping, pieces: &[(usize, usize)], f: impl FnOnce(&[IoSlice<'_>]) -> R) -> Option<R> {
    if !pieces.iter().all(|&(o, l)| o.checked_add(l).is_some_and(|e| e <= map.len())) {
        return None;
    }
    let base = map.as_mut_ptr();
    let iov: Vec<IoSlice<'_>> = pieces
        .iter()
        .map(|&(o, l)| {
            // SAFETY: the piece lies inside the mapping, which outlives the borrow of
            // `map`; the frames are the caller's and nothing writes them while `f` runs
            // (module doc).
            IoSlice::new(unsafe { std::slice::from_raw_parts(base.add(o) as *const u8, l) })
        })
        .collect();
    Some(f(&iov))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_out_of_bounds_or_overlapping_are_refused() {
        let m = Mapping::create_memfd("frameio", 16384).unwrap();
        assert!(with_pieces_mut(&m, &[(0, 4096), (8192, 8192)], |v| v.len()).is_some());
        assert!(with_pieces_mut(&m, &[(0, 4096), (4000, 100)], |_| ()).is_none(), "overlap");
        assert!(with_pieces_mut(&m, &[(12288, 8192)], |_| ()).is_none(), "past the end");
        assert!(with_pieces(&m, &[(usize::MAX, 2)], |_| ()).is_none(), "overflow");
        with_pieces_mut(&m, &[(4096, 4)], |v| v[0].copy_from_slice(b"abcd")).unwrap();
        let mut out = [0u8; 4];
        assert!(m.read(4096, &mut out));
        assert_eq!(&out, b"abcd");
        assert_eq!(with_pieces(&m, &[(4096, 4)], |v| v[0].to_vec()).unwrap(), b"abcd");
    }
}
