// SPDX-License-Identifier: GPL-2.0-only
//! The trapeze.ko side of `cargo xtask bench vm`: which parameters the built module has,
//! whether its disk is RAM-backed, and the insmod arguments of every guest.

/// The parameter names a module declares (`parmtype=NAME:TYPE` / `parm=NAME:…` in .modinfo).
pub(super) fn module_params(ko: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = ko
        .split(|&b| b == 0)
        .filter_map(|s| s.strip_prefix(b"parmtype=").or_else(|| s.strip_prefix(b"parm=")))
        .filter_map(|s| s.split(|&b| b == b':').next())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Pages one GMS member stores for others at most (`gms_budget_pages`, params.rs
/// `MAX_BUDGET_PAGES`).
const MAX_BUDGET_PAGES: u64 = 262_144;
/// `gms_fail_ms` for every guest of the bench (the module's default is 3000): TCG guests
/// on a loaded 2-core host can go silent for seconds, and a server declared failed
/// mid-run would turn its pages into errors. `cargo xtask vm suite` keeps the default
/// (it times the failure detection of a killed guest).
const BENCH_FAIL_MS: u32 = 10_000;

/// Whether `/dev/gms0` would be RAM-backed: the module has no `gms_disk_pages` (its GMS
/// backend), only the RAM backend's `gms_disk_mb` (whose `parm=` text says so).
pub(super) fn disk_is_ram_backed(ko: &[u8]) -> bool {
    let has = |key: &[u8]| ko.split(|&b| b == 0).any(|s| s.starts_with(key));
    !has(b"parmtype=gms_disk_pages:")
        && ko
            .split(|&b| b == 0)
            .filter_map(|s| s.strip_prefix(b"parm=gms_disk_mb:"))
            .any(|d| String::from_utf8_lossy(d).contains("RAM backend"))
}

/// The insmod arguments of trapeze.ko per guest, or why the GMS disk cannot be measured.
/// With `gms_disk_pages` (the GMS backend) guest 0's `/dev/gms0` is served by the other
/// guests' memory: they get budgets that hold the whole disk with a quarter to spare,
/// which must fit `MAX_BUDGET_PAGES` each, and guest 0 reads ahead `readahead` pages
/// (`gms_disk_readahead`, if the module has it and `extra` does not set it). Without it,
/// `gms_disk_mb` (RAM backend). Guest 0 keeps one copy of each page (`gms_replicas=1`, if
/// the module has it and `extra` does not set it). Every guest gets `gms_fail_ms=BENCH_FAIL_MS` (if the
/// module has it and `extra` does not set it).
pub(super) fn gms_args(
    params: &[String],
    guests: u16,
    disk_mb: u32,
    readahead: u32,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let has = |p: &str| params.iter().any(|x| x == p);
    let gms_backend = has("gms_disk_pages");
    if !gms_backend && !has("gms_disk_mb") {
        return Err(format!(
            "trapeze.ko (kernel-crate, as built now) has neither gms_disk_pages nor gms_disk_mb, so no block device \
             /dev/gms0 (its parameters: {})",
            params.join(", ")
        ));
    }
    for e in extra {
        let key = e.split('=').next().unwrap_or("");
        if !e.contains('=') || !has(key) {
            return Err(format!("--ko-param {e}: trapeze.ko has no parameter {key:?} (it has: {})", params.join(", ")));
        }
    }
    let disk_pages = u64::from(disk_mb) * 256;
    let servers = u64::from(guests - 1);
    // The servers together hold the whole disk with a quarter to spare.
    let budget = (disk_pages * 5 / 4).div_ceil(servers);
    let budget_given = extra.iter().any(|e| e.starts_with("gms_budget_pages="));
    if gms_backend && !budget_given && budget > MAX_BUDGET_PAGES {
        return Err(format!(
            "a {disk_mb} MiB GMS disk ({disk_pages} pages, +25%) needs {budget} pages on each of {servers} server(s), \
             more than a member stores ({MAX_BUDGET_PAGES}): use --disk-mb {} or more --guests",
            MAX_BUDGET_PAGES * servers * 4 / 5 / 256
        ));
    }
    let members: Vec<String> = (0..guests).map(|k| k.to_string()).collect();
    Ok((0..guests)
        .map(|k| {
            let mut a = Vec::new();
            if has("node") {
                a.push(format!("node={k}"));
            }
            if has("gms_nodes") {
                a.push(format!("gms_nodes={}", members.join(",")));
            }
            if k == 0 {
                if gms_backend {
                    a.push(format!("gms_disk_pages={disk_pages}"));
                    if readahead > 0
                        && has("gms_disk_readahead")
                        && !extra.iter().any(|e| e.starts_with("gms_disk_readahead="))
                    {
                        a.push(format!("gms_disk_readahead={readahead}"));
                    }
                    // One copy of each page, as NBD's server keeps one (the budgets above
                    // hold one).
                    if has("gms_replicas") && !extra.iter().any(|e| e.starts_with("gms_replicas=")) {
                        a.push("gms_replicas=1".to_string());
                    }
                } else {
                    a.push(format!("gms_disk_mb={disk_mb}"));
                }
            } else if has("gms_budget_pages") && !budget_given {
                a.push(format!("gms_budget_pages={}", if gms_backend { budget } else { budget.min(MAX_BUDGET_PAGES) }));
            }
            if has("gms_fail_ms") && !extra.iter().any(|e| e.starts_with("gms_fail_ms=")) {
                a.push(format!("gms_fail_ms={BENCH_FAIL_MS}"));
            }
            a.extend(extra.iter().cloned());
            a.join(" ")
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_params_come_from_modinfo() {
        let ko = b"\x7fELF junk\0parm=node:this node's id\0parmtype=node:int\0parmtype=gms_disk_mb:int\0license=GPL\0";
        assert_eq!(module_params(ko), ["gms_disk_mb", "node"]);
        assert!(!disk_is_ram_backed(ko));
        let ram = b"\0parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0)\0";
        assert!(disk_is_ram_backed(ram));
        // A module with the GMS backend's gms_disk_pages is measured on GMS, even though
        // it still has the RAM backend's gms_disk_mb.
        let both =
            b"\0parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0)\0parmtype=gms_disk_pages:int\0";
        assert!(!disk_is_ram_backed(both));
    }

    #[test]
    fn gms_args_need_a_disk_parameter_and_name_each_node() {
        let without: Vec<String> = ["node", "ping_peer", "stats"].map(String::from).to_vec();
        let why = gms_args(&without, 2, 64, 0, &[]).unwrap_err();
        assert!(why.contains("neither gms_disk_pages nor gms_disk_mb") && why.contains("ping_peer"), "{why}");
        // RAM backend: gms_disk_mb on guest 0.
        let ram: Vec<String> = ["node", "gms_disk_mb", "gms_nodes", "gms_budget_pages"].map(String::from).to_vec();
        let args = gms_args(&ram, 3, 32, 8, &["gms_budget_pages=100".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_mb=32 gms_budget_pages=100");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=100");
        assert!(gms_args(&ram, 2, 32, 0, &["nope=1".into()]).unwrap_err().contains("no parameter \"nope\""));
        // GMS backend: gms_disk_pages on guest 0, budgets that hold the disk + 25%.
        let gms: Vec<String> =
            ["node", "gms_disk_mb", "gms_disk_pages", "gms_nodes", "gms_budget_pages"].map(String::from).to_vec();
        let args = gms_args(&gms, 3, 3, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=768");
        // 768 pages * 1.25 = 960 over two servers.
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=480");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=480");
        // 32 MiB: 8192 pages * 1.25 = 10240 over two servers, within 8192 each.
        let args = gms_args(&gms, 3, 32, 32, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=5120");
        let why = gms_args(&gms, 3, 1700, 0, &[]).unwrap_err();
        assert!(why.contains("needs 272000 pages") && why.contains("--disk-mb 1638"), "{why}");
        assert!(gms_args(&gms, 4, 1700, 0, &[]).is_ok(), "three servers hold 1700 MiB");
        // Read-ahead goes to guest 0 only, when the module has the parameter and the user
        // did not set it.
        let ra: Vec<String> = ["node", "gms_disk_pages", "gms_nodes", "gms_budget_pages", "gms_disk_readahead"]
            .map(String::from)
            .to_vec();
        let args = gms_args(&ra, 3, 32, 16, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192 gms_disk_readahead=16");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=5120");
        let args = gms_args(&ra, 3, 32, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192");
        let args = gms_args(&ra, 3, 32, 16, &["gms_disk_readahead=4".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=8192 gms_disk_readahead=4");
    }

    #[test]
    fn every_guest_gets_the_bench_failure_timeout_unless_given() {
        let p: Vec<String> =
            ["node", "gms_disk_pages", "gms_nodes", "gms_budget_pages", "gms_fail_ms"].map(String::from).to_vec();
        let args = gms_args(&p, 3, 3, 0, &[]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1,2 gms_disk_pages=768 gms_fail_ms=10000");
        assert_eq!(args[1], "node=1 gms_nodes=0,1,2 gms_budget_pages=480 gms_fail_ms=10000");
        assert_eq!(args[2], "node=2 gms_nodes=0,1,2 gms_budget_pages=480 gms_fail_ms=10000");
        // Given with --ko-param: that value only, once.
        let args = gms_args(&p, 2, 3, 0, &["gms_fail_ms=20000".into()]).unwrap();
        assert_eq!(args[0], "node=0 gms_nodes=0,1 gms_disk_pages=768 gms_fail_ms=20000");
        assert_eq!(args[1], "node=1 gms_nodes=0,1 gms_budget_pages=960 gms_fail_ms=20000");
    }
}
