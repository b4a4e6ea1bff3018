// SPDX-License-Identifier: GPL-2.0-only
//! What a guest's console shows, and whether each kind of run passed.

use std::process::ExitStatus;

/// The ivshmem-doorbell device's PCI id (vendor:device) as the guest lists it.
pub(super) const IVSHMEM_PCI_ID: &str = "1af4:1110";
/// The kernel prints this when `poweroff -f` reaches ACPI.
const POWER_DOWN: &str = "reboot: Power down";
/// Console text that means the kernel is in trouble.
pub(super) const KERNEL_TROUBLE: [&str; 6] =
    ["Kernel panic", "Oops", "BUG:", "WARNING:", "Call Trace", "general protection fault"];

/// The `vm module-test` phases after the ping with 3 guests or more
/// (`kernel-crate/guest/ping.sh`): guest 0 answered every echo call; every other guest's
/// NetRPC echo test and GMS put/get test passed (checked byte for byte in the module), and
/// it unloaded with calls and getpages in flight, all failed cleanly. (passed, summary).
pub(super) fn rpc_phase_ok(console: &str, guest: u16) -> (bool, String) {
    let has = |t: &str| console.lines().any(|l| l.contains(t));
    if guest == 0 {
        let served = console.lines().find_map(|l| {
            let t = l.split("trapeze-test: node 0 answered ").nth(1)?;
            let mut w = t.split(' ');
            let got: u32 = w.next()?.parse().ok()?;
            let want: u32 = w.nth(1)?.parse().ok()?;
            Some((got, want))
        });
        let ok = served.is_some_and(|(g, w)| w > 0 && g >= w);
        let what = served.map_or("no echo count".to_string(), |(g, w)| format!("answered {g} of {w} echo calls"));
        return (ok, what);
    }
    let echo = has("trapeze: netrpc echo with node 0: PASSED");
    let gms = has("trapeze: gms test: PASSED");
    let inflight = has("were in flight at unload: failed (0 calls, 0 operations left)");
    // Guest 1 also checks /dev/gms0 on the GMS backend.
    let disk = guest != 1 || has("trapeze-test: node 1: gms0 on GMS") && has("read back O_DIRECT") && !has(": FAILED");
    let ok = echo && gms && inflight && disk;
    (ok, format!(
        "echo (wait, continuation, deferred): {}; gms put/get verified: {}; unload with requests in flight failed them cleanly: {}{}",
        yes_no(echo),
        yes_no(gms),
        yes_no(inflight),
        if guest == 1 { format!("; /dev/gms0 on GMS: {}", yes_no(disk)) } else { String::new() }
    ))
}

pub(super) fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

/// What a run checks in each guest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Plain,
    Smoke,
    ModuleTest,
    BlkTest,
}

/// What the issue asks the suite's log to show, from guest 0's console: each item with
/// the PASS/FAIL lines behind it.
pub(super) fn suite_summary(console: &str) -> Vec<String> {
    let lines: Vec<String> = console
        .lines()
        .map(printable)
        .filter(|l| l.starts_with("trapeze-suite: PASS ") || l.starts_with("trapeze-suite: FAIL "))
        .collect();
    let mut out = Vec::new();
    for (item, keys) in [
        ("module load", &["module loaded", "servers B and C"][..]),
        ("data verified", &["mke2fs", "mount -t ext2", "files written", "data verified", "probe pages"][..]),
        ("replicas", &["replicas: every page"][..]),
        ("failure case", &["failure case"][..]),
        ("restart", &["restart:"][..]),
        ("second failure", &["second failure"][..]),
        ("clean unload", &["clean unload"][..]),
    ] {
        let hits: Vec<&String> = lines.iter().filter(|l| keys.iter().any(|k| l.contains(k))).collect();
        let ok = !hits.is_empty() && hits.iter().all(|l| l.contains(": PASS "));
        out.push(format!("{item}: {}", if ok { "PASS" } else { "FAIL" }));
        out.extend(hits.iter().map(|l| format!("    {l}")));
    }
    out
}

/// What a guest's console shows.
pub(super) struct GuestReport {
    pub(super) nic_listed: bool,
    pub(super) rust_loaded: bool,
    pub(super) powered_off: bool,
    /// trapeze.ko brought the endpoint up.
    pub(super) trapeze_up: bool,
    /// trapeze.ko's remove halted the NIC and freed its frames.
    pub(super) trapeze_removed: bool,
    /// Guest 0 answered a ping; any other guest had its pong verified.
    pub(super) ping_ok: bool,
    /// The guest's script ended with status 0.
    pub(super) script_ok: bool,
    pub(super) kernel_trouble: bool,
    /// `vm blk-test`: the script's PASS and FAIL lines, and whether it printed its total.
    pub(super) blk_passed: usize,
    pub(super) blk_failed: usize,
    pub(super) blk_done: bool,
    /// `vm suite`, guest 0: the same for `trapeze-suite:` lines.
    pub(super) suite_passed: usize,
    pub(super) suite_failed: usize,
    pub(super) suite_done: bool,
}

impl GuestReport {
    /// A GMS server guest's verdict and line (`vm swap`, `vm big-disk`, `vm disks`): the NIC listed,
    /// trapeze.ko up and removed cleanly, its script ended with status 0, a quiet kernel,
    /// powered off.
    pub(super) fn server_verdict(&self) -> (bool, String) {
        let ok = self.nic_listed && self.powered_off && !self.kernel_trouble && self.trapeze_up && self.trapeze_removed;
        let what = format!(
            "server: trapeze.ko up: {}; rmmod clean: {}; script status 0: {}; kernel quiet: {}",
            yes_no(self.trapeze_up),
            yes_no(self.trapeze_removed),
            yes_no(self.script_ok),
            yes_no(!self.kernel_trouble),
        );
        (ok && self.script_ok, what)
    }
}

/// A script's `PREFIX PASS …` and `PREFIX FAIL …` lines, and whether it printed its total
/// (`PREFIX N passed, M failed`).
pub(super) fn pass_fail(console: &str, prefix: &str) -> (usize, usize, bool) {
    let lines = || console.lines().map(printable);
    let pass = format!("{prefix}PASS ");
    let fail = format!("{prefix}FAIL ");
    (
        lines().filter(|l| l.starts_with(&pass)).count(),
        lines().filter(|l| l.starts_with(&fail)).count(),
        lines().any(|l| {
            l.strip_prefix(prefix).is_some_and(|t| {
                t.ends_with(" failed") && t.split(' ').next().is_some_and(|n| n.parse::<u32>().is_ok())
            })
        }),
    )
}

impl GuestReport {
    pub(super) fn of(console: &str, exit: Option<ExitStatus>, guest: u16) -> Self {
        let kernel_trouble = KERNEL_TROUBLE.iter().any(|t| console.contains(t));
        let (suite_passed, suite_failed, suite_done) = pass_fail(console, "trapeze-suite: ");
        GuestReport {
            suite_passed,
            suite_failed,
            suite_done,
            nic_listed: console.lines().any(|l| l.contains("trapeze-guest: pci ") && l.contains(IVSHMEM_PCI_ID)),
            rust_loaded: console.contains("Rust minimal sample (init)")
                && console.contains("Rust minimal sample (exit)"),
            powered_off: console.contains(POWER_DOWN)
                && !console.contains("Kernel panic")
                && exit.is_some_and(|s| s.success()),
            trapeze_up: console.lines().any(|l| l.contains("trapeze: ") && l.contains(" up: endpoint live")),
            trapeze_removed: console.contains("removed: NIC halted, frames freed"),
            ping_ok: console.lines().any(|l| {
                l.contains("trapeze: ")
                    && if guest == 0 {
                        l.contains("answered with a pong")
                    } else {
                        l.contains("bytes verified byte for byte")
                    }
            }),
            script_ok: console.contains("/etc/trapeze/run.sh exited with status 0"),
            kernel_trouble,
            blk_passed: console.lines().filter(|l| l.starts_with("trapeze-blk: PASS ")).count(),
            blk_failed: console.lines().filter(|l| l.starts_with("trapeze-blk: FAIL ")).count(),
            blk_done: console.lines().any(|l| {
                l.strip_prefix("trapeze-blk: ").is_some_and(|t| {
                    t.ends_with(" failed") && t.split(' ').next().is_some_and(|n| n.parse::<u32>().is_ok())
                })
            }),
        }
    }
    /// `vm suite`: guest 0 passed every check; a server loaded the module, and unloaded
    /// it cleanly and powered off — unless it was killed on request for good (`killed`
    /// and not `restarted`; a guest booted again is judged by its second life's console,
    /// this one). No kernel trouble.
    pub(super) fn suite_ok(&self, guest: u16, killed: bool, restarted: bool) -> bool {
        if self.kernel_trouble || !self.nic_listed {
            return false;
        }
        if guest == 0 {
            return self.powered_off
                && self.suite_done
                && self.suite_passed > 0
                && self.suite_failed == 0
                && self.script_ok;
        }
        if killed && !restarted {
            return self.trapeze_up;
        }
        self.powered_off && self.trapeze_up && self.trapeze_removed && self.script_ok
    }

    pub(super) fn ok(&self, mode: Mode) -> bool {
        let base = self.nic_listed && self.powered_off;
        match mode {
            Mode::Plain => base,
            Mode::Smoke => base && self.rust_loaded,
            Mode::BlkTest => {
                base && self.blk_done
                    && self.blk_passed > 0
                    && self.blk_failed == 0
                    && self.script_ok
                    && !self.kernel_trouble
            }
            Mode::ModuleTest => {
                base && self.trapeze_up
                    && self.trapeze_removed
                    && self.ping_ok
                    && self.script_ok
                    && !self.kernel_trouble
            }
        }
    }
}

/// The unload's link line of a guest (`node N link (keyed) refused: mac_rejected=0 …`,
/// kernel-crate `driver/remove.rs`): whether it names every refusal of the link
/// (`LinkCounter`), says the link was keyed as the run asked (`keyed`), and, under a key,
/// counts no refusal an honest cluster cannot cause (a MAC failure, a replay, a stale
/// incarnation, a forged trailer: every member has the key, none restarts its NIC); and
/// the line itself (or why it is missing).
pub(super) fn link_line_ok(console: &str, keyed: bool) -> (bool, String) {
    use trapeze_firmware::iface::layout::LinkCounter;
    let Some(line) = console.lines().map(printable).find(|l| l.contains(" link (") && l.contains(") refused:")) else {
        return (false, "no link line at unload".to_string());
    };
    let text = line[line.find("node ").unwrap_or(0)..].to_string();
    let count =
        |name: &str| text.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok());
    let named = LinkCounter::ALL.iter().all(|c| count(c.name()).is_some());
    let as_asked = text.contains(if keyed { "(keyed)" } else { "(no cluster key)" });
    let honest = !keyed
        || [
            LinkCounter::MacRejected,
            LinkCounter::Replayed,
            LinkCounter::ReplayStaleEpoch,
            LinkCounter::ReplayTableFull,
            LinkCounter::TrailerForged,
        ]
        .iter()
        .all(|c| count(c.name()) == Some(0));
    (named && as_asked && honest, text)
}

/// A console line without terminal escape sequences (the BIOS clears the screen) and
/// other control characters.
pub(super) fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // ESC [ params letter, or ESC + one character.
                if chars.next_if_eq(&'[').is_some() {
                    while chars.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
                } else {
                    chars.next();
                }
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// The console around its first kernel-trouble line (12 lines before, 40 after), so that an
/// oops's trace is in the run's output even when a later run removes the console file.
pub(super) fn trouble_context(console: &str) -> Vec<String> {
    let lines: Vec<&str> = console.lines().collect();
    let Some(first) = lines.iter().position(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t))) else {
        return Vec::new();
    };
    lines[first.saturating_sub(12)..(first + 41).min(lines.len())].iter().map(|l| printable(l)).collect()
}

/// Console lines worth repeating in the summary.
pub(super) fn interesting(l: &str) -> bool {
    [
        "trapeze-guest:",
        "trapeze-test:",
        "trapeze-blk:",
        "trapeze-suite:",
        "trapeze: ",
        "rust_minimal",
        "Linux version",
        "reboot:",
        "ivshmem",
    ]
    .iter()
    .chain(KERNEL_TROUBLE.iter())
    .any(|k| l.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trouble_context_keeps_the_trace_after_the_first_trouble_line() {
        assert!(trouble_context("boot\nfine\n").is_empty());
        let mut console: String = (0..20).map(|i| format!("before {i}\n")).collect();
        console.push_str("BUG: unable to handle page fault\nCall Trace:\n");
        console.extend((0..60).map(|i| format!(" ? frame{i}+0x10\n")));
        let ctx = trouble_context(&console);
        assert_eq!(ctx.len(), 53);
        assert_eq!(ctx[0], "before 8");
        assert_eq!(ctx[12], "BUG: unable to handle page fault");
        assert_eq!(ctx[14], " ? frame0+0x10");
    }

    #[test]
    fn the_link_line_names_every_refusal_keyed_as_asked() {
        let all = "mac_rejected=0 replayed=0 replay_stale_epoch=0 replay_table_full=0 trailer_forged=0 \
                   crc_errors=0 bad_frames=3 foreign_frames=0 reassembly_timeouts=0 rx_queue_drops=0";
        let keyed = format!("[   9.1] trapeze: node 1 link (keyed) refused: {all}\r\n");
        let (ok, line) = link_line_ok(&keyed, true);
        assert!(ok, "{line}");
        assert!(line.starts_with("node 1 link (keyed)"), "{line}");
        assert!(!link_line_ok(&keyed, false).0, "keyed, asked for no key");
        let open = keyed.replace("(keyed)", "(no cluster key)").replace("replayed=0", "replayed=2");
        assert!(link_line_ok(&open, false).0, "without a key nothing is refused as a replay, whatever it says");
        assert!(
            !link_line_ok(&keyed.replace("replayed=0", "replayed=2"), true).0,
            "an honest keyed run replays nothing"
        );
        assert!(!link_line_ok(&keyed.replace(" trailer_forged=0", ""), true).0, "every name");
        assert_eq!(link_line_ok("nothing\n", true), (false, "no link line at unload".to_string()));
    }

    #[test]
    fn escapes_are_dropped_from_console_lines() {
        assert_eq!(
            printable("Booting from ROM..\u{1b}c\u{1b}[?7l\u{1b}[2JLinux version 6.12\r"),
            "Booting from ROM..Linux version 6.12"
        );
    }

    #[test]
    fn report_needs_the_nic_and_a_clean_poweroff() {
        let good = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\nreboot: Power down\n";
        let r = GuestReport::of(good, Some(ExitStatus::default()), 0);
        assert!(r.ok(Mode::Plain) && !r.ok(Mode::Smoke) && !r.ok(Mode::ModuleTest));
        let panic = format!("{good}Kernel panic - not syncing\n");
        assert!(!GuestReport::of(&panic, Some(ExitStatus::default()), 0).ok(Mode::Plain));
    }

    #[test]
    fn blk_test_needs_every_check_passed_and_the_total() {
        let ok = Some(ExitStatus::default());
        let run = "trapeze-guest: pci 0000:00:03.0 1af4:1110 class 050000\n\
            trapeze-blk: PASS disk /dev/gms0 appears\n\
            trapeze-blk: PASS 8 MiB read back after drop_caches: md5 0\n\
            trapeze-blk: 2 passed, 0 failed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        let r = GuestReport::of(run, ok, 0);
        assert!(r.ok(Mode::BlkTest) && r.blk_passed == 2);
        let failed = run.replacen("PASS 8 MiB", "FAIL 8 MiB", 1);
        assert!(!GuestReport::of(&failed, ok, 0).ok(Mode::BlkTest));
        let cut_short = run.replace("trapeze-blk: 2 passed, 0 failed\n", "");
        assert!(!GuestReport::of(&cut_short, ok, 0).ok(Mode::BlkTest), "the total line must be there");
        let oops = format!("{run}Oops: 0000 [#1] SMP\n");
        assert!(!GuestReport::of(&oops, ok, 0).ok(Mode::BlkTest));
    }

    #[test]
    fn suite_needs_every_check_the_kill_and_a_clean_server() {
        let ok = Some(ExitStatus::default());
        let a = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\n\
            trapeze-suite: PASS module loaded, /dev/gms0 on GMS (1024 pages)\n\
            trapeze-suite: PASS data verified: 4 files' md5sums match\n\
            trapeze-suite: PASS failure case: node 2 declared failed 3.4 s after the kill request\n\
            trapeze-suite: PASS clean unload with NetRPC calls and getpages in flight\n\
            trapeze-suite: 4 passed, 0 failed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        assert!(GuestReport::of(a, ok, 0).suite_ok(0, false, false));
        let failed = a.replacen("PASS failure case", "FAIL failure case", 1);
        assert!(!GuestReport::of(&failed, ok, 0).suite_ok(0, false, false));
        let cut = a.replace("trapeze-suite: 4 passed, 0 failed\n", "");
        assert!(!GuestReport::of(&cut, ok, 0).suite_ok(0, false, false), "the total line must be there");
        let sum = suite_summary(&failed);
        assert_eq!(sum.iter().filter(|l| l.ends_with(": PASS")).count(), 3);
        assert!(sum.contains(&"failure case: FAIL".to_string()));
        // A server: loaded and unloaded cleanly; one booted again too, in its second life;
        // one killed for good: loaded, then killed.
        let b = "trapeze-guest: pci 0000:00:02.0 1af4:1110 class 050000\n\
            [ 3.1] trapeze: 0000:00:02.0: node 1 up: endpoint live, 32 receive frames\n\
            [ 9.2] trapeze: 0000:00:02.0: node 1 removed: NIC halted, frames freed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        assert!(GuestReport::of(b, ok, 1).suite_ok(1, false, false));
        assert!(GuestReport::of(b, ok, 2).suite_ok(2, true, true));
        let c = b.split("[ 9.2]").next().unwrap_or_default();
        assert!(!GuestReport::of(c, None, 2).suite_ok(2, true, true), "a second life must unload cleanly");
        assert!(!GuestReport::of(c, None, 1).suite_ok(1, false, false), "a server must unload cleanly");
        assert!(GuestReport::of(c, None, 3).suite_ok(3, true, false));
        assert!(!GuestReport::of(&format!("{b}WARNING: CPU: 0 PID: 1\n"), ok, 2).suite_ok(2, true, true));
        assert!(!GuestReport::of(&format!("{c}WARNING: CPU: 0 PID: 1\n"), None, 3).suite_ok(3, true, false));
    }

    #[test]
    fn module_test_needs_each_side_of_the_ping_and_a_clean_unload() {
        let common = "trapeze-guest: pci 0000:00:03.0 1af4:1110 class 050000\n\
            [    3.1] trapeze: 0000:00:03.0: node 1 up: endpoint live, 32 receive frames\n\
            [    5.2] trapeze: 0000:00:03.0: node 1 removed: NIC halted, frames freed\n\
            trapeze-guest: /etc/trapeze/run.sh exited with status 0\nreboot: Power down\n";
        let pinger = format!("{common}[ 4.0] trapeze: pong 2 from node 0: 4096 bytes verified byte for byte (crc 1), round trip 900 us\n");
        let ok = Some(ExitStatus::default());
        assert!(GuestReport::of(&pinger, ok, 1).ok(Mode::ModuleTest));
        assert!(!GuestReport::of(&pinger, ok, 0).ok(Mode::ModuleTest), "guest 0 must answer, not ping");
        let answered = format!("{common}[ 4.0] trapeze: ping 2 from node 1: 4096 bytes; answered with a pong\n");
        assert!(GuestReport::of(&answered, ok, 0).ok(Mode::ModuleTest));
        let oops = format!("{answered}BUG: kernel NULL pointer dereference\n");
        assert!(!GuestReport::of(&oops, ok, 0).ok(Mode::ModuleTest));
        let failed = answered.replace("status 0", "status 1");
        assert!(!GuestReport::of(&failed, ok, 0).ok(Mode::ModuleTest));
    }
}
