// SPDX-License-Identifier: GPL-2.0-only
//! The driver's module parameters (`node=`, `gms_nodes=`, `gms_budget_mb=`, `gms_budget_pages=`,
//! `gms_dir_pages=`, `gms_fail_ms=`, `gms_disk_pages=`, `gms_disk_readahead=`,
//! `gms_disk_direct_reads=`, `gms_replicas=`), in a `__param` table of their own.

use crate::sys::param::{charp_entry, int_entry, modinfo, param_table, IntParam, StrParam};
use crate::tpz::gms::replica::{default_replicas, MAX_REPLICAS};
use kernel::prelude::*;

/// Every parameter in its range, or the load is refused with a line naming the parameter,
/// its value and the range (before anything is set up).
pub(crate) fn check() -> Result {
    in_range("node", NODE.get(), -1, i64::from(crate::tpz::gms::directory::NO_SITE) - 1)?;
    in_range("gms_budget_pages", GMS_BUDGET_PAGES.get(), 0, MAX_BUDGET_PAGES as i64)?;
    in_range("gms_budget_mb", GMS_BUDGET_MB.get(), 0, (MAX_BUDGET_PAGES / PAGES_PER_MB) as i64)?;
    if GMS_BUDGET_MB.get() > 0 && GMS_BUDGET_PAGES.get() != DEFAULT_BUDGET_PAGES {
        pr_err!("gms_budget_mb and gms_budget_pages both given: give one of them; not loaded\n");
        return Err(EINVAL);
    }
    in_range("gms_dir_pages", GMS_DIR_PAGES.get(), 0, MAX_DIR_PAGES as i64)?;
    let max_disk_pages = crate::blk::MAX_GMS_DISK_MB * 1024 * 1024 / crate::blk::PAGE_BYTES as u64;
    in_range("gms_disk_pages", GMS_DISK_PAGES.get(), 0, max_disk_pages as i64)?;
    in_range("gms_disk_readahead", GMS_DISK_READAHEAD.get(), 0, i64::from(crate::gms_backend::MAX_READAHEAD))?;
    in_range("gms_replicas", GMS_REPLICAS.get(), 0, i64::from(MAX_REPLICAS))?;
    in_range("gms_disk_direct_reads", GMS_DISK_DIRECT_READS.get(), 0, 1)?;
    in_range("gms_nic_answers", GMS_NIC_ANSWERS.get(), 0, 1)?;
    in_range("gms_degraded_writes", GMS_DEGRADED_WRITES.get(), 0, 1)?;
    gms_nodes_in_range()?;
    gms_fail_ms().map(|_| ())
}

/// Every id in `gms_nodes=` within what GMS liveness and the disk's store cover
/// (`0..=MAX_NODE`), or the load is refused naming it. A malformed list is only reported
/// when the node joins (no GMS node).
fn gms_nodes_in_range() -> Result {
    use crate::tpz::gms::store::nodes::MAX_NODE;
    let Some(list) = GMS_NODES.get() else { return Ok(()) };
    let mut ids = [0u16; crate::net::MEMBERS];
    let n = crate::net::parse_members(list, &mut ids).unwrap_or(0);
    match ids[..n].iter().find(|&&m| m > MAX_NODE) {
        Some(m) => {
            pr_err!(
                "gms_nodes={:?}: node {} is past the ids GMS liveness covers (0..={}): not loaded\n",
                list,
                m,
                MAX_NODE
            );
            Err(EINVAL)
        }
        None => Ok(()),
    }
}

/// Most pages a node stores for others: 1 GiB (each in a page of its own; the frame pool
/// is the receive ring, the spares and the budget, `shared` checks that they fit).
pub(crate) const MAX_BUDGET_PAGES: usize = 262_144;
/// Most pages a node can be the directory node for (about 72 MiB of table).
pub(crate) const MAX_DIR_PAGES: usize = 1 << 20;

/// Pages in a MiB.
const PAGES_PER_MB: usize = 256;
const DEFAULT_BUDGET_PAGES: i32 = 256;

/// The budget in pages: `gms_budget_mb=` if given, else `gms_budget_pages=` (checked by
/// [`check`]).
pub(crate) fn gms_budget_pages() -> usize {
    match usize::try_from(GMS_BUDGET_MB.get()).unwrap_or(0) {
        0 => usize::try_from(GMS_BUDGET_PAGES.get()).unwrap_or(0),
        mb => mb * PAGES_PER_MB,
    }
}

/// `gms_dir_pages=`, checked by [`check`]; 0 (default): twice the budget, and at least
/// this node's own disk (its pages times its copies: the directory entries of its pages
/// spread over the members, and this node may be the directory of any of them), at least
/// 16384, at most [`MAX_DIR_PAGES`].
pub(crate) fn gms_dir_pages() -> usize {
    match usize::try_from(GMS_DIR_PAGES.get()).unwrap_or(0) {
        0 => {
            let disk = usize::try_from(GMS_DISK_PAGES.get()).unwrap_or(0);
            let copies = match usize::try_from(GMS_REPLICAS.get()).unwrap_or(0) {
                0 => 2,
                r => r,
            };
            (2 * gms_budget_pages()).max(16_384).max(disk.saturating_mul(copies).min(MAX_DIR_PAGES))
        }
        n => n,
    }
}

/// `gms_replicas=`, checked by [`check`]: copies of each `/dev/gms0` page among `members`
/// GMS members (this node included); 0 (default): two once there are three members, else
/// one (`gms::replica::default_replicas`).
pub(crate) fn gms_replicas(members: usize) -> u8 {
    match u8::try_from(GMS_REPLICAS.get()).unwrap_or(0) {
        0 => default_replicas(members),
        n => n,
    }
}

/// Bounds of `gms_fail_ms=` (how long a member may stay silent before
/// it is declared failed; default 3000): at least two heartbeat periods (`shared` checks
/// it), at most a minute (readers of a dead member's pages wait that long before they fail).
pub(crate) const FAIL_MS_MIN: u64 = 2_000;
pub(crate) const FAIL_MS_MAX: u64 = 60_000;

/// `gms_fail_ms=`, checked: out of `FAIL_MS_MIN ..= FAIL_MS_MAX` refuses the load.
pub(crate) fn gms_fail_ms() -> Result<u64> {
    let v = GMS_FAIL_MS.get();
    match u64::try_from(v) {
        Ok(ms @ FAIL_MS_MIN..=FAIL_MS_MAX) => Ok(ms),
        _ => {
            pr_err!("gms_fail_ms={} is out of range ({}..={} ms): not loaded\n", v, FAIL_MS_MIN, FAIL_MS_MAX);
            Err(EINVAL)
        }
    }
}

fn in_range(name: &str, v: i32, lo: i64, hi: i64) -> Result {
    if (lo..=hi).contains(&i64::from(v)) {
        return Ok(());
    }
    pr_err!("{}={} is out of range ({}..={}): not loaded\n", name, v, lo, hi);
    Err(EINVAL)
}

/// `node=`: this node's id on the link; -1 (default) takes the id the NIC publishes.
pub(crate) static NODE: IntParam = IntParam::new(-1);
/// `gms_nodes=`: the GMS members, node ids separated by commas (e.g. `0,1,2`); not given:
/// no GMS node.
pub(super) static GMS_NODES: StrParam = StrParam::new();
/// `gms_budget_pages=`: pages this node stores for others (its memory budget).
pub(super) static GMS_BUDGET_PAGES: IntParam = IntParam::new(DEFAULT_BUDGET_PAGES);
/// `gms_budget_mb=`: the budget in MiB instead (0, default: `gms_budget_pages=`).
pub(super) static GMS_BUDGET_MB: IntParam = IntParam::new(0);
/// `gms_dir_pages=`: pages this node can be the directory node for (live entries and
/// tombstones; 0: twice the budget, at least the disk's pages times its copies, at least
/// 16384).
pub(super) static GMS_DIR_PAGES: IntParam = IntParam::new(0);
/// `gms_disk_pages=`: if > 0 (and `gms_nodes=` lists another member), `/dev/gms0` with
/// that many 4 KiB pages on the GMS backend (with `gms_disk_mb=` too, the RAM disk is
/// `/dev/gmsram0` beside it).
pub(super) static GMS_DISK_PAGES: IntParam = IntParam::new(0);
/// `gms_disk_readahead=`: pages `/dev/gms0` reads ahead once two reads in a row were of
/// consecutive pages (0..=32; 0, the default: off; `gms::store::ahead`).
pub(super) static GMS_DISK_READAHEAD: IntParam = IntParam::new(0);
/// `gms_fail_ms=`: how long a GMS member may stay silent before it is declared failed,
/// and how long probe waits to hear the `gms_nodes=` peers (ms; default 3000, `FAIL_MS_MIN ..= FAIL_MS_MAX`). Loaded hosts
/// running TCG guests give more (`cargo xtask bench vm` gives 10000).
pub(super) static GMS_FAIL_MS: IntParam = IntParam::new(3000);
/// `gms_replicas=`: copies of each `/dev/gms0` page, each on its own member (0, default:
/// two with three members or more, else one; at most 4).
pub(super) static GMS_REPLICAS: IntParam = IntParam::new(0);
/// `gms_disk_direct_reads=`: 1 (default): `/dev/gms0` reads go straight to the member a
/// page was put to; 0: through the page's directory node (the GMS paper's path).
pub(super) static GMS_DISK_DIRECT_READS: IntParam = IntParam::new(1);
/// `gms_nic_answers=`: 1 (default): a `/dev/gms0` read names the entry of the holder's
/// NIC answer table its `PUTDONE` gave, and that NIC answers it without its host
/// (one-sided reads); 0: the holder's host serves every read.
pub(super) static GMS_NIC_ANSWERS: IntParam = IntParam::new(1);

/// `gms_degraded_writes=`: 1: with fewer live members than `gms_replicas=`, a
/// `/dev/gms0` write is acknowledged with the copies it could place (counted); 0
/// (default): it fails.
pub(super) static GMS_DEGRADED_WRITES: IntParam = IntParam::new(0);
/// `gms_disk_id=`: the identity of this node's `/dev/gms0` on GMS — its page space, and
/// what a later load names to read it back (a number, or any name; default: derived
/// from this node's id, so two nodes' disks never share pages).
pub(super) static GMS_DISK_ID: StrParam = StrParam::new();

/// The disk identity: `gms_disk_id=` (a number as it is, a name hashed), else one derived
/// from node `me`'s id.
pub(super) fn gms_disk_id(me: u16) -> u64 {
    match GMS_DISK_ID.get().map(str::trim) {
        Some(s) if !s.is_empty() => s.parse::<u64>().unwrap_or_else(|_| {
            // FNV-1a of the name.
            s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
        }),
        _ => 0x6d73_6730_0000_0000 | u64::from(me),
    }
}

param_table!(PARAMS: 13 = [
    int_entry(c"node", &NODE, &crate::THIS_MODULE),
    charp_entry(c"gms_nodes", &GMS_NODES, &crate::THIS_MODULE),
    int_entry(c"gms_budget_pages", &GMS_BUDGET_PAGES, &crate::THIS_MODULE),
    int_entry(c"gms_budget_mb", &GMS_BUDGET_MB, &crate::THIS_MODULE),
    int_entry(c"gms_dir_pages", &GMS_DIR_PAGES, &crate::THIS_MODULE),
    int_entry(c"gms_disk_pages", &GMS_DISK_PAGES, &crate::THIS_MODULE),
    int_entry(c"gms_disk_readahead", &GMS_DISK_READAHEAD, &crate::THIS_MODULE),
    int_entry(c"gms_fail_ms", &GMS_FAIL_MS, &crate::THIS_MODULE),
    int_entry(c"gms_replicas", &GMS_REPLICAS, &crate::THIS_MODULE),
    int_entry(c"gms_disk_direct_reads", &GMS_DISK_DIRECT_READS, &crate::THIS_MODULE),
    int_entry(c"gms_nic_answers", &GMS_NIC_ANSWERS, &crate::THIS_MODULE),
    int_entry(c"gms_degraded_writes", &GMS_DEGRADED_WRITES, &crate::THIS_MODULE),
    charp_entry(c"gms_disk_id", &GMS_DISK_ID, &crate::THIS_MODULE),
]);

modinfo!(PARMTYPE_NODE, "parmtype=node:int\0");
modinfo!(PARM_NODE, "parm=node:this node's id on the link (default -1: the id the NIC publishes)\0");
modinfo!(PARMTYPE_GMS_NODES, "parmtype=gms_nodes:charp\0");
modinfo!(
    PARM_GMS_NODES,
    "parm=gms_nodes:GMS members, comma-separated node ids 0..=63, each a member once heard (default: no GMS node)\0"
);
modinfo!(PARMTYPE_GMS_BUDGET, "parmtype=gms_budget_pages:int\0");
modinfo!(
    PARM_GMS_BUDGET,
    "parm=gms_budget_pages:pages this node stores for others (default 256, at most 262144 = 1 GiB)\0"
);
modinfo!(PARMTYPE_GMS_BUDGET_MB, "parmtype=gms_budget_mb:int\0");
modinfo!(
    PARM_GMS_BUDGET_MB,
    "parm=gms_budget_mb:MiB this node stores for others, instead of gms_budget_pages (default 0; at most 1024)\0"
);
modinfo!(PARMTYPE_GMS_DIR, "parmtype=gms_dir_pages:int\0");
modinfo!(
    PARM_GMS_DIR,
    "parm=gms_dir_pages:pages this node can direct (default 0: twice the budget, at least the disk's pages times its copies and 16384; at most 1048576)\0"
);
modinfo!(PARMTYPE_GMS_DISK_PAGES, "parmtype=gms_disk_pages:int\0");
modinfo!(
    PARM_GMS_DISK_PAGES,
    "parm=gms_disk_pages:if > 0, /dev/gms0 with that many 4 KiB pages on GMS (default 0, at most 16777216 = 64 GiB)\0"
);
modinfo!(PARMTYPE_GMS_DISK_RA, "parmtype=gms_disk_readahead:int\0");
modinfo!(PARM_GMS_DISK_RA, "parm=gms_disk_readahead:pages read ahead of sequential reads (0..=32, default 0: off)\0");
modinfo!(PARMTYPE_GMS_FAIL_MS, "parmtype=gms_fail_ms:int\0");
modinfo!(
    PARM_GMS_FAIL_MS,
    "parm=gms_fail_ms:a GMS member silent this long (ms) is declared failed (default 3000, 2000..=60000)\0"
);
modinfo!(PARMTYPE_GMS_REPLICAS, "parmtype=gms_replicas:int\0");
modinfo!(
    PARM_GMS_REPLICAS,
    "parm=gms_replicas:copies of each /dev/gms0 page, each on its own member (default 0: 2 with 3 members or more, else 1; at most 4)\0"
);
modinfo!(PARMTYPE_GMS_DISK_DIRECT, "parmtype=gms_disk_direct_reads:int\0");
modinfo!(
    PARM_GMS_DISK_DIRECT,
    "parm=gms_disk_direct_reads:1 (default): /dev/gms0 reads go straight to the member holding the page; 0: through its directory node\0"
);
modinfo!(PARMTYPE_GMS_NIC_ANSWERS, "parmtype=gms_nic_answers:int\0");
modinfo!(
    PARM_GMS_NIC_ANSWERS,
    "parm=gms_nic_answers:1 (default): /dev/gms0 reads are answered by the holder's NIC from its answer table, without its host; 0: by its host\0"
);
modinfo!(PARMTYPE_GMS_DEGRADED, "parmtype=gms_degraded_writes:int\0");
modinfo!(
    PARM_GMS_DEGRADED,
    "parm=gms_degraded_writes:1: with fewer live members than gms_replicas, /dev/gms0 writes are acknowledged with fewer copies; 0 (default): they fail\0"
);
modinfo!(PARMTYPE_GMS_DISK_ID, "parmtype=gms_disk_id:charp\0");
modinfo!(
    PARM_GMS_DISK_ID,
    "parm=gms_disk_id:identity of /dev/gms0 on GMS, a number or a name (default: derived from this node's id)\0"
);
