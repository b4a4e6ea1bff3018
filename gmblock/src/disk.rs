// SPDX-License-Identifier: GPL-2.0-only
//! The exported disk: a regular file or a block device opened with `O_DIRECT`, so blocks
//! move by the device's DMA between it and the caller's buffers (frames), bypassing the
//! page cache. Every failure maps to a [`BlockError`] the server replies with; the errno
//! is kept for the server's log.

use crate::proto::{BlockError, BLOCK_BYTES};
use anyhow::{bail, Context};
use rustix::fs::FallocateFlags;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, IoSliceMut, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What is exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    BlockDevice,
}

/// An open export.
pub struct Disk {
    file: File,
    pub path: PathBuf,
    pub kind: Kind,
    /// Bytes served: the file's or device's size rounded down to whole blocks.
    pub size: u64,
    pub read_only: bool,
    /// The last OS error behind an `Io` reply (for the log and the stats).
    pub last_error: Option<String>,
}

impl Disk {
    /// Open `path` with `O_DIRECT` (read-only when asked). Refuses what is neither a
    /// regular file nor a block device, an export smaller than a block, and a file system
    /// that does not do `O_DIRECT` (tmpfs), each with the reason.
    pub fn open(path: &Path, read_only: bool) -> anyhow::Result<Disk> {
        let kind = Self::kind_of(path)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(code) if code == rustix::io::Errno::INVAL.raw_os_error() => anyhow::anyhow!(
                    "{}: its file system refuses O_DIRECT (tmpfs does); export a file on a disk file system \
                     or a block device",
                    path.display()
                ),
                _ => anyhow::Error::new(e).context(format!("opening {}", path.display())),
            })?;
        let bytes = match kind {
            Kind::File => file.metadata().with_context(|| format!("{}", path.display()))?.len(),
            Kind::BlockDevice => file.seek(SeekFrom::End(0)).with_context(|| format!("{}: size", path.display()))?,
        };
        let size = bytes / u64::from(BLOCK_BYTES) * u64::from(BLOCK_BYTES);
        if size == 0 {
            bail!("{}: {bytes} bytes, smaller than one {BLOCK_BYTES}-byte block", path.display());
        }
        Ok(Disk { file, path: path.to_path_buf(), kind, size, read_only, last_error: None })
    }

    fn kind_of(path: &Path) -> anyhow::Result<Kind> {
        let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
        if meta.file_type().is_block_device() {
            Ok(Kind::BlockDevice)
        } else if meta.is_file() {
            Ok(Kind::File)
        } else {
            bail!("{}: neither a regular file nor a block device", path.display());
        }
    }

    /// Whether the exported file has been unlinked (never for a device).
    pub fn removed(&self) -> bool {
        self.kind == Kind::File && self.file.metadata().map(|m| m.nlink() == 0).unwrap_or(true)
    }

    fn failed(&mut self, what: &str, e: impl std::fmt::Display) -> BlockError {
        self.last_error = Some(format!("{what}: {e}"));
        BlockError::Io
    }

    /// Read `want` bytes at `offset` into `iov` (aligned); a short read (the file shrank)
    /// is an I/O error.
    pub fn read(&mut self, offset: u64, want: usize, iov: &mut [IoSliceMut<'_>]) -> Result<(), BlockError> {
        let got = rustix::io::preadv(&self.file, iov, offset);
        self.read_result(offset, want, got)
    }

    /// What a read of `want` bytes at `offset` that returned `got` means (here, or on the
    /// ring: [`crate::uring`]).
    pub fn read_result(&mut self, offset: u64, want: usize, got: rustix::io::Result<usize>) -> Result<(), BlockError> {
        match got {
            Ok(n) if n == want => Ok(()),
            Ok(n) => Err(self.failed("read", format!("{n} of {want} bytes at {offset} (the export shrank)"))),
            Err(e) => Err(self.failed("read", e)),
        }
    }

    /// The open export, for reads queued on a ring.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.file)
    }

    /// Write `iov` (`want` bytes, aligned) at `offset`.
    pub fn write(&mut self, offset: u64, want: usize, iov: &[IoSlice<'_>]) -> Result<(), BlockError> {
        if self.read_only {
            return Err(BlockError::ReadOnly);
        }
        match rustix::io::pwritev(&self.file, iov, offset) {
            Ok(n) if n == want => Ok(()),
            Ok(n) => Err(self.failed("write", format!("{n} of {want} bytes at {offset}"))),
            Err(e) => Err(self.failed("write", e)),
        }
    }

    /// `fdatasync`: everything written before is durable.
    pub fn flush(&mut self) -> Result<(), BlockError> {
        rustix::fs::fdatasync(&self.file).map_err(|e| self.failed("fdatasync", e))
    }

    /// Deallocate a range (it reads back as zeros).
    pub fn trim(&mut self, offset: u64, len: u64) -> Result<(), BlockError> {
        if self.read_only {
            return Err(BlockError::ReadOnly);
        }
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(&self.file, flags, offset, len) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP) => Err(BlockError::Unsupported),
            Err(e) => Err(self.failed("trim", e)),
        }
    }
}
