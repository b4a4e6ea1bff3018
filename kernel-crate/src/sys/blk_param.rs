// SPDX-License-Identifier: GPL-2.0-only
//! The block device's module parameters, in a `__param` table of their own next to
//! `sys/param.rs`'s (the loader reads the section as one array, so the tables add up), and
//! their `.modinfo` descriptions.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

use crate::sys::param::{int_param_entry, modinfo_bytes, show_param_entry, IntParam};
use kernel::bindings;

/// `gms_disk_mb=`: size of `/dev/gms0` in MiB; 0 (default): no disk.
static DISK_MB: IntParam = IntParam::with_default(0);
/// `gms_disk_timeout_ms=`: a request still pending after this fails (`BLK_STS_TIMEOUT`).
static TIMEOUT_MS: IntParam = IntParam::with_default(30_000);
/// `gms_ram_fail_page=`: the RAM backend fails every I/O of this page (-1: none).
static RAM_FAIL_PAGE: IntParam = IntParam::with_default(-1);
/// `gms_ram_stall_page=`: the RAM backend never completes I/O of this page (-1: none).
static RAM_STALL_PAGE: IntParam = IntParam::with_default(-1);

pub(crate) fn disk_mb() -> i32 {
    DISK_MB.get()
}
pub(crate) fn timeout_ms() -> i32 {
    TIMEOUT_MS.get()
}
pub(crate) fn ram_fail_page() -> i32 {
    RAM_FAIL_PAGE.get()
}
pub(crate) fn ram_stall_page() -> i32 {
    RAM_STALL_PAGE.get()
}

#[repr(transparent)]
struct Table([bindings::kernel_param; 5]);

// SAFETY: read-only after compilation (the kernel only reads it); its pointers refer
// to statics.
unsafe impl Sync for Table {}

#[link_section = "__param"]
#[used]
static PARAMS: Table = Table([
    int_param_entry(c"gms_disk_mb", &DISK_MB),
    int_param_entry(c"gms_disk_timeout_ms", &TIMEOUT_MS),
    int_param_entry(c"gms_ram_fail_page", &RAM_FAIL_PAGE),
    int_param_entry(c"gms_ram_stall_page", &RAM_STALL_PAGE),
    show_param_entry::<crate::blk::Stats>(c"gms_disk_stats"),
]);

macro_rules! modinfo {
    ($name:ident, $text:literal) => {
        #[link_section = ".modinfo"]
        #[used]
        static $name: [u8; $text.len()] = modinfo_bytes($text);
    };
}

modinfo!(T_DISK_MB, "parmtype=gms_disk_mb:int\0");
modinfo!(P_DISK_MB, "parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0: no disk)\0");
modinfo!(T_TIMEOUT, "parmtype=gms_disk_timeout_ms:int\0");
modinfo!(P_TIMEOUT, "parm=gms_disk_timeout_ms:requests pending longer fail (default 30000)\0");
modinfo!(T_FAIL, "parmtype=gms_ram_fail_page:int\0");
modinfo!(P_FAIL, "parm=gms_ram_fail_page:RAM backend fails I/O of this page (test; default -1)\0");
modinfo!(T_STALL, "parmtype=gms_ram_stall_page:int\0");
modinfo!(P_STALL, "parm=gms_ram_stall_page:RAM backend never completes this page (test; default -1)\0");
modinfo!(P_STATS, "parm=gms_disk_stats:block device counters (read-only, text)\0");
