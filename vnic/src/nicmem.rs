// SPDX-License-Identifier: GPL-2.0-only
//! NIC memory as the firmware and the host API reach it in this process: [`NicMem`], the
//! interface's `NicMemory` over a shared mapping.

use crate::shm::{Mapping, SharedWords};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use trapeze_firmware::iface::mem::{AtomicWords, NicMemory};

/// NIC memory as the firmware and host API see it (the word slice kept at hand: see
/// [`SharedWords`]).
#[derive(Clone)]
pub struct NicMem(SharedWords);

impl NicMem {
    pub fn new(map: Arc<Mapping>) -> Self {
        NicMem(SharedWords::new(map))
    }

    /// The mapping NIC memory is in.
    pub fn mapping(&self) -> &Arc<Mapping> {
        self.0.mapping()
    }
}

impl NicMemory for NicMem {
    #[inline]
    fn load(&self, off: u32, order: Ordering) -> u32 {
        AtomicWords::new(self.0.words()).load(off, order)
    }
    #[inline]
    fn store(&self, off: u32, val: u32, order: Ordering) {
        AtomicWords::new(self.0.words()).store(off, val, order)
    }
    fn len_bytes(&self) -> u32 {
        self.0.mapping().len() as u32
    }
    // Runs of words are bounds-checked once (see `AtomicWords`).
    #[inline]
    fn copy_words(&self, src: u32, dst: u32, words: u32) {
        AtomicWords::new(self.0.words()).copy_words(src, dst, words)
    }
    #[inline]
    fn write_bytes(&self, off: u32, bytes: &[u8]) {
        AtomicWords::new(self.0.words()).write_bytes(off, bytes)
    }
    #[inline]
    fn read_bytes(&self, off: u32, out: &mut [u8]) {
        AtomicWords::new(self.0.words()).read_bytes(off, out)
    }
}
