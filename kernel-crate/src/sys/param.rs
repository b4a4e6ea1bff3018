// SPDX-License-Identifier: GPL-2.0-only
//! Module parameters. 6.12's `module!` macro has none, so this builds what C's
//! `module_param` does: a `struct kernel_param` per parameter in the module's `__param`
//! section (the loader parses `insmod trapeze.ko node=1` into them before `init` runs and
//! shows them under `/sys/module/trapeze/parameters/`), plus `parm`/`parmtype` strings in
//! `.modinfo` for `modinfo`. Every parameter is read-only in sysfs (mode 0444).
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

use core::{cell::UnsafeCell, ffi::CStr};
use kernel::ffi::{c_char, c_int};
use kernel::bindings;

/// An `int` parameter's value.
#[repr(transparent)]
pub(crate) struct IntParam(UnsafeCell<c_int>);

// SAFETY: the kernel writes the value only while it parses the module's arguments, before
// `init` runs (the sysfs file is read-only), and Rust code only reads it afterwards.
unsafe impl Sync for IntParam {}

impl IntParam {
    const fn new(default: i32) -> Self {
        Self(UnsafeCell::new(default))
    }

    /// The value given at load time (or the default).
    pub(crate) fn get(&self) -> i32 {
        // SAFETY: the pointer is valid and aligned (a static); no write can race with this
        // read once the module runs (see `Sync`).
        unsafe { self.0.get().read_volatile() }
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

#[repr(transparent)]
struct ParamTable<const N: usize>([bindings::kernel_param; N]);

// SAFETY: read-only after compilation (the kernel only reads it); its pointers refer to
// statics.
unsafe impl<const N: usize> Sync for ParamTable<N> {}

const MODE_0444: u16 = 0o444;

const fn entry(
    name: &'static CStr,
    ops: *const bindings::kernel_param_ops,
    arg: *mut core::ffi::c_void,
    module: *mut bindings::module,
) -> bindings::kernel_param {
    bindings::kernel_param {
        name: name.as_ptr().cast(),
        mod_: module,
        ops,
        perm: MODE_0444,
        level: -1,
        flags: 0,
        __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 { arg },
    }
}

/// `node=`: this node's id on the link; -1 (default) takes the id the NIC publishes.
pub(crate) static NODE: IntParam = IntParam::new(-1);
/// `ping_peer=`: if >= 0, ping that node with a payload at load and check the pong.
pub(crate) static PING_PEER: IntParam = IntParam::new(-1);
/// `ping_bytes=`: payload bytes of that ping (1 ..= the frame size).
pub(crate) static PING_BYTES: IntParam = IntParam::new(4096);

static STATS_OPS: ParamOps = ParamOps::show::<crate::stats::Stats>();

/// The module's parameter table, found by the loader in the `__param` section.
#[link_section = "__param"]
#[used]
static PARAMS: ParamTable<4> = ParamTable([
    entry(c"node", &raw const bindings::param_ops_int, int_arg(&NODE), crate::THIS_MODULE.as_ptr()),
    entry(c"ping_peer", &raw const bindings::param_ops_int, int_arg(&PING_PEER), crate::THIS_MODULE.as_ptr()),
    entry(c"ping_bytes", &raw const bindings::param_ops_int, int_arg(&PING_BYTES), crate::THIS_MODULE.as_ptr()),
    entry(c"stats", &raw const STATS_OPS.0, core::ptr::null_mut(), crate::THIS_MODULE.as_ptr()),
]);

/// The `arg` of an `int` parameter: its value's address (`IntParam` is a transparent
/// `UnsafeCell<c_int>`).
const fn int_arg(p: &'static IntParam) -> *mut core::ffi::c_void {
    p.0.get().cast()
}

/// Copy a string into a fixed array (for `.modinfo` entries).
const fn bytes<const N: usize>(s: &str) -> [u8; N] {
    let s = s.as_bytes();
    let mut a = [0u8; N];
    let mut i = 0;
    while i < N {
        a[i] = s[i];
        i += 1;
    }
    a
}

/// A `.modinfo` line (`key=value\0`), as C's `MODULE_PARM_DESC` and `module_param` emit.
macro_rules! modinfo {
    ($name:ident, $text:literal) => {
        #[link_section = ".modinfo"]
        #[used]
        static $name: [u8; $text.len()] = bytes($text);
    };
}

modinfo!(PARMTYPE_NODE, "parmtype=node:int\0");
modinfo!(PARM_NODE, "parm=node:this node's id on the link (default -1: the id the NIC publishes)\0");
modinfo!(PARMTYPE_PING_PEER, "parmtype=ping_peer:int\0");
modinfo!(PARM_PING_PEER, "parm=ping_peer:if >= 0, ping this node at load and check the pong (default -1)\0");
modinfo!(PARMTYPE_PING_BYTES, "parmtype=ping_bytes:int\0");
modinfo!(PARM_PING_BYTES, "parm=ping_bytes:payload bytes of that ping (default 4096)\0");
modinfo!(PARM_STATS, "parm=stats:driver counters (read-only, text)\0");
