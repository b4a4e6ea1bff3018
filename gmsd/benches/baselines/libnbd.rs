// SPDX-License-Identifier: GPL-2.0-only
//! The few libnbd calls the baseline needs, loaded at run time from Debian's `libnbd0`
//! (`libnbd.so.0`), so building the workspace needs no libnbd headers and a machine
//! without the library gets a clear error when the bench starts, not a link failure.
//!
//! This is the bench's only `unsafe`: calls into a C library through the signatures
//! `libnbd(3)` documents.

use anyhow::{bail, Context};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

#[repr(C)]
struct Handle {
    _opaque: [u8; 0],
}

type Create = unsafe extern "C" fn() -> *mut Handle;
type ConnectTcp = unsafe extern "C" fn(*mut Handle, *const c_char, *const c_char) -> c_int;
type Pread = unsafe extern "C" fn(*mut Handle, *mut c_void, usize, u64, u32) -> c_int;
type Pwrite = unsafe extern "C" fn(*mut Handle, *const c_void, usize, u64, u32) -> c_int;
type GetError = unsafe extern "C" fn() -> *const c_char;
type Close = unsafe extern "C" fn(*mut Handle);

/// One libnbd connection (a handle connected to an NBD server over TCP).
pub struct Nbd {
    h: *mut Handle,
    pread: Pread,
    pwrite: Pwrite,
    get_error: GetError,
    close: Close,
    // Keeps the library mapped while the function pointers above are used.
    _lib: libloading::Library,
}

impl Nbd {
    /// Connect to the NBD server at `host:port` (its default export).
    pub fn connect(host: &str, port: u16) -> anyhow::Result<Nbd> {
        // SAFETY: loading libnbd runs its constructors, which only initialise the library.
        let lib = unsafe { libloading::Library::new("libnbd.so.0") }
            .context("loading libnbd.so.0 (apt-get install libnbd0)")?;
        // SAFETY: each symbol is libnbd's, with the signature libnbd(3) gives it.
        let (create, connect, pread, pwrite, get_error, close) = unsafe {
            (
                *lib.get::<Create>(b"nbd_create\0")?,
                *lib.get::<ConnectTcp>(b"nbd_connect_tcp\0")?,
                *lib.get::<Pread>(b"nbd_pread\0")?,
                *lib.get::<Pwrite>(b"nbd_pwrite\0")?,
                *lib.get::<GetError>(b"nbd_get_error\0")?,
                *lib.get::<Close>(b"nbd_close\0")?,
            )
        };
        // SAFETY: nbd_create takes nothing and returns a new handle or NULL.
        let h = unsafe { create() };
        if h.is_null() {
            bail!("nbd_create failed");
        }
        let nbd = Nbd { h, pread, pwrite, get_error, close, _lib: lib };
        let (host, port) = (CString::new(host)?, CString::new(port.to_string())?);
        // SAFETY: `h` is a live handle; both strings are NUL-terminated and outlive the call.
        if unsafe { connect(nbd.h, host.as_ptr(), port.as_ptr()) } == -1 {
            bail!("nbd_connect_tcp: {}", nbd.error());
        }
        Ok(nbd)
    }

    /// Read `buf.len()` bytes at `offset`.
    pub fn pread(&mut self, buf: &mut [u8], offset: u64) -> anyhow::Result<()> {
        // SAFETY: `h` is live and connected; `buf` is writable for its whole length.
        if unsafe { (self.pread)(self.h, buf.as_mut_ptr().cast(), buf.len(), offset, 0) } == -1 {
            bail!("nbd_pread at {offset}: {}", self.error());
        }
        Ok(())
    }

    /// Write `buf` at `offset`.
    pub fn pwrite(&mut self, buf: &[u8], offset: u64) -> anyhow::Result<()> {
        // SAFETY: `h` is live and connected; `buf` is readable for its whole length.
        if unsafe { (self.pwrite)(self.h, buf.as_ptr().cast(), buf.len(), offset, 0) } == -1 {
            bail!("nbd_pwrite at {offset}: {}", self.error());
        }
        Ok(())
    }

    /// libnbd's message for this thread's last failed call.
    fn error(&self) -> String {
        // SAFETY: nbd_get_error returns NULL or a NUL-terminated string valid until this
        // thread's next libnbd call; it is copied at once.
        let p = unsafe { (self.get_error)() };
        if p.is_null() {
            return "unknown error".into();
        }
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        // SAFETY: `h` came from nbd_create and is closed exactly once, here.
        unsafe { (self.close)(self.h) }
    }
}
