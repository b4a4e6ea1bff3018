// SPDX-License-Identifier: GPL-2.0-only
//! NIC memory for the model: a shared, reference-counted array of atomic words.

use crate::iface::layout::NIC_MEM_BYTES;
use crate::iface::mem::{AtomicWords, NicMemory};
use core::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::vec::Vec;

/// The NIC memory (1 MiB, `NIC_MEM_BYTES`) shared by the firmware, the engines and the host of one node.
#[derive(Clone)]
pub struct SharedMem(Arc<Vec<AtomicU32>>);

impl Default for SharedMem {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedMem {
    pub fn new() -> Self {
        SharedMem(Arc::new((0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect()))
    }

    pub fn words(&self) -> AtomicWords<'_> {
        AtomicWords::new(&self.0)
    }

    /// Byte-granular copy out of NIC memory (what a DMA engine reads).
    pub fn read_at(&self, off: u32, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            let a = off as usize + i;
            let w = self.0.get(a / 4).map_or(0, |w| w.load(Ordering::Relaxed));
            *b = (w >> (8 * (a % 4))) as u8;
        }
    }

    /// Byte-granular copy into NIC memory (what a DMA engine writes).
    pub fn write_at(&self, off: u32, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            let a = off as usize + i;
            if let Some(w) = self.0.get(a / 4) {
                let shift = 8 * (a % 4);
                let old = w.load(Ordering::Relaxed);
                w.store((old & !(0xFF << shift)) | (b as u32) << shift, Ordering::Relaxed);
            }
        }
    }
}

impl NicMemory for SharedMem {
    fn load(&self, off: u32, order: Ordering) -> u32 {
        self.words().load(off, order)
    }
    fn store(&self, off: u32, val: u32, order: Ordering) {
        self.words().store(off, val, order)
    }
    fn len_bytes(&self) -> u32 {
        NIC_MEM_BYTES
    }
}
