// SPDX-License-Identifier: GPL-2.0-only
//! Module parameters. 6.12's `module!` macro has none, so this builds what C's
//! `module_param` does: a `struct kernel_param` per parameter in the module's `__param`
//! section (the loader parses `insmod trapeze.ko node=1` into them before `init` runs and
//! shows them under `/sys/module/trapeze/parameters/`), plus `parm`/`parmtype` strings in
//! `.modinfo` for `modinfo`. Every parameter is read-only in sysfs (mode 0444).
//!
//! This file knows no parameter of its own: each owner (the driver, the disk, the
//! counters, the self-tests) declares its values ([`IntParam`], [`StrParam`], a [`Show`]
//! type), builds its table from the entry constructors ([`int_entry`], [`charp_entry`],
//! [`show_entry`]) and places it with [`param_table!`], with its descriptions placed by
//! [`modinfo!`]. The loader reads the `__param` section as one array, so the owners'
//! tables add up. Placing a static in a section is what the `unsafe_code` lint flags
//! (`#[link_section]`: the loader trusts the section's layout), so the two macros carry
//! the `allow` and keep that layout right: a `__param` table is a [`ParamTable`] (an array
//! of `struct kernel_param`), a `.modinfo` line a NUL-terminated byte string.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

use core::{cell::UnsafeCell, ffi::CStr};
use kernel::ffi::{c_char, c_int};
use kernel::{bindings, ThisModule};

/// An `int` parameter's value.
#[repr(transparent)]
pub(crate) struct IntParam(UnsafeCell<c_int>);

// SAFETY: the kernel writes the value only while it parses the module's arguments, before
// `init` runs (the sysfs file is read-only), and Rust code only reads it afterwards.
unsafe impl Sync for IntParam {}

impl IntParam {
    /// An `int` parameter with this default.
    pub(crate) const fn new(default: i32) -> Self {
        Self(UnsafeCell::new(default))
    }

    /// The value given at load time (or the default).
    pub(crate) fn get(&self) -> i32 {
        // SAFETY: the pointer is valid and aligned (a static); no write can race with this
        // read once the module runs (see `Sync`).
        unsafe { self.0.get().read_volatile() }
    }
}

/// A `charp` (string) parameter: the kernel stores a pointer to the text it parsed.
#[repr(transparent)]
pub(crate) struct StrParam(UnsafeCell<*mut c_char>);

// SAFETY: as for `IntParam`: the kernel writes the pointer only while it parses the
// module's arguments, before `init` runs; the text it points to lives as long as the module.
unsafe impl Sync for StrParam {}

impl StrParam {
    /// A `charp` parameter, unset until given at load time.
    pub(crate) const fn new() -> Self {
        Self(UnsafeCell::new(core::ptr::null_mut()))
    }

    /// The text given at load time, or `None` if the parameter was not given (or is not
    /// valid UTF-8).
    pub(crate) fn get(&self) -> Option<&'static str> {
        // SAFETY: valid static, no racing write (see `Sync`).
        let p = unsafe { self.0.get().read_volatile() };
        if p.is_null() {
            return None;
        }
        // SAFETY: `param_set_charp` stored a pointer to a NUL-terminated copy of the
        // argument that stays allocated until the module is unloaded (`param_free_charp`).
        let c = unsafe { CStr::from_ptr(p.cast()) };
        c.to_str().ok()
    }
}

/// A read-only parameter whose sysfs file shows text made on each read.
pub(crate) trait Show {
    /// Write the text into `out` (at most `out.len()` bytes); return its length.
    fn show(out: &mut [u8]) -> usize;
}

#[repr(transparent)]
struct ParamOps(bindings::kernel_param_ops);

// SAFETY: only function pointers, never written after compilation.
unsafe impl Sync for ParamOps {}

impl ParamOps {
    const fn show<S: Show>() -> Self {
        Self(bindings::kernel_param_ops { flags: 0, set: Some(refuse_set), get: Some(show_get::<S>), free: None })
    }
}

/// `set` of a show-only parameter: giving it a value at load time fails the load.
///
/// # Safety
///
/// None needed (it reads nothing); `unsafe` only to match `kernel_param_ops`.
unsafe extern "C" fn refuse_set(_val: *const c_char, _kp: *const bindings::kernel_param) -> c_int {
    -(bindings::EPERM as c_int)
}

/// `get`: the text of `S`.
///
/// # Safety
///
/// `buf` must be null or a writable page that nothing else uses during the call (sysfs
/// calls `get` with its show buffer).
unsafe extern "C" fn show_get<S: Show>(buf: *mut c_char, _kp: *const bindings::kernel_param) -> c_int {
    if buf.is_null() {
        return 0;
    }
    // SAFETY: sysfs calls `get` with its show buffer, one page that nothing else uses
    // during the call.
    let out = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), bindings::PAGE_SIZE) };
    S::show(out).min(bindings::PAGE_SIZE) as c_int
}

/// The `arg` of an `int` parameter: its value's address (`IntParam` is a transparent
/// `UnsafeCell<c_int>`).
const fn int_arg(p: &'static IntParam) -> *mut core::ffi::c_void {
    p.0.get().cast()
}

/// Copy a string into a fixed array (a `.modinfo` entry; [`modinfo!`]).
pub(crate) const fn modinfo_bytes<const N: usize>(s: &str) -> [u8; N] {
    let s = s.as_bytes();
    let mut a = [0u8; N];
    let mut i = 0;
    while i < N {
        a[i] = s[i];
        i += 1;
    }
    a
}

/// One `struct kernel_param` of a table.
#[repr(transparent)]
pub(crate) struct Entry(bindings::kernel_param);

/// A module's parameter table (or part of it): what the loader finds in `__param`.
#[repr(transparent)]
pub(crate) struct ParamTable<const N: usize>(pub(crate) [Entry; N]);

// SAFETY: read-only after compilation (the kernel only reads it); its pointers refer to
// statics (names, values, operations) and to the module.
unsafe impl<const N: usize> Sync for ParamTable<N> {}

const MODE_0444: u16 = 0o444;

const fn entry(
    name: &'static CStr,
    ops: *const bindings::kernel_param_ops,
    arg: *mut core::ffi::c_void,
    module: &'static ThisModule,
) -> Entry {
    Entry(bindings::kernel_param {
        name: name.as_ptr().cast(),
        mod_: module.as_ptr(),
        ops,
        perm: MODE_0444,
        level: -1,
        flags: 0,
        __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 { arg },
    })
}

/// The entry of an `int` parameter `name` of `module`.
pub(crate) const fn int_entry(name: &'static CStr, p: &'static IntParam, module: &'static ThisModule) -> Entry {
    entry(name, &raw const bindings::param_ops_int, int_arg(p), module)
}

/// The entry of a `charp` parameter `name` of `module`.
pub(crate) const fn charp_entry(name: &'static CStr, p: &'static StrParam, module: &'static ThisModule) -> Entry {
    entry(name, &raw const bindings::param_ops_charp, p.0.get().cast(), module)
}

struct ShowOps<S>(core::marker::PhantomData<S>);

impl<S: Show> ShowOps<S> {
    const OPS: ParamOps = ParamOps::show::<S>();
}

/// The entry of a read-only text parameter `name` of `module` (`S` makes its text).
pub(crate) const fn show_entry<S: Show>(name: &'static CStr, module: &'static ThisModule) -> Entry {
    entry(name, &ShowOps::<S>::OPS.0, core::ptr::null_mut(), module)
}

/// Place a [`ParamTable`] in the module's `__param` section, where the loader finds it:
/// `param_table!(PARAMS: N = [int_entry(…), …]);`.
macro_rules! param_table {
    ($name:ident: $n:literal = [$($e:expr),* $(,)?]) => {
        // The `unsafe_code` lint flags every `#[link_section]`: the loader reads `__param`
        // as an array of `struct kernel_param`, which a `ParamTable` is.
        #[allow(unsafe_code)]
        #[link_section = "__param"]
        #[used]
        static $name: $crate::sys::param::ParamTable<$n> = $crate::sys::param::ParamTable([$($e),*]);
    };
}
pub(crate) use param_table;

/// A `.modinfo` line (`key=value\0`), as C's `MODULE_PARM_DESC` and `module_param` emit:
/// `modinfo!(NAME, "parm=node:…\0");`.
macro_rules! modinfo {
    ($name:ident, $text:literal) => {
        // The `unsafe_code` lint flags every `#[link_section]`: `.modinfo` holds
        // NUL-terminated strings, which this is.
        #[allow(unsafe_code)]
        #[link_section = ".modinfo"]
        #[used]
        static $name: [u8; $text.len()] = $crate::sys::param::modinfo_bytes($text);
    };
}
pub(crate) use modinfo;
