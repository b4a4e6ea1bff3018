// SPDX-License-Identifier: GPL-2.0-only
//! The main command's GMS cluster (`trapeze-gms-demo --quick`, what `cargo xtask run
//! --quick` runs) end to end: with no faults, with each link fault docs/setup.md shows, and
//! on flashed NICs; every run must read every page back and find no wrong byte.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_trapeze-gms-demo");
/// A quick run takes well under a minute even with 0.1% of its frames lost (each costs a
/// 500 ms operation timeout) on a loaded machine.
const LIMIT: Duration = Duration::from_secs(180);
/// `--quick`'s data set (1000 pages) and pressure pages (300): the pages read back.
const PAGES: u64 = 1300;

/// The summary's `verified:` line, parsed.
#[derive(Debug)]
struct Verified {
    read: u64,
    of: u64,
    hits: u64,
    misses: u64,
    wrong: u64,
}

/// `verified:         N of M pages read back and checked: H hits with the right bytes, X
/// misses (U held by no node), W wrong`.
fn parse(line: &str) -> Option<Verified> {
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    match nums[..] {
        [read, of, hits, misses, _unheld, wrong] => Some(Verified { read, of, hits, misses, wrong }),
        _ => None,
    }
}

/// Run the demo with `--quick --plain` and `args`; its output, after checking it ended
/// well within [`LIMIT`].
fn run(args: &[&str]) -> String {
    let mut child = Command::new(DEMO)
        .args(["--quick", "--plain"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let outs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the demo") {
            break Some(s);
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (outs.join().unwrap(), errs.join().unwrap());
    let Some(status) = status else {
        panic!("the demo {args:?} ran longer than {LIMIT:?}: killed\n{stdout}\n{stderr}");
    };
    assert!(status.success(), "the demo {args:?} failed ({status}):\n{stdout}\n{stderr}");
    eprintln!("demo {args:?} took {:.1}s", t0.elapsed().as_secs_f64());
    stdout
}

/// Every page read back and checked, none wrong, most of them hits; the output.
fn assert_all_verified(args: &[&str]) -> String {
    let out = run(args);
    let line = out.lines().find(|l| l.starts_with("verified:")).unwrap_or_else(|| panic!("no verified line:\n{out}"));
    let v = parse(line).unwrap_or_else(|| panic!("unparsable: {line}"));
    assert_eq!(v.of, PAGES, "{line}");
    assert_eq!(v.read, v.of, "not every page was read back: {line}");
    assert_eq!(v.hits + v.misses, v.read, "{line}");
    assert_eq!(v.wrong, 0, "{line}");
    // The global LRU discards some pages to make room for the pressure phase's; most
    // stay in network memory.
    assert!(v.hits * 2 > v.of, "too few hits: {line}\n{out}");
    out
}

/// The numbers in the summary line that starts with `prefix`.
fn numbers(out: &str, prefix: &str) -> Vec<u64> {
    let line = out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} line:\n{out}"));
    line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).filter_map(|w| w.parse().ok()).collect()
}

/// The summary means what it says: no NaN, one unit for microseconds, its counters add
/// up, and getpages the servers' NICs answered by themselves are counted as served.
fn assert_summary_adds_up(out: &str) {
    let summary = &out[out.find("== summary").unwrap_or_else(|| panic!("no summary:\n{out}"))..];
    assert!(!summary.contains("NaN"), "{summary}");
    assert!(!summary.contains(" us "), "microseconds are µs: {summary}");
    // ops: N in T s = R/s (P putpages, G getpages, C cache hits)
    let ops = numbers(summary, "ops:");
    assert_eq!(ops[0], ops[ops.len() - 3] + ops[ops.len() - 2] + ops[ops.len() - 1], "{summary}");
    // getpages served: S by the servers, A of them answered by their NICs alone
    let served = numbers(summary, "getpages served:");
    assert!(served[1] <= served[0], "{summary}");
    // hit rate: X.Y% of getpages hit network memory (H of G); ...
    let hit = numbers(summary, "hit rate:");
    // getpages failed: F (no answer within the T ms operation timeout); L replies came after it
    let failed = numbers(summary, "getpages failed:");
    // Every hit was served by a server; a getpage served but not a hit is one the client
    // gave up on (its operation timed out: on a loaded machine a thread may wait for a
    // core longer than the timeout) and whose late reply its NIC dropped.
    assert!(hit[2] <= served[0], "every getpage that hit was served by a server: {summary}");
    assert!(served[0] - hit[2] <= failed[0], "a getpage served but not a hit had failed at the client: {summary}");
    assert!(failed[2] <= served[0] - hit[2], "every late reply was served and not a hit: {summary}");
    // The table's `served (NIC)` column sums to the same.
    let head = out.lines().position(|l| l.starts_with("node  held")).expect("the table");
    let rows: Vec<Vec<u64>> = out.lines().skip(head + 1).take(3).map(|l| numbers(l, "")).collect();
    let column: u64 = rows.iter().skip(1).map(|r| r[3]).sum();
    assert_eq!(column, served[0], "{out}");
}

#[test]
fn no_faults() {
    let out = assert_all_verified(&[]);
    assert_summary_adds_up(&out);
    assert!(out.contains("link faults:      none"), "{out}");
}

#[test]
fn drop_seeded() {
    let out = assert_all_verified(&["--link-faults", "drop=0.1%,seed=7"]);
    assert!(numbers(&out, "link faults:")[0] > 0, "the drops the link injected are reported: {out}");
}

#[test]
fn corrupt() {
    assert_all_verified(&["--link-faults", "corrupt=0.1%"]);
}

#[test]
fn delay() {
    assert_all_verified(&["--link-faults", "delay=10us"]);
}

#[test]
fn dup_and_reorder() {
    assert_all_verified(&["--link-faults", "dup=0.1%,reorder=0.1%,seed=3"]);
}

#[test]
fn verified_line_parses() {
    let v = parse(
        "verified:         1300 of 1300 pages read back and checked: 1152 hits with the right bytes, \
         148 misses (148 held by no node), 0 wrong",
    )
    .expect("parses");
    assert_eq!((v.read, v.of, v.hits, v.misses, v.wrong), (1300, 1300, 1152, 148, 0));
}

/// `--flashed`: the riscv32 image on every NIC's emulated core. Built here (or
/// `$TRAPEZE_FW_IMAGE`); without the target the build fails and so does the test.
#[cfg(feature = "flashed")]
#[test]
#[ignore = "needs: riscv32 target"]
fn flashed() {
    let image = trapeze_node::testbed::build_image().unwrap_or_else(|e| panic!("the firmware image: {e}"));
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gms-demo-fw-{}", std::process::id()));
    std::fs::write(&path, image).expect("write the image");
    let p = path.to_str().expect("a UTF-8 path");
    assert_all_verified(&["--image", p]);
    let _ = std::fs::remove_file(&path);
}
