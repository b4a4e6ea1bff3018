// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's view of host memory: DMA addresses translated through registered regions.
//!
//! A user-space host registers frame regions (shared memfds) at DMA base addresses it
//! chooses; a QEMU guest's RAM (a shared `memory-backend-file`) is registered with the
//! guest-physical → file-offset layout of the machine type, so guest-physical addresses
//! are DMA addresses. A transfer must lie entirely inside one region; anything else is
//! refused and counted, never dereferenced.

use crate::shm::Mapping;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A window of host memory visible to DMA.
#[derive(Clone, Debug)]
pub struct Region {
    pub name: String,
    pub dma_base: u64,
    pub len: u64,
    map: Arc<Mapping>,
    map_off: u64,
}

/// QEMU x86 machine types, for the guest RAM layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `-machine pc`: all RAM low if ≤ 3.5 GiB, else 3 GiB low and the rest from 4 GiB.
    Pc,
    /// `-machine q35`: all RAM low if ≤ 2.75 GiB, else 2 GiB low and the rest from 4 GiB.
    Q35,
}

const GIB: u64 = 1 << 30;

/// Registered regions plus the count of refused transfers.
#[derive(Debug, Default)]
pub struct DmaSpace {
    regions: RwLock<Vec<Region>>,
    /// Bumped (under the write lock) whenever the regions change: renews [`DmaView`]s.
    generation: AtomicU64,
    refused: AtomicU64,
}

/// A DMA engine's own copy of the regions, renewed when they change, so a transfer
/// translates without taking the regions' lock (two atomic read-modify-writes, 3 % of a
/// one-thread round trip). A transfer that started before an unregister returned may
/// still finish into the old mapping (the view keeps it alive, so that is memory-safe);
/// transfers that start later see the change. The view keeps unregistered mappings until
/// its engine's next transfer or its next sleep.
#[derive(Debug)]
pub struct DmaView {
    generation: u64,
    regions: Vec<Region>,
}

impl Default for DmaView {
    fn default() -> Self {
        DmaView { generation: u64::MAX, regions: Vec::new() }
    }
}

/// Why a region could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum RegionError {
    Empty,
    /// Extends past the end of its mapping.
    OutsideMapping,
    /// Overlaps an already registered region's DMA range.
    Overlap(String),
    AddressOverflow,
}

impl std::fmt::Display for RegionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionError::Empty => write!(f, "region is empty"),
            RegionError::OutsideMapping => write!(f, "region extends past the end of its memory"),
            RegionError::Overlap(n) => write!(f, "region overlaps the DMA range of region {n:?}"),
            RegionError::AddressOverflow => write!(f, "region's DMA range overflows 64 bits"),
        }
    }
}

impl std::error::Error for RegionError {}

impl DmaSpace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Make `len` bytes of `map` starting at `map_off` visible at DMA address `dma_base`.
    pub fn register(
        &self,
        name: &str,
        dma_base: u64,
        map: Arc<Mapping>,
        map_off: u64,
        len: u64,
    ) -> Result<(), RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        if map_off.checked_add(len).is_none_or(|e| e > map.len() as u64) {
            return Err(RegionError::OutsideMapping);
        }
        let end = dma_base.checked_add(len).ok_or(RegionError::AddressOverflow)?;
        let mut regions = self.regions.write().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = regions.iter().find(|r| dma_base < r.dma_base + r.len && r.dma_base < end) {
            return Err(RegionError::Overlap(r.name.clone()));
        }
        regions.push(Region { name: name.into(), dma_base, len, map, map_off });
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Register a guest's RAM (the whole `memory-backend-file` mapping) with the
    /// guest-physical layout of `machine`.
    pub fn register_guest_ram(&self, map: Arc<Mapping>, machine: Machine) -> Result<(), RegionError> {
        let size = map.len() as u64;
        let (all_low, low) = match machine {
            Machine::Pc => (7 * GIB / 2, 3 * GIB),
            Machine::Q35 => (11 * GIB / 4, 2 * GIB),
        };
        if size <= all_low {
            return self.register("guest-ram", 0, map, 0, size);
        }
        self.register("guest-ram-low", 0, map.clone(), 0, low)?;
        self.register("guest-ram-high", 4 * GIB, map, low, size - low)
    }

    /// Remove every region named `name`; returns how many were removed.
    pub fn unregister(&self, name: &str) -> usize {
        let mut regions = self.regions.write().unwrap_or_else(|e| e.into_inner());
        let before = regions.len();
        regions.retain(|r| r.name != name);
        self.generation.fetch_add(1, Ordering::Release);
        before - regions.len()
    }

    pub fn regions(&self) -> Vec<(String, u64, u64)> {
        let regions = self.regions.read().unwrap_or_else(|e| e.into_inner());
        regions.iter().map(|r| (r.name.clone(), r.dma_base, r.len)).collect()
    }

    /// Translate `[addr, addr + len)` to a mapping and offset, or count a refusal.
    pub fn translate(&self, addr: u64, len: u64) -> Option<(Arc<Mapping>, usize)> {
        self.with_translated(addr, len, |map, off| (map.clone(), off))
    }

    /// [`translate`](Self::translate), lending the mapping to `f` (while the regions are
    /// read-locked) instead of handing out a counted reference: what a DMA engine does
    /// per transfer. `None` (and a refusal counted) if the range is not inside one region.
    pub fn with_translated<R>(&self, addr: u64, len: u64, f: impl FnOnce(&Arc<Mapping>, usize) -> R) -> Option<R> {
        let regions = self.regions.read().unwrap_or_else(|e| e.into_inner());
        self.translate_in(&regions, addr, len, f)
    }

    /// [`with_translated`](Self::with_translated) through an engine's [`DmaView`]:
    /// the same answer, without the regions' lock unless they changed.
    pub fn with_translated_in<R>(
        &self,
        view: &mut DmaView,
        addr: u64,
        len: u64,
        f: impl FnOnce(&Arc<Mapping>, usize) -> R,
    ) -> Option<R> {
        self.renew(view);
        self.translate_in(&view.regions, addr, len, f)
    }

    /// `f(mapping, offset)` for `addr..addr + len` in `regions`, or a refusal counted.
    fn translate_in<R>(
        &self,
        regions: &[Region],
        addr: u64,
        len: u64,
        f: impl FnOnce(&Arc<Mapping>, usize) -> R,
    ) -> Option<R> {
        let r = find(regions, addr, len).map(|r| f(&r.map, (r.map_off + (addr - r.dma_base)) as usize));
        if r.is_none() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Bring `view` up to date if the regions changed since it was made (so it lets go of
    /// unregistered mappings): a load when nothing changed. Engines call it per transfer
    /// and before they sleep.
    pub fn renew(&self, view: &mut DmaView) {
        let generation = self.generation.load(Ordering::Acquire);
        if generation != view.generation {
            // A change racing with this copy moves the generation again: renewed next time.
            view.regions = self.regions.read().unwrap_or_else(|e| e.into_inner()).clone();
            view.generation = generation;
        }
    }

    /// Transfers refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// The region holding all of `[addr, addr + len)`, if one does.
fn find(regions: &[Region], addr: u64, len: u64) -> Option<&Region> {
    let end = addr.checked_add(len)?;
    regions.iter().find(|r| addr >= r.dma_base && end <= r.dma_base + r.len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engines_view_follows_registrations() {
        let d = DmaSpace::new();
        let m = Arc::new(Mapping::create_memfd("r", 8192).unwrap());
        let mut view = DmaView::default();
        assert_eq!(d.with_translated_in(&mut view, 0x2000, 16, |_, off| off), None);
        d.register("a", 0x2000, m.clone(), 0, 8192).unwrap();
        assert_eq!(d.with_translated_in(&mut view, 0x2010, 16, |_, off| off), Some(16));
        assert_eq!(d.unregister("a"), 1);
        assert_eq!(d.with_translated_in(&mut view, 0x2010, 16, |_, off| off), None, "unregistered");
        d.register("b", 0x9000, m.clone(), 4096, 4096).unwrap();
        assert_eq!(d.with_translated_in(&mut view, 0x9008, 8, |map, off| (map.len(), off)), Some((8192, 4104)));
        assert_eq!(d.with_translated_in(&mut view, 0x9ff8, 16, |_, off| off), None, "crosses the end");
        assert_eq!(d.refused(), 3);
        // The view lends the same mapping the space holds.
        assert_eq!(Arc::strong_count(&m), 3, "space and view each hold region b");
    }

    #[test]
    fn translation_stays_inside_one_region_and_refusals_are_counted() {
        let d = DmaSpace::new();
        let m = Arc::new(Mapping::create_memfd("r", 8192).unwrap());
        d.register("a", 0x1000_0000, m.clone(), 4096, 4096).unwrap();
        let (_, off) = d.translate(0x1000_0010, 16).unwrap();
        assert_eq!(off, 4096 + 16);
        assert!(d.translate(0x1000_0ff0, 32).is_none()); // crosses the end
        assert!(d.translate(0x0fff_ffff, 2).is_none()); // starts before
        assert!(d.translate(u64::MAX - 1, 8).is_none()); // overflows
        assert_eq!(d.refused(), 3);
        assert_eq!(d.register("b", 0x1000_0800, m.clone(), 0, 16), Err(RegionError::Overlap("a".into())));
        assert_eq!(d.register("c", 0, m.clone(), 8000, 400), Err(RegionError::OutsideMapping));
        // The lending form agrees, and counts its refusals too.
        assert_eq!(d.with_translated(0x1000_0010, 16, |map, off| (map.len(), off)), Some((8192, 4096 + 16)));
        assert_eq!(d.with_translated(0x1000_0ff0, 32, |_, off| off), None);
        assert_eq!(d.refused(), 4);
        assert_eq!(d.unregister("a"), 1);
        assert!(d.translate(0x1000_0010, 16).is_none());
    }

    #[test]
    fn guest_ram_layout_follows_the_machine_type() {
        // A small guest: identity.
        let d = DmaSpace::new();
        let m = Arc::new(Mapping::create_memfd("g", 1 << 20).unwrap());
        d.register_guest_ram(m, Machine::Pc).unwrap();
        assert_eq!(d.translate(0x8_0000, 8).unwrap().1, 0x8_0000);
        assert!(d.translate(1 << 20, 1).is_none());
    }
}
