// SPDX-License-Identifier: GPL-2.0-only
//! Word access to NIC memory, the only way any party touches the endpoint.
//!
//! NIC memory is shared between the NIC processor and the host (through a mapping or a
//! PCI BAR), so every access is a 32-bit atomic load or store with an explicit ordering:
//! a writer fills an entry's fields with relaxed stores and hands it over with a
//! `Release` store of its state word; the reader takes it with an `Acquire` load of that
//! word. [`AtomicWords`] implements the trait over any `&[AtomicU32]` and contains no
//! `unsafe`: whoever creates that slice from a mapping owns the one `unsafe` step.

use core::sync::atomic::{AtomicU32, Ordering};

/// 32-bit word access at byte offsets into NIC memory. Offsets must be 4-byte aligned
/// and inside the memory; implementations ignore (and report in debug builds) accesses
/// that are not, rather than touching anything outside.
pub trait NicMemory {
    fn load(&self, off: u32, order: Ordering) -> u32;
    fn store(&self, off: u32, val: u32, order: Ordering);
    /// Size of the memory in bytes.
    fn len_bytes(&self) -> u32;

    #[inline]
    fn load_relaxed(&self, off: u32) -> u32 {
        self.load(off, Ordering::Relaxed)
    }
    #[inline]
    fn store_relaxed(&self, off: u32, val: u32) {
        self.store(off, val, Ordering::Relaxed)
    }
    /// A u64 as two words, low word first (not atomic as a whole: callers publish it
    /// before handing over the structure that holds it).
    #[inline]
    fn load_u64(&self, off: u32) -> u64 {
        self.load_relaxed(off) as u64 | (self.load_relaxed(off + 4) as u64) << 32
    }
    #[inline]
    fn store_u64(&self, off: u32, val: u64) {
        self.store_relaxed(off, val as u32);
        self.store_relaxed(off + 4, (val >> 32) as u32);
    }
    /// Copy `words` words from `src` to `dst` (both NIC-memory offsets).
    #[inline]
    fn copy_words(&self, src: u32, dst: u32, words: u32) {
        for i in 0..words {
            self.store_relaxed(dst + 4 * i, self.load_relaxed(src + 4 * i));
        }
    }
    /// Write `bytes` (zero-padded to whole words) at `off`.
    fn write_bytes(&self, off: u32, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            self.store_relaxed(off + 4 * i as u32, u32::from_le_bytes(w));
        }
    }
    /// Read `out.len()` bytes starting at `off`.
    fn read_bytes(&self, off: u32, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(4).enumerate() {
            let w = self.load_relaxed(off + 4 * i as u32).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
}

/// NIC memory as a slice of atomic words (host mapping, simulator, or the NIC's own view).
///
/// The slice may cover only the top of NIC memory: `words[0]` is at NIC offset `base`,
/// and offsets below `base` are refused. The flashed firmware uses this to view just the
/// endpoint (control block, rings, IPT, staging) and never its own code or stack.
#[derive(Clone, Copy)]
pub struct AtomicWords<'a> {
    words: &'a [AtomicU32],
    base: u32,
}

impl<'a> AtomicWords<'a> {
    /// `words[0]` is NIC offset 0.
    pub const fn new(words: &'a [AtomicU32]) -> Self {
        Self { words, base: 0 }
    }

    /// `words[0]` is NIC offset `base` (4-byte aligned).
    pub const fn with_base(words: &'a [AtomicU32], base: u32) -> Self {
        Self { words, base }
    }

    #[inline]
    fn word(&self, off: u32) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) || off < self.base {
            debug_assert!(false, "NIC memory access refused at {off:#x}");
            return None;
        }
        let w = self.words.get(((off - self.base) / 4) as usize);
        debug_assert!(w.is_some(), "NIC memory access out of range at {off:#x}");
        w
    }
}

impl NicMemory for AtomicWords<'_> {
    #[inline]
    fn load(&self, off: u32, order: Ordering) -> u32 {
        self.word(off).map_or(0, |w| w.load(order))
    }
    #[inline]
    fn store(&self, off: u32, val: u32, order: Ordering) {
        if let Some(w) = self.word(off) {
            w.store(val, order)
        }
    }
    #[inline]
    fn len_bytes(&self) -> u32 {
        self.base + (self.words.len() * 4) as u32
    }
}
