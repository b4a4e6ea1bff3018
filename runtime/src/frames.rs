// SPDX-License-Identifier: GPL-2.0-only
//! How a place reaches its payload frames: [`FrameMem`].
//!
//! A frame holds one payload (at most [`FrameMem::FRAME_BYTES`]): a NetRPC request or
//! reply, a GMS page. Frames are named by a small `Copy` value (an offset into a
//! user-space region, an index into the kernel's DMA buffers); the NIC reaches each one at
//! its DMA address. A place may also lend the port memory it does not own (the kernel
//! lends a block request's own pages, so payloads move without a copy): such a frame is
//! never on the free list, holds [`FrameMem::FRAME_BYTES`] like the others, and goes back
//! to its lender when the port is done with it ([`FrameMem::give_back`]).
//!
//! A place may also name a **group** of frames with one frame value (a scatter/gather
//! list, at most [`MAX_SEGMENTS`] frames): [`FrameMem::segments`] gives its pieces, so one
//! IPT entry lands a payload of several pages in several frames and one send gathers it
//! from several. A group names its frames for one arming or one send only:
//! [`FrameMem::give_back`] ends it (giving back the lent frames it names, never freeing
//! a pool frame), and so does [`FrameMem::sent`] once the transmit that carries it has
//! left the port. A place keeps its groups in a [`Groups`] table, sized once, and names
//! group `g` by a frame value of its own above its frames.

use super::iface::entry::Segment;
use super::iface::layout::MAX_SEGMENTS;
use super::storage::Storage;

/// The pieces of one frame or group, as [`FrameMem::segments`] gives them.
pub type Segments = [Segment; MAX_SEGMENTS as usize];

/// The frames of one port.
pub trait FrameMem {
    /// A frame's name.
    type Frame: Copy + Eq + core::fmt::Debug;
    /// Bytes in every frame.
    const FRAME_BYTES: u32;
    /// How many frames there are.
    fn count(&self) -> usize;
    /// Frame number `i` (`i < count()`).
    fn nth(&self, i: usize) -> Self::Frame;
    /// Where the NIC reaches frame `f`, or `None` if `f` is not one of these frames.
    fn dma(&self, f: Self::Frame) -> Option<u64>;
    /// Copy `len` bytes from the start of `from` to the start of `to`.
    fn copy(&self, from: Self::Frame, to: Self::Frame, len: u32) -> bool;
    /// Write `data` at the start of `f`.
    fn write(&self, f: Self::Frame, data: &[u8]) -> bool;
    /// Read `out.len()` bytes from the start of `f`.
    fn read(&self, f: Self::Frame, out: &mut [u8]) -> bool;
    /// Where the NIC reaches `f`, piece by piece: how many of `out` it filled (a single
    /// frame is one piece of [`Self::FRAME_BYTES`]), or `None` if `f` names no memory.
    fn segments(&self, f: Self::Frame, out: &mut Segments) -> Option<usize> {
        out[0] = Segment { addr: self.dma(f)?, len: Self::FRAME_BYTES };
        Some(1)
    }
    /// A transmit carrying `f` left the port (posted: the NIC has its pieces; or
    /// dropped): a group may end.
    fn sent(&mut self, _f: Self::Frame) {}
    /// The port is done with `f` (no IPT entry, no send carries it). `true`: `f` is the
    /// pool's and goes back on the free list; `false`: `f` was lent from outside the pool
    /// and this call gave it back to its lender.
    fn give_back(&mut self, _f: Self::Frame) -> bool {
        true
    }
}

/// One group: its frames in order and the bytes the NIC takes from each.
#[derive(Clone, Copy, Debug)]
pub struct Group<F: Copy> {
    frames: [F; MAX_SEGMENTS as usize],
    n: u8,
    /// Bytes of each frame the group takes (from its start).
    pub piece: u32,
}

impl<F: Copy> Group<F> {
    pub fn frames(&self) -> &[F] {
        &self.frames[..usize::from(self.n)]
    }
}

/// A place's table of live groups, its memory from [`Storage`] once.
pub struct Groups<F: Copy, S: Storage> {
    table: S::Buf<Group<F>>,
}

impl<F: Copy, S: Storage> Groups<F, S> {
    /// Room for `cap` groups at once (`fill`, any frame value, only initialises memory).
    pub fn new(cap: usize, fill: F) -> Option<Self> {
        Some(Groups { table: S::buf(cap, Group { frames: [fill; MAX_SEGMENTS as usize], n: 0, piece: 0 })? })
    }

    /// A free group naming `frames` (1 to [`MAX_SEGMENTS`]), `piece` bytes of each: its
    /// index, or `None` (no group free, or a frame count out of range).
    pub fn start(&mut self, frames: &[F], piece: u32) -> Option<usize> {
        if frames.is_empty() || frames.len() > MAX_SEGMENTS as usize {
            return None;
        }
        let g = self.table.iter().position(|g| g.n == 0)?;
        let e = &mut self.table[g];
        e.frames[..frames.len()].copy_from_slice(frames);
        e.n = frames.len() as u8;
        e.piece = piece;
        Some(g)
    }

    /// Live group `g`.
    pub fn get(&self, g: usize) -> Option<&Group<F>> {
        self.table.get(g).filter(|e| e.n > 0)
    }

    /// End live group `g`: what it was (its frames are the caller's to give back or keep).
    pub fn end(&mut self, g: usize) -> Option<Group<F>> {
        let e = self.table.get_mut(g).filter(|e| e.n > 0)?;
        let was = *e;
        e.n = 0;
        Some(was)
    }

    /// Live groups.
    pub fn live(&self) -> usize {
        self.table.iter().filter(|g| g.n > 0).count()
    }

    /// Groups at once, at most.
    pub fn capacity(&self) -> usize {
        self.table.len()
    }
}
