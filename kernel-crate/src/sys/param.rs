// SPDX-License-Identifier: GPL-2.0-only
//! Module parameters. 6.12's `module!` macro has none, so this builds what C's
//! `module_param` does: a `struct kernel_param` per parameter in the module's `__param`
//! section (the loader parses `insmod trapeze.ko node=1` into them before `init` runs and
//! shows them under `/sys/module/trapeze/parameters/`), plus `parm`/`parmtype` strings in
//! `.modinfo` for `modinfo`. Every parameter is read-only in sysfs (mode 0444).
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

use core::{cell::UnsafeCell, ffi::CStr};
use kernel::bindings;
use kernel::ffi::{c_char, c_int};

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

/// A `charp` (string) parameter: the kernel stores a pointer to the text it parsed.
#[repr(transparent)]
pub(crate) struct StrParam(UnsafeCell<*mut c_char>);

// SAFETY: as for `IntParam`: the kernel writes the pointer only while it parses the
// module's arguments, before `init` runs; the text it points to lives as long as the module.
unsafe impl Sync for StrParam {}

impl StrParam {
    const fn new() -> Self {
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

/// `echo_peer=`: if >= 0, make NetRPC echo calls to that node at load (2-way wait, then
/// nonblocking with a continuation) and check the replies.
pub(crate) static ECHO_PEER: IntParam = IntParam::new(-1);
/// `gms_nodes=`: the GMS members, node ids separated by commas (e.g. `0,1,2`); not given:
/// no GMS node.
pub(crate) static GMS_NODES: StrParam = StrParam::new();
/// `gms_budget_pages=`: pages this node stores for others (its memory budget).
pub(crate) static GMS_BUDGET_PAGES: IntParam = IntParam::new(256);
/// `gms_test_pages=`: if > 0, put that many pages into the other members' memory at load,
/// get them back and check every byte.
pub(crate) static GMS_TEST_PAGES: IntParam = IntParam::new(0);

/// `unload_inflight=`: at the end of probe, leave that many nonblocking echo calls in
/// flight to a node that does not answer (the rmmod test: they must fail cleanly).
pub(crate) static UNLOAD_INFLIGHT: IntParam = IntParam::new(0);

/// `gms_disk_pages=`: if > 0 (and `gms_nodes=` lists another member), `/dev/gms0` with
/// that many 4 KiB pages on the GMS backend (needs `gms_disk_mb=0`: one disk per module).
pub(crate) static GMS_DISK_PAGES: IntParam = IntParam::new(0);

/// `gms_disk_readahead=`: pages `/dev/gms0` on GMS reads ahead after two sequential page
/// reads (0: none; at most 32).
pub(crate) static GMS_DISK_READAHEAD: IntParam = IntParam::new(0);

/// `gms_fail_ms=`: how long a GMS member that was heard from may stay silent before it is
/// declared failed (ms; default 3000, `driver::FAIL_MS_MIN ..= driver::FAIL_MS_MAX`).
/// Loaded hosts running TCG guests give more (`cargo xtask bench vm` gives 10000).
pub(crate) static GMS_FAIL_MS: IntParam = IntParam::new(3000);

static STATS_OPS: ParamOps = ParamOps::show::<crate::stats::Stats>();

/// The module's parameter table, found by the loader in the `__param` section.
#[link_section = "__param"]
#[used]
static PARAMS: ParamTable<12> = ParamTable([
    entry(c"node", &raw const bindings::param_ops_int, int_arg(&NODE), crate::THIS_MODULE.as_ptr()),
    entry(c"echo_peer", &raw const bindings::param_ops_int, int_arg(&ECHO_PEER), crate::THIS_MODULE.as_ptr()),
    entry(c"gms_nodes", &raw const bindings::param_ops_charp, GMS_NODES.0.get().cast(), crate::THIS_MODULE.as_ptr()),
    entry(
        c"gms_budget_pages",
        &raw const bindings::param_ops_int,
        int_arg(&GMS_BUDGET_PAGES),
        crate::THIS_MODULE.as_ptr(),
    ),
    entry(
        c"unload_inflight",
        &raw const bindings::param_ops_int,
        int_arg(&UNLOAD_INFLIGHT),
        crate::THIS_MODULE.as_ptr(),
    ),
    entry(c"gms_disk_pages", &raw const bindings::param_ops_int, int_arg(&GMS_DISK_PAGES), crate::THIS_MODULE.as_ptr()),
    entry(
        c"gms_disk_readahead",
        &raw const bindings::param_ops_int,
        int_arg(&GMS_DISK_READAHEAD),
        crate::THIS_MODULE.as_ptr(),
    ),
    entry(c"gms_fail_ms", &raw const bindings::param_ops_int, int_arg(&GMS_FAIL_MS), crate::THIS_MODULE.as_ptr()),
    entry(c"gms_test_pages", &raw const bindings::param_ops_int, int_arg(&GMS_TEST_PAGES), crate::THIS_MODULE.as_ptr()),
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
modinfo!(PARMTYPE_ECHO_PEER, "parmtype=echo_peer:int\0");
modinfo!(PARM_ECHO_PEER, "parm=echo_peer:if >= 0, NetRPC echo calls to this node at load, checked (default -1)\0");
modinfo!(PARMTYPE_GMS_NODES, "parmtype=gms_nodes:charp\0");
modinfo!(PARM_GMS_NODES, "parm=gms_nodes:GMS members, comma-separated node ids (default: no GMS node)\0");
modinfo!(PARMTYPE_GMS_BUDGET, "parmtype=gms_budget_pages:int\0");
modinfo!(PARM_GMS_BUDGET, "parm=gms_budget_pages:pages this node stores for others (default 256)\0");
modinfo!(PARMTYPE_GMS_TEST, "parmtype=gms_test_pages:int\0");
modinfo!(PARM_GMS_TEST, "parm=gms_test_pages:if > 0, put and get back that many pages at load, checked (default 0)\0");
modinfo!(PARMTYPE_UNLOAD_INFLIGHT, "parmtype=unload_inflight:int\0");
modinfo!(
    PARM_UNLOAD_INFLIGHT,
    "parm=unload_inflight:leave that many echo calls to a silent node in flight (rmmod test)\0"
);
modinfo!(PARMTYPE_GMS_DISK_PAGES, "parmtype=gms_disk_pages:int\0");
modinfo!(PARM_GMS_DISK_PAGES, "parm=gms_disk_pages:if > 0, /dev/gms0 with that many 4 KiB pages on GMS (default 0)\0");
modinfo!(PARMTYPE_GMS_DISK_RA, "parmtype=gms_disk_readahead:int\0");
modinfo!(PARM_GMS_DISK_RA, "parm=gms_disk_readahead:pages /dev/gms0 on GMS reads ahead (default 0, at most 32)\0");
modinfo!(PARMTYPE_GMS_FAIL_MS, "parmtype=gms_fail_ms:int\0");
modinfo!(
    PARM_GMS_FAIL_MS,
    "parm=gms_fail_ms:a GMS member silent this long (ms) is declared failed (default 3000, 2000..=60000)\0"
);
modinfo!(PARM_STATS, "parm=stats:driver counters (read-only, text)\0");

// For parts of the driver that keep their own parameter table in `__param` (the block
// device, `sys/blk.rs`): the loader reads the section as one array, so tables in several
// statics add up.

impl IntParam {
    /// An `int` parameter with this default, for a table outside this file.
    pub(crate) const fn with_default(default: i32) -> Self {
        Self::new(default)
    }
}

/// A table entry for an `int` parameter declared outside this file.
pub(crate) const fn int_param_entry(name: &'static CStr, p: &'static IntParam) -> bindings::kernel_param {
    entry(name, &raw const bindings::param_ops_int, int_arg(p), crate::THIS_MODULE.as_ptr())
}

struct ShowOps<S>(core::marker::PhantomData<S>);

impl<S: Show> ShowOps<S> {
    const OPS: ParamOps = ParamOps::show::<S>();
}

/// A table entry for a read-only text parameter (`S` makes its text) declared outside
/// this file.
pub(crate) const fn show_param_entry<S: Show>(name: &'static CStr) -> bindings::kernel_param {
    entry(name, &ShowOps::<S>::OPS.0, core::ptr::null_mut(), crate::THIS_MODULE.as_ptr())
}

/// A `.modinfo` string as a byte array (`key=value\0`), for tables outside this file.
pub(crate) const fn modinfo_bytes<const N: usize>(s: &str) -> [u8; N] {
    bytes(s)
}
