// SPDX-License-Identifier: GPL-2.0-only
//! PCI: driver registration with probe/remove callbacks, and the per-device resources a
//! driver holds — enabled device, requested regions, bus mastering, DMA mask and
//! ioremapped BARs — each a type whose `Drop` gives it back.
//!
//! C header: [`include/linux/pci.h`](srctree/include/linux/pci.h).

use core::{ffi::c_void, marker::PhantomData, ptr::NonNull};
use kernel::{
    bindings, c_str,
    error::to_result,
    prelude::*,
    types::{ForeignOwnable, Opaque},
};

/// Number of standard BARs of a PCI function.
const BARS: u32 = 6;

/// A counted reference to a PCI function (`struct pci_dev`).
///
/// # Invariants
///
/// `self.0` points to a `struct pci_dev` on which this value holds one reference (taken
/// with `pci_dev_get`, dropped with `pci_dev_put`), so the structure stays allocated for
/// as long as the value lives.
pub(crate) struct PciDev(NonNull<bindings::pci_dev>);

// SAFETY: a reference to a `pci_dev` may be used and dropped from any thread; every C
// function this type calls does its own locking.
unsafe impl Send for PciDev {}
// SAFETY: all methods take `&self` and call C functions that are safe to call concurrently
// on one device (or only read fields that are fixed while the device exists).
unsafe impl Sync for PciDev {}

impl PciDev {
    /// Take a reference to `raw`.
    ///
    /// # Safety
    ///
    /// `raw` must point to a live `struct pci_dev` for the duration of the call, as the one
    /// the PCI core passes to a probe or remove callback does.
    unsafe fn get(raw: NonNull<bindings::pci_dev>) -> Self {
        // SAFETY: `raw` is live (caller); `pci_dev_get` takes a reference and returns it.
        unsafe { bindings::pci_dev_get(raw.as_ptr()) };
        // INVARIANT: we now hold the reference taken above.
        Self(raw)
    }

    pub(super) fn as_raw(&self) -> *mut bindings::pci_dev {
        self.0.as_ptr()
    }

    /// The embedded `struct device`.
    pub(super) fn device_raw(&self) -> *mut bindings::device {
        // SAFETY: `self.0` is live (type invariant); this only computes a field address.
        unsafe { &raw mut (*self.as_raw()).dev }
    }

    /// The device's name on the PCI bus ("0000:00:02.0").
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `self.0` is live (type invariant). The kobject name of a device on a bus
        // is set before the device is added and not changed for PCI functions.
        let p = unsafe { (*self.as_raw()).dev.kobj.name };
        if p.is_null() {
            return c_str!("?");
        }
        // SAFETY: a non-null kobject name is a NUL-terminated string owned by the device,
        // which our reference keeps alive as long as the returned borrow of `self`.
        unsafe { CStr::from_char_ptr(p) }
    }

    /// Vendor and device id.
    pub(crate) fn ids(&self) -> (u16, u16) {
        // SAFETY: `self.0` is live (type invariant); the ids are fixed at enumeration.
        unsafe { ((*self.as_raw()).vendor, (*self.as_raw()).device) }
    }

    /// Length in bytes of memory BAR `bar`, or 0 if it is absent or not a memory BAR
    /// (C: `pci_resource_len`, a macro, with an `IORESOURCE_MEM` check).
    pub(crate) fn mem_bar_len(&self, bar: u32) -> u64 {
        if bar >= BARS {
            return 0;
        }
        // SAFETY: `self.0` is live (type invariant) and `bar` indexes one of the standard
        // resources; the PCI core fixes them before probe and does not move them while a
        // driver is bound.
        let r = unsafe { (*self.as_raw()).resource[bar as usize] };
        if r.end == 0 || r.flags & bindings::IORESOURCE_MEM as usize == 0 {
            return 0;
        }
        r.end - r.start + 1
    }

    /// `pci_enable_device`; disabled again when the guard drops.
    pub(crate) fn enable(&self) -> Result<Enabled> {
        // SAFETY: `self.0` is live (type invariant).
        to_result(unsafe { bindings::pci_enable_device(self.as_raw()) })?;
        Ok(Enabled(self.clone()))
    }

    /// `pci_request_regions` (all BARs, under `name`); released when the guard drops.
    pub(crate) fn request_regions(&self, name: &'static CStr) -> Result<Regions> {
        // SAFETY: `self.0` is live (type invariant); `name` is a static C string, as the
        // resource tree keeps the pointer until the regions are released.
        to_result(unsafe { bindings::pci_request_regions(self.as_raw(), name.as_char_ptr()) })?;
        Ok(Regions(self.clone()))
    }

    /// `pci_set_master`: the function may initiate DMA; cleared when the guard drops.
    pub(crate) fn set_master(&self) -> BusMaster {
        // SAFETY: `self.0` is live (type invariant).
        unsafe { bindings::pci_set_master(self.as_raw()) };
        BusMaster(self.clone())
    }

    /// Streaming and coherent DMA masks of `bits` address bits
    /// (C: `dma_set_mask_and_coherent`, an inline).
    pub(crate) fn set_dma_mask(&self, bits: u32) -> Result {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        // SAFETY: the device is live (type invariant); the mask calls only check and store
        // a value in it.
        to_result(unsafe { bindings::dma_set_mask(self.device_raw(), mask) })?;
        // SAFETY: as above.
        to_result(unsafe { bindings::dma_set_coherent_mask(self.device_raw(), mask) })
    }

    /// Map the first `len` bytes of memory BAR `bar` (`pci_iomap`); `ENODEV` if the BAR
    /// is absent or shorter.
    pub(crate) fn iomap(&self, bar: u32, len: usize) -> Result<IoMem> {
        if len == 0 || self.mem_bar_len(bar) < len as u64 {
            return Err(ENODEV);
        }
        // SAFETY: the device is live (type invariant) and `bar` is a memory BAR of at least
        // `len` bytes (checked above).
        let p = unsafe { bindings::pci_iomap(self.as_raw(), bar as i32, len as _) };
        let addr = NonNull::new(p).ok_or(ENOMEM)?;
        // INVARIANT: `addr` maps `len` bytes of the BAR until `pci_iounmap` in `Drop`.
        Ok(IoMem { dev: self.clone(), addr, len })
    }
}

impl Clone for PciDev {
    fn clone(&self) -> Self {
        // SAFETY: `self.0` is live: we hold a reference (type invariant).
        unsafe { Self::get(self.0) }
    }
}

impl Drop for PciDev {
    fn drop(&mut self) {
        // SAFETY: we hold one reference (type invariant) and give it back exactly once.
        unsafe { bindings::pci_dev_put(self.as_raw()) };
    }
}

/// An enabled PCI function (`pci_disable_device` on drop).
pub(crate) struct Enabled(PciDev);

impl Drop for Enabled {
    fn drop(&mut self) {
        // SAFETY: the device is live and was enabled by `PciDev::enable`, once per guard.
        unsafe { bindings::pci_disable_device(self.0.as_raw()) };
    }
}

/// The function's BARs, requested for this driver (`pci_release_regions` on drop).
pub(crate) struct Regions(PciDev);

impl Drop for Regions {
    fn drop(&mut self) {
        // SAFETY: the device is live and its regions were requested by this guard.
        unsafe { bindings::pci_release_regions(self.0.as_raw()) };
    }
}

/// Bus mastering enabled (`pci_clear_master` on drop).
pub(crate) struct BusMaster(PciDev);

impl Drop for BusMaster {
    fn drop(&mut self) {
        // SAFETY: the device is live (its reference is held by the guard).
        unsafe { bindings::pci_clear_master(self.0.as_raw()) };
    }
}

/// An ioremapped BAR, accessed in aligned 32-bit words with `ioread32`/`iowrite32`.
///
/// # Invariants
///
/// `addr` is the `pci_iomap` cookie of `len` bytes of a BAR of `dev`, valid until `Drop`.
pub(crate) struct IoMem {
    dev: PciDev,
    addr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is not tied to a thread; `ioread32`/`iowrite32` may be called on it
// from any context, concurrently.
unsafe impl Send for IoMem {}
// SAFETY: see `Send`; every access is a single 32-bit MMIO load or store.
unsafe impl Sync for IoMem {}

impl IoMem {
    /// Mapped length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The word `off..off + 4`, if it is aligned and inside the mapping.
    fn word(&self, off: usize) -> Option<*mut c_void> {
        (off % 4 == 0 && off.checked_add(4)? <= self.len)
            .then(|| self.addr.as_ptr().cast::<u8>().wrapping_add(off).cast())
    }

    /// `ioread32` of the word at `off`; `None` if `off` is unaligned or out of range.
    pub(crate) fn read32(&self, off: usize) -> Option<u32> {
        let p = self.word(off)?;
        // SAFETY: `p` is an aligned word inside the live mapping (`word`, type invariant).
        Some(unsafe { bindings::ioread32(p) })
    }

    /// `iowrite32` of `val` at `off`; `false` (nothing written) if `off` is unaligned or
    /// out of range.
    pub(crate) fn write32(&self, off: usize, val: u32) -> bool {
        let Some(p) = self.word(off) else { return false };
        // SAFETY: `p` is an aligned word inside the live mapping (`word`, type invariant).
        unsafe { bindings::iowrite32(val, p) };
        true
    }
}

impl Drop for IoMem {
    fn drop(&mut self) {
        // SAFETY: `addr` came from `pci_iomap` on `dev` (type invariant), unmapped once here.
        unsafe { bindings::pci_iounmap(self.dev.as_raw(), self.addr.as_ptr()) };
    }
}

/// A table of device ids, ending with an all-zero entry as the PCI core requires.
#[repr(transparent)]
pub(crate) struct IdTable<const N: usize>([bindings::pci_device_id; N]);

impl<const N: usize> IdTable<N> {
    /// `ids` must end with [`id_terminator`] (checked at compile time for const tables).
    pub(crate) const fn new(ids: [bindings::pci_device_id; N]) -> Self {
        assert!(N > 0 && ids[N - 1].vendor == 0 && ids[N - 1].device == 0, "end the table with id_terminator()");
        Self(ids)
    }
}

/// Match `vendor:device`, any subsystem (C: `PCI_DEVICE`).
pub(crate) const fn id(vendor: u16, device: u16) -> bindings::pci_device_id {
    bindings::pci_device_id {
        vendor: vendor as u32,
        device: device as u32,
        subvendor: bindings::PCI_ANY_ID as u32,
        subdevice: bindings::PCI_ANY_ID as u32,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    }
}

/// The all-zero entry that ends an [`IdTable`].
pub(crate) const fn id_terminator() -> bindings::pci_device_id {
    bindings::pci_device_id {
        vendor: 0,
        device: 0,
        subvendor: 0,
        subdevice: 0,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    }
}

/// A PCI driver: `probe` builds the per-device data, which is dropped on remove.
pub(crate) trait Driver {
    /// Everything the driver holds for one bound device; dropping it undoes the probe.
    type Data: Send + Sync + 'static;
    /// Bind `dev`. Runs in process context; may sleep.
    fn probe(dev: &PciDev) -> Result<KBox<Self::Data>>;
}

/// A registered PCI driver (`pci_unregister_driver` on drop, which removes every bound
/// device first).
pub(crate) struct Registration<T: Driver> {
    drv: Pin<KBox<Opaque<bindings::pci_driver>>>,
    _t: PhantomData<T>,
}

// SAFETY: the registration is only touched by `Drop`, which may run on any thread (module
// exit); the C side synchronises driver (un)registration itself.
unsafe impl<T: Driver> Send for Registration<T> {}
// SAFETY: no method reads or writes through `&self`.
unsafe impl<T: Driver> Sync for Registration<T> {}

impl<T: Driver> Registration<T> {
    /// Register driver `name` for `ids`; devices present now are probed before this
    /// returns.
    pub(crate) fn register<const N: usize>(
        name: &'static CStr,
        ids: &'static IdTable<N>,
        module: &'static ThisModule,
    ) -> Result<Self> {
        let d = bindings::pci_driver {
            name: name.as_char_ptr(),
            id_table: ids.0.as_ptr(),
            probe: Some(probe_callback::<T>),
            remove: Some(remove_callback::<T>),
            ..Default::default()
        };
        let drv = KBox::pin(Opaque::new(d), GFP_KERNEL)?;
        // SAFETY: `drv` is pinned in a heap allocation that lives until `Drop` unregisters
        // it; `name` and `ids` are `'static`; `module` is this module.
        to_result(unsafe { bindings::__pci_register_driver(drv.get(), module.as_ptr(), name.as_char_ptr()) })?;
        Ok(Self { drv, _t: PhantomData })
    }
}

impl<T: Driver> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: the driver was registered in `register` and is unregistered once here;
        // this calls `remove_callback` for every bound device before it returns.
        unsafe { bindings::pci_unregister_driver(self.drv.get()) };
    }
}

/// C `probe`: run `T::probe` and keep its data as the device's driver data.
///
/// # Safety
///
/// Called by the PCI core only, with a live device that is not bound to a driver.
unsafe extern "C" fn probe_callback<T: Driver>(
    pdev: *mut bindings::pci_dev,
    _id: *const bindings::pci_device_id,
) -> kernel::ffi::c_int {
    let Some(raw) = NonNull::new(pdev) else { return EINVAL.to_errno() };
    // SAFETY: the PCI core calls probe with a live device.
    let dev = unsafe { PciDev::get(raw) };
    match T::probe(&dev) {
        Ok(data) => {
            // SAFETY: `pdev` is live; the driver core leaves a bound device's driver data to
            // its driver and this module writes it only here and in `remove_callback` (C:
            // `pci_set_drvdata`, an inline that stores exactly this field).
            unsafe { (*pdev).dev.driver_data = data.into_foreign().cast_mut() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// C `remove`: take the driver data back and drop it (which undoes the probe).
///
/// # Safety
///
/// Called by the PCI core only, with a live device that [`probe_callback`] bound.
unsafe extern "C" fn remove_callback<T: Driver>(pdev: *mut bindings::pci_dev) {
    if pdev.is_null() {
        return;
    }
    // SAFETY: the PCI core calls remove with a live device that `probe_callback` bound;
    // the field is swapped for null, so the data is taken back exactly once.
    let p = unsafe { core::ptr::replace(&raw mut (*pdev).dev.driver_data, core::ptr::null_mut()) };
    if !p.is_null() {
        // SAFETY: `p` came from `KBox::<T::Data>::into_foreign` in `probe_callback`.
        drop(unsafe { KBox::<T::Data>::from_foreign(p) });
    }
}
