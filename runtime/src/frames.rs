// SPDX-License-Identifier: GPL-2.0-only
//! How a place reaches its payload frames: [`FrameMem`].
//!
//! A frame holds one payload (at most [`FrameMem::FRAME_BYTES`]): a NetRPC request or
//! reply, a GMS page. Frames are named by a small `Copy` value (an offset into a
//! user-space region, an index into the kernel's DMA buffers); the NIC reaches each one at
//! its DMA address.

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
}
