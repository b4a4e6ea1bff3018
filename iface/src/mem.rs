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
    /// Copy `words` words from `src` to `dst` (both NIC-memory offsets), word by word in
    /// ascending order.
    #[inline]
    fn copy_words(&self, src: u32, dst: u32, words: u32) {
        copy_words_each(self, src, dst, words)
    }
    /// Write `bytes` (zero-padded to whole words) at `off`.
    fn write_bytes(&self, off: u32, bytes: &[u8]) {
        write_bytes_each(self, off, bytes)
    }
    /// Read `out.len()` bytes starting at `off`.
    fn read_bytes(&self, off: u32, out: &mut [u8]) {
        read_bytes_each(self, off, out)
    }
}

/// [`NicMemory::copy_words`] one checked access at a time.
#[inline]
fn copy_words_each<M: NicMemory + ?Sized>(mem: &M, src: u32, dst: u32, words: u32) {
    for i in 0..words {
        mem.store_relaxed(dst + 4 * i, mem.load_relaxed(src + 4 * i));
    }
}

/// [`NicMemory::write_bytes`] one checked access at a time.
fn write_bytes_each<M: NicMemory + ?Sized>(mem: &M, off: u32, bytes: &[u8]) {
    for (i, chunk) in bytes.chunks(4).enumerate() {
        mem.store_relaxed(off + 4 * i as u32, word_of(chunk));
    }
}

/// [`NicMemory::read_bytes`] one checked access at a time.
fn read_bytes_each<M: NicMemory + ?Sized>(mem: &M, off: u32, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(4).enumerate() {
        unword(mem.load_relaxed(off + 4 * i as u32), chunk);
    }
}

/// Up to 4 bytes as a little-endian word, zero-padded.
#[inline]
fn word_of(chunk: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w[..chunk.len()].copy_from_slice(chunk);
    u32::from_le_bytes(w)
}

/// The first `chunk.len()` (at most 4) bytes of little-endian `w` into `chunk`.
#[inline]
fn unword(w: u32, chunk: &mut [u8]) {
    chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
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

    /// The `n` words from `off`, if every one of them is accessible (one check for a run
    /// of accesses; `None` sends the caller to the word-by-word path, which refuses and
    /// reports exactly the words outside).
    #[inline]
    fn run(&self, off: u32, n: usize) -> Option<&'a [AtomicU32]> {
        if !off.is_multiple_of(4) || off < self.base {
            return None;
        }
        let start = ((off - self.base) / 4) as usize;
        self.words.get(start..start.checked_add(n)?)
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
    #[inline]
    fn copy_words(&self, src: u32, dst: u32, words: u32) {
        match (self.run(src, words as usize), self.run(dst, words as usize)) {
            // The same loads and stores, in the same order, as word by word.
            (Some(s), Some(d)) => {
                for (s, d) in s.iter().zip(d) {
                    d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
            _ => copy_words_each(self, src, dst, words),
        }
    }
    #[inline]
    fn write_bytes(&self, off: u32, bytes: &[u8]) {
        match self.run(off, bytes.len().div_ceil(4)) {
            Some(d) => {
                // Whole words, then the zero-padded tail, in ascending order.
                let chunks = bytes.chunks_exact(4);
                let tail = chunks.remainder();
                let whole = chunks.len();
                for (d, chunk) in d.iter().zip(chunks) {
                    d.store(u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]), Ordering::Relaxed);
                }
                if let Some(d) = d.get(whole).filter(|_| !tail.is_empty()) {
                    d.store(word_of(tail), Ordering::Relaxed);
                }
            }
            None => write_bytes_each(self, off, bytes),
        }
    }
    #[inline]
    fn read_bytes(&self, off: u32, out: &mut [u8]) {
        match self.run(off, out.len().div_ceil(4)) {
            Some(s) => {
                // Whole words, then the tail, in ascending order.
                let whole = out.len() / 4;
                let mut chunks = out.chunks_exact_mut(4);
                for (s, chunk) in s.iter().zip(&mut chunks) {
                    chunk.copy_from_slice(&s.load(Ordering::Relaxed).to_le_bytes());
                }
                let tail = chunks.into_remainder();
                if let Some(s) = s.get(whole).filter(|_| !tail.is_empty()) {
                    unword(s.load(Ordering::Relaxed), tail);
                }
            }
            None => read_bytes_each(self, off, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default methods, through a wrapper that does not override them.
    struct EachWord<'a>(AtomicWords<'a>);
    impl NicMemory for EachWord<'_> {
        fn load(&self, off: u32, order: Ordering) -> u32 {
            self.0.load(off, order)
        }
        fn store(&self, off: u32, val: u32, order: Ordering) {
            self.0.store(off, val, order)
        }
        fn len_bytes(&self) -> u32 {
            self.0.len_bytes()
        }
    }

    /// Runs of words checked once do what word by word does, inside the memory and
    /// reaching past its end (release builds: the words outside are skipped).
    #[test]
    fn runs_match_word_by_word() {
        let words: [AtomicU32; 16] = core::array::from_fn(|i| AtomicU32::new(i as u32 * 0x0101_0101));
        let other: [AtomicU32; 16] = core::array::from_fn(|i| AtomicU32::new(i as u32 * 0x0101_0101));
        let (a, b) = (AtomicWords::with_base(&words, 64), EachWord(AtomicWords::with_base(&other, 64)));
        let snap = |w: &[AtomicU32; 16]| w.each_ref().map(|x| x.load(Ordering::Relaxed));
        let bytes: [u8; 11] = core::array::from_fn(|i| 0xA0 + i as u8);
        a.write_bytes(68, &bytes);
        b.write_bytes(68, &bytes);
        a.copy_words(64, 100, 5);
        b.copy_words(64, 100, 5);
        a.copy_words(72, 76, 3);
        b.copy_words(72, 76, 3);
        assert_eq!(snap(&words), snap(&other));
        a.write_bytes(88, &bytes[..8]);
        b.write_bytes(88, &bytes[..8]);
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        a.read_bytes(88, &mut x[..8]);
        b.read_bytes(88, &mut y[..8]);
        assert_eq!(x, y);
        a.read_bytes(70 + 2, &mut x);
        b.read_bytes(70 + 2, &mut y);
        assert_eq!(x, y);
        a.read_bytes(68, &mut x);
        b.read_bytes(68, &mut y);
        assert_eq!(x, y);
        if !cfg!(debug_assertions) {
            a.write_bytes(120, &bytes);
            b.write_bytes(120, &bytes);
            a.copy_words(64, 124, 4);
            b.copy_words(64, 124, 4);
            assert_eq!(snap(&words), snap(&other));
            a.read_bytes(124, &mut x);
            b.read_bytes(124, &mut y);
            assert_eq!(x, y);
        }
    }
}
