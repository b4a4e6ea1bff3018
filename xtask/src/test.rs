// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask test`: every test the project has, fast ones first. This is the README's
//! test command and what `.ci/run` calls.
//!
//! The run goes on past a failure so the report is whole, and ends with one line,
//! `summary: N passed, M failed, K skipped`, counting cargo's tests and xtask's own
//! stages together, after a list of every skip with its reason. A test that needs
//! something the machine may lack carries `#[ignore = "needs: PREREQ, …"]` (see
//! [`gates`]); plain `cargo test` reports it ignored, and this command runs it whenever
//! the prerequisite is there. Under `CI=true` (root, able to install packages) a skip for
//! a missing prerequisite or a skipped stage is a failure: CI can always provide them.

mod gates;
mod report;
mod run;

use report::Report;
use std::time::Instant;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Skip building the riscv32 firmware image (reported as skipped).
    #[arg(long)]
    no_image: bool,
    /// Skip the guest stages: test kernel, QEMU guests on virtual NICs, the kernel module
    /// (reported as skipped).
    #[arg(long)]
    no_vm: bool,
    /// Skip the lint stages: fmt, tidy, clippy, doc (reported as skipped).
    #[arg(long)]
    no_lint: bool,
}

/// The guest stages: (what it checks, `cargo xtask vm` mode).
const GUEST_STAGES: [(&str, &str); 8] = [
    (
        "kernel module: three guests load trapeze.ko: ping 4 KB, NetRPC echo, GMS put/get, unload with calls in flight",
        "module-test",
    ),
    ("block device: /dev/gms0 on its RAM backend (data, O_DIRECT, EIO and timeout paths, rmmod)", "blk-test"),
    ("guest suite: ext2 on /dev/gms0 on GMS, two copies across 4 guests, data verified, a server killed mid-write with no I/O error, its copies re-made, the server booted again and admitted again, clean unload", "suite"),
    ("swap on /dev/gms0 on GMS under memory pressure: every page verified, zero I/O errors, swapoff, rmmod", "swap"),
    ("a 512 MiB /dev/gms0 on two servers with 320 MiB budgets: every page written and read back, zero I/O errors; reloaded, the first load's pages read back, new writes read back new, a full cluster gives ENOSPC", "big-disk"),
    ("disk identities: two guests' own /dev/gms0 on the same servers, each reading back only its own data; a second load of an identity a live member holds refused (EIO, logged); a reload after a server with the only copy of some pages died: those pages EIO, the rest verified, unwritten pages zeros", "disks"),
    ("host gmsd in the guests' cluster: a guest's /dev/gms0 pages stored on and read from a host gmsd", "gmsd-test"),
    ("NBD export: a guest's kernel nbd-client mounts ext4 from gmblock's export striped over two gmblockd, files verified after a remount; e2fsck -fn and debugfs on the servers' files; then two guests read the writer's flushed data and all three read one shared region at once, every read verified", "nbd-test"),
];

pub fn run(a: TestArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let mut r = Report::default();

    let deps = stage(&mut r, "system packages: the flashed NIC's emulator, QEMU and iproute2 for gated tests", || {
        crate::prereq::ensure_emulator_build_deps()?;
        gates::provide()
    });
    if !a.no_lint {
        stage(&mut r, "fmt: cargo fmt --check (workspace and kernel-crate)", run::fmt_check);
        stage(&mut r, "tidy: file headers, SAFETY comments, file sizes, import cycles", || {
            crate::tidy::check(&crate::workspace_root())
        });
    } else {
        for s in ["fmt", "tidy", "clippy", "doc"] {
            r.stage_skipped(s, "--no-lint given");
        }
    }

    if deps {
        host_tests(&mut r);
    } else {
        r.stage_skipped("host tests", "the system packages they build with are missing (see above)");
    }
    stage(&mut r, "fuzz corpus replay: every fuzz target over its committed corpus", crate::fuzz::replay_corpus);

    if !a.no_lint {
        stage(&mut r, "clippy: the workspace, all targets, warnings denied", || {
            crate::cargo(&["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"])
        });
        stage(&mut r, "doc: cargo doc --no-deps, broken intra-doc links denied", run::doc_check);
    }
    if a.no_image {
        r.stage_skipped("firmware image", "--no-image given");
    } else {
        stage(&mut r, "firmware image: riscv32imac build and NIC-memory budget", || crate::xtask(&["build"]));
    }
    guests(&mut r, a.no_vm);

    eprintln!("\n==> xtask test finished in {:.0?}", t0.elapsed());
    let fatal_skips: Vec<&report::Skip> = r.skipped.iter().filter(|s| ci && ci_can_provide(&s.reason)).collect();
    for s in &r.skipped {
        let ci_note = if fatal_skips.contains(&s) { " [a failure under CI=true: CI can provide this]" } else { "" };
        eprintln!("skipped: {} {} — {}{ci_note}", s.binary, s.name, s.reason);
    }
    for f in &r.failed {
        eprintln!("FAILED: {f}");
    }
    if !fatal_skips.is_empty() {
        r.failed.push(format!("{} skips under CI=true of what CI can provide", fatal_skips.len()));
    }
    println!("{}", r.summary());
    anyhow::ensure!(r.failed.is_empty(), "{} failed", r.failed.len());
    Ok(())
}

/// A skip CI must not have: a missing prerequisite (CI is root and installs packages), a
/// stage left out, a test ignored without saying why. Tools such as long runs and replays
/// (`#[ignore = "on demand: …"]`) are run by hand only, and no package gives a CPU a
/// feature it lacks (`needs: vpclmulqdq`).
fn ci_can_provide(reason: &str) -> bool {
    let cpu_only = report::needs(reason).is_some_and(|p| p.iter().all(|p| p == "vpclmulqdq"));
    !reason.starts_with("on demand:") && !cpu_only
}

/// The workspace's tests, then the gated ones whose prerequisites are here.
fn host_tests(r: &mut Report) {
    eprintln!("\n==> unit, property and integration tests (host)");
    let t = Instant::now();
    let binaries = match run::test_binaries() {
        Ok(b) => b,
        Err(e) => {
            r.stage_failed("host tests: build", &format!("{e:#}"));
            return;
        }
    };
    match run::cargo_test(&["--workspace"], &[]) {
        Ok(tally) => r.add(tally, false),
        Err(e) => r.stage_failed("host tests", &format!("{e:#}")),
    }
    for (selector, names, missing) in gates::plan(&r.skipped, &binaries) {
        if let Some(m) = missing {
            eprintln!("==> gated tests of {}: not run, {m} is not available", selector.join(" "));
            continue;
        }
        eprintln!("\n==> gated tests, prerequisites present: {} ({} tests)", selector.join(" "), names.len());
        let sel: Vec<&str> = selector.iter().map(String::as_str).collect();
        let mut filter: Vec<&str> = vec!["--ignored", "--exact"];
        filter.extend(names.iter().map(String::as_str));
        match run::cargo_test(&sel, &filter) {
            Ok(tally) => r.add(tally, true),
            Err(e) => r.stage_failed(&format!("gated tests {}", selector.join(" ")), &format!("{e:#}")),
        }
    }
    eprintln!("==> host tests done ({:.1?})", t.elapsed());
}

/// The kernel, a smoke guest and the module's guest stages; each counts as one test.
fn guests(r: &mut Report, no_vm: bool) {
    let names = std::iter::once("guests: kernel and smoke guest").chain(GUEST_STAGES.iter().map(|(w, _)| *w));
    if no_vm {
        names.for_each(|n| r.stage_skipped(n, "--no-vm given"));
        return;
    }
    if let Some(why) = gates::guests_unavailable() {
        names.for_each(|n| r.stage_skipped(n, &why));
        return;
    }
    // Heavy on a fresh machine (the kernel build, ~5-15 min on 2 cores), cached under
    // ~/.cache/trapeze afterwards: each step says whether it built or reused.
    let kernel = stage(r, "guests: the cached Rust-enabled test kernel, one QEMU guest on a virtual NIC", || {
        crate::xtask(&["kernel"])?;
        crate::xtask(&["vm", "smoke"])
    });
    for (what, mode) in GUEST_STAGES {
        let missing = if mode == "nbd-test" { crate::vm::nbd_test_missing() } else { None };
        if let Some(why) = missing {
            r.stage_skipped(what, &why);
        } else if kernel {
            stage(r, what, || crate::xtask(&["vm", mode]));
        } else {
            r.stage_skipped(what, "the kernel / smoke stage failed");
        }
    }
}

/// Run one xtask stage, count it, and say how it went; true if it passed.
fn stage(r: &mut Report, what: &str, f: impl FnOnce() -> anyhow::Result<()>) -> bool {
    eprintln!("\n==> {what}");
    let t = Instant::now();
    match f() {
        Ok(()) => {
            eprintln!("==> ok: {what} ({:.1?})", t.elapsed());
            r.stage_passed();
            true
        }
        Err(e) => {
            eprintln!("==> FAILED: {what} ({:.1?}): {e:#}", t.elapsed());
            r.stage_failed(what, &format!("{e:#}"));
            false
        }
    }
}
