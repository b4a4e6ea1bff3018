// SPDX-License-Identifier: GPL-2.0-only
//! Shared-memory mappings: NIC memory, host frame regions and guest RAM. This is the
//! crate's only `unsafe` code besides `cpu/flashed.rs` (mapping NIC memory into the
//! emulated core, and stopping that core from another thread).
//!
//! A [`Mapping`] is a `MAP_SHARED` mapping of a memfd or file that other processes (a
//! host, a QEMU guest) map too. Two kinds of access exist, and the module keeps them apart:
//! * **words** — the endpoint structures (control block, rings, IPT) are read and written
//!   concurrently by NIC and host, so they are reached only as `AtomicU32`s
//!   ([`Mapping::words`]); the ownership protocols in `iface` decide who writes what.
//! * **bytes** — payload frames and staging buffers are moved by DMA with plain copies
//!   ([`Mapping::copy_from`], [`Mapping::read`], [`Mapping::write`]). Those bytes are
//!   owned by exactly one side at a time (a frame handed to the NIC is not touched by its
//!   host until the NIC hands it back; staging belongs to the NIC), so the copies never
//!   overlap a concurrent write from this process. Another process violating the protocol
//!   can only corrupt data in flight, never memory safety here: the copies are bounds
//!   checked and go through raw pointers, not references.
//!
//! A mapped file that shrinks under its mapping turns the next access beyond its new end
//! into SIGBUS, which would end the NIC. So every memfd made here is sealed against
//! shrinking and growing (and against removing the seals) before it is mapped or handed
//! out ([`Mapping::create_memfd`]), and a memfd received from another process is only
//! mapped if it carries the shrink seal ([`check_sealed`]).

use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// A shared mapping of a whole file or memfd.
pub struct Mapping {
    raw: MmapRaw,
    file: File,
    len: usize,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len).finish()
    }
}

impl Mapping {
    /// A new zero-filled memfd of `len` bytes (a multiple of 4), mapped shared and sealed
    /// (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): no process it is handed to can
    /// change its size.
    pub fn create_memfd(name: &str, len: usize) -> io::Result<Self> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        let file = File::from(fd);
        file.set_len(len as u64)?;
        rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        Self::from_file(file, len)
    }

    /// Map an existing file or memfd received from another process.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<Self> {
        Self::from_file(File::from(fd), len)
    }

    /// Map `len` bytes of `file` (which must be at least that long).
    pub fn from_file(file: File, len: usize) -> io::Result<Self> {
        if len == 0 || !len.is_multiple_of(4) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "mapping length must be a non-zero multiple of 4"));
        }
        let have = file.metadata()?.len();
        if have < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("file is {have} bytes, mapping needs {len}"),
            ));
        }
        let raw = MmapOptions::new().len(len).map_raw(&file)?;
        Ok(Mapping { raw, file, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Base address of the mapping (to map it into an emulated core).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.raw.as_mut_ptr()
    }

    /// The mapping as atomic words.
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: the mapping is page-aligned (so 4-byte aligned), `len` is a multiple of
        // 4 and the mapping stays valid for as long as `self` is borrowed (MmapRaw unmaps
        // on drop only). AtomicU32 has the same size and alignment as u32 and every bit
        // pattern is valid; all access through the slice is atomic, which is what memory
        // shared with other processes requires.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr() as *const AtomicU32, self.len / 4) }
    }

    fn range_ok(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copy `out.len()` bytes from offset `off`. `false` (and nothing copied) if the
    /// range is outside the mapping.
    pub fn read(&self, off: usize, out: &mut [u8]) -> bool {
        if !self.range_ok(off, out.len()) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked above); `out` is a
        // distinct, exclusively borrowed buffer in this process, so the ranges cannot
        // overlap. The bytes belong to one side at a time (module doc).
        unsafe { std::ptr::copy_nonoverlapping(self.raw.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copy `data` to offset `off`. `false` (and nothing copied) if out of range.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if !self.range_ok(off, data.len()) {
            return false;
        }
        // SAFETY: the destination range is inside the mapping (checked above) and `data`
        // is a separate buffer of this process, so they cannot overlap; the destination
        // bytes are owned by the writer under the DMA ownership protocol (module doc).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.raw.as_mut_ptr().add(off), data.len()) };
        true
    }

    /// DMA: copy `len` bytes from `src` at `src_off` to `self` at `off`. `false` (and
    /// nothing copied) if either range is outside its mapping.
    pub fn copy_from(&self, off: usize, src: &Mapping, src_off: usize, len: usize) -> bool {
        if !self.range_ok(off, len) || !src.range_ok(src_off, len) {
            return false;
        }
        let (d, s) = (self.raw.as_mut_ptr() as usize + off, src.raw.as_ptr() as usize + src_off);
        // `copy` tolerates overlap (the same mapping), `copy_nonoverlapping` would not.
        // SAFETY: both ranges are inside live mappings (checked above); ptr::copy allows
        // overlapping ranges; the bytes moved are owned by the DMA engine under the
        // ownership protocol (module doc).
        unsafe { std::ptr::copy(s as *const u8, d as *mut u8, len) };
        true
    }
}

/// Check that a memfd received from another process cannot shrink under a mapping: it
/// must carry `F_SEAL_SHRINK` (as [`Mapping::create_memfd`]'s do).
pub fn check_sealed(fd: impl AsFd) -> io::Result<()> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the descriptor is not a sealable memfd ({e}): create it with memfd_create(MFD_ALLOW_SEALING) and seal it with F_SEAL_SHRINK"),
        )
    })?;
    if !seals.contains(rustix::fs::SealFlags::SHRINK) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the memfd is not sealed against shrinking: add F_SEAL_SHRINK (fcntl F_ADD_SEALS) before sending it, \
             so it cannot shrink under the NIC's mapping",
        ));
    }
    Ok(())
}

/// A shared [`Mapping`] reached as words ([`Mapping::words`]) with the slice's base and
/// length kept at hand: every NIC-memory access of the firmware and host API goes through
/// one, and without the cache each would first follow `Arc` → `Mapping` → the map's base.
#[derive(Clone)]
pub struct SharedWords {
    map: Arc<Mapping>,
    base: NonNull<AtomicU32>,
    len: usize,
}

// SAFETY: the struct is an `Arc<Mapping>` (Send + Sync) and a view of that mapping's
// words, which is only handed out as `&[AtomicU32]` (Send + Sync): atomics may be
// reached from any thread.
unsafe impl Send for SharedWords {}
// SAFETY: as for Send above.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    pub fn new(map: Arc<Mapping>) -> Self {
        let w = map.words();
        let (base, len) = (NonNull::from(w).cast::<AtomicU32>(), w.len());
        SharedWords { map, base, len }
    }

    /// The mapping the words are in.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The mapping as atomic words (the same slice as [`Mapping::words`]).
    #[inline]
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: `base` and `len` were taken from `self.map.words()`, and `self.map` keeps
        // that mapping alive (and mapped at the same address) for as long as `self` is
        // borrowed; the reasoning of `Mapping::words` applies unchanged.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn memfd_words_and_bytes_agree_and_bounds_hold() {
        let m = Mapping::create_memfd("t", 4096).unwrap();
        m.words()[1].store(0x0403_0201, Ordering::Relaxed);
        let mut b = [0u8; 4];
        assert!(m.read(4, &mut b));
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(m.write(4094, &[9, 9]));
        assert!(!m.write(4095, &[9, 9]));
        assert!(!m.read(usize::MAX, &mut b));
        let n = Mapping::create_memfd("u", 4096).unwrap();
        assert!(n.copy_from(0, &m, 4, 4));
        assert_eq!(n.words()[0].load(Ordering::Relaxed), 0x0403_0201);
        assert!(!n.copy_from(4093, &m, 0, 4));
        assert!(Mapping::create_memfd("bad", 6).is_err());
    }

    #[test]
    fn a_memfd_cannot_change_size_and_only_sealed_ones_pass_the_check() {
        let m = Mapping::create_memfd("sealed", 8192).unwrap();
        let e = m.file().set_len(4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::PERM.raw_os_error()), "{e}");
        let e = m.file().set_len(16384).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::PERM.raw_os_error()), "{e}");
        assert_eq!(m.file().metadata().unwrap().len(), 8192);
        check_sealed(m.fd()).unwrap();
        let plain = rustix::fs::memfd_create("plain", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert!(check_sealed(&plain).is_err());
        let open = rustix::fs::memfd_create("open", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
        let e = check_sealed(&open).unwrap_err().to_string();
        assert!(e.contains("F_SEAL_SHRINK"), "{e}");
    }
}
