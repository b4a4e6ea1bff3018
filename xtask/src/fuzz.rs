// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask fuzz [TARGET] [--time S] [--runs N] [--jobs J]`: coverage-guided fuzzing of the
//! parsers with cargo-fuzz (libFuzzer, nightly toolchain), and the corpus replay stage of
//! `cargo xtask test`.
//!
//! The targets are `fuzz/fuzz_targets/*.rs`, each a one-line call of a function in the
//! `trapeze-fuzz` crate (`fuzz/`, a workspace of its own). A run reads the committed
//! corpus `fuzz/corpus/NAME/` and writes what it finds new into `fuzz/target/corpus/NAME/`
//! (not committed: add a minimized crasher to `fuzz/corpus/NAME/` by hand, so the replay
//! keeps it as a regression test). Per target it prints executions, coverage (libFuzzer's
//! `cov`/`ft`) and crashes; a crash makes the command fail, its input saved under
//! `fuzz/artifacts/NAME/`.

use anyhow::{bail, ensure, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// The target to fuzz (a file stem of fuzz/fuzz_targets/); all of them in turn if
    /// not given.
    target: Option<String>,
    /// Stop each target after this many seconds (default 60 unless --runs is given).
    #[arg(long, value_name = "S")]
    time: Option<u64>,
    /// Stop each target after this many executions (with --jobs, the jobs' total).
    #[arg(long, value_name = "N")]
    runs: Option<u64>,
    /// Run this many fuzzing processes at once (libFuzzer's fork mode), sharing one
    /// corpus: for targets that spend most of an execution waiting (`ivshmem` talks to
    /// a server thread over sockets and uses under half a core).
    #[arg(long, value_name = "J", value_parser = clap::value_parser!(u32).range(1..=64))]
    jobs: Option<u32>,
}

/// What one libFuzzer run reported.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    execs: Option<u64>,
    exec_per_s: Option<u64>,
    cov: Option<u64>,
    ft: Option<u64>,
    crashed: bool,
    /// Stopped by a signal (Ctrl-C): its figures are final, the exit status is not a crash.
    interrupted: bool,
    artifact: Option<String>,
}

pub fn run(a: FuzzArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let all = targets(&root)?;
    let chosen: Vec<String> = match &a.target {
        None => all.clone(),
        Some(t) if all.contains(t) => vec![t.clone()],
        Some(t) => bail!("no fuzz target {t:?}; the targets are: {}", all.join(", ")),
    };
    ensure_tools()?;
    let time = a.time.or(if a.runs.is_some() { None } else { Some(60) });
    let mut results = Vec::new();
    for t in &chosen {
        let start = Instant::now();
        let mut o = fuzz_one(&root, t, time, a.runs, a.jobs)?;
        let took = start.elapsed();
        // Fork mode prints no final stats: the rate is the jobs' total over the run.
        o.exec_per_s = o.exec_per_s.or_else(|| o.execs.map(|n| n / took.as_secs().max(1)));
        results.push((t.clone(), o, took));
    }
    println!(
        "\n{:<14} {:>12} {:>9} {:>7} {:>7} {:>8} {:>8}",
        "target", "executions", "exec/s", "cov", "ft", "crashes", "time"
    );
    let show = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    for (t, o, d) in &results {
        println!(
            "{t:<14} {:>12} {:>9} {:>7} {:>7} {:>8} {:>7.0?}",
            show(o.execs),
            show(o.exec_per_s),
            show(o.cov),
            show(o.ft),
            u32::from(o.crashed),
            d
        );
    }
    let crashed: Vec<String> = results
        .iter()
        .filter(|(_, o, _)| o.crashed)
        .map(|(t, o, _)| format!("{t} ({})", o.artifact.as_deref().unwrap_or("no artifact path seen")))
        .collect();
    ensure!(crashed.is_empty(), "crash found: {}", crashed.join(", "));
    Ok(())
}

/// The targets: the file stems of `fuzz/fuzz_targets/*.rs`, sorted.
fn targets(root: &Path) -> anyhow::Result<Vec<String>> {
    let dir = root.join("fuzz/fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".rs").map(str::to_string))
        .collect();
    names.sort();
    ensure!(!names.is_empty(), "no fuzz targets in {}", dir.display());
    Ok(names)
}

/// `cargo` through rustup's proxy, free of the variables the pinned toolchain's cargo
/// set for xtask (they would pin the child to it).
fn proxy_cargo() -> Command {
    let mut c = Command::new("cargo");
    for v in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC", "RUSTC_WRAPPER", "CARGO_TARGET_DIR"] {
        c.env_remove(v);
    }
    c
}

/// The nightly toolchain and cargo-fuzz, installed when missing.
fn ensure_tools() -> anyhow::Result<()> {
    let has_nightly = proxy_cargo()
        .args(["+nightly", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_nightly {
        eprintln!("$ rustup toolchain install nightly --profile minimal");
        let st = Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]).status();
        ensure!(
            st.is_ok_and(|s| s.success()),
            "cargo-fuzz needs the nightly toolchain and installing it failed: run \
             `rustup toolchain install nightly --profile minimal`"
        );
    }
    let has_fuzz = proxy_cargo()
        .args(["+nightly", "fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_fuzz {
        eprintln!("$ cargo install cargo-fuzz --locked");
        let st = proxy_cargo().args(["install", "cargo-fuzz", "--locked"]).status();
        ensure!(st.is_ok_and(|s| s.success()), "installing cargo-fuzz failed: run `cargo install cargo-fuzz --locked`");
    }
    Ok(())
}

/// Fuzz one target until `time` seconds or `runs` executions, streaming libFuzzer's
/// output and reading its final figures.
fn fuzz_one(
    root: &Path,
    target: &str,
    time: Option<u64>,
    runs: Option<u64>,
    jobs: Option<u32>,
) -> anyhow::Result<Outcome> {
    let work: PathBuf = root.join("fuzz/target/corpus").join(target);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let seeds = root.join("fuzz/corpus").join(target);
    // No sanitizer: the targets are safe Rust (a memory error would need `unsafe`, and
    // the parsers have none), where AddressSanitizer only slows the search severalfold;
    // overflow checks and debug assertions stay on.
    let mut args: Vec<String> =
        ["+nightly", "fuzz", "run", "--release", "--debug-assertions", "--sanitizer", "none", target]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.push(work.display().to_string());
    args.push(seeds.display().to_string());
    args.extend(["--", "-print_final_stats=1", "-timeout=10"].map(String::from));
    if let Some(t) = time {
        args.push(format!("-max_total_time={t}"));
    }
    if let Some(n) = runs {
        args.push(format!("-runs={n}"));
    }
    if let Some(j) = jobs {
        args.push(format!("-fork={j}"));
    }
    eprintln!("\n==> fuzz {target}: $ cargo {}", args.join(" "));
    let mut child = proxy_cargo()
        .args(&args)
        // Keep glibc from serving the targets' large buffers (the timing model's NIC
        // and host memories, link frames) with fresh mmaps unmapped after every run:
        // the page faults and zeroing took three quarters of an iteration.
        .env("MALLOC_MMAP_THRESHOLD_", "33554432")
        .env("MALLOC_TRIM_THRESHOLD_", "268435456")
        .env("MALLOC_TOP_PAD_", "67108864")
        .current_dir(root)
        .stderr(Stdio::piped())
        .spawn()
        .context("starting cargo fuzz")?;
    let mut o = Outcome::default();
    let stderr = child.stderr.take().context("cargo fuzz's stderr")?;
    for line in BufReader::new(stderr).lines() {
        let line = line.context("reading cargo fuzz's output")?;
        eprintln!("{line}");
        read_line(&line, &mut o);
    }
    let status = child.wait().context("waiting for cargo fuzz")?;
    if !status.success() && !o.crashed && !o.interrupted {
        if o.execs.is_none() {
            bail!("`cargo {}` failed ({status}) before fuzzing", args.join(" "));
        }
        o.crashed = true;
    }
    Ok(o)
}

/// Take what a line of libFuzzer's output tells.
fn read_line(line: &str, o: &mut Outcome) {
    let num = |s: &str| s.trim().parse::<u64>().ok();
    if let Some(v) = line.strip_prefix("stat::number_of_executed_units:") {
        o.execs = num(v);
    } else if let Some(v) = line.strip_prefix("stat::average_exec_per_sec:") {
        o.exec_per_s = num(v);
    } else if line.starts_with('#') {
        let mut words = line.split_whitespace();
        // Fork mode's progress lines count the jobs' executions so far: `#36320: cov: ...`.
        if let Some(n) = words.clone().next().and_then(|w| w.strip_prefix('#')?.strip_suffix(':')) {
            o.execs = num(n).or(o.execs);
        }
        while let Some(w) = words.next() {
            match w {
                "cov:" => o.cov = words.next().and_then(num).or(o.cov),
                "ft:" => o.ft = words.next().and_then(num).or(o.ft),
                // Fork mode goes on past a timeout or an out-of-memory by default: any
                // of the three counts fails the run.
                "oom/timeout/crash:" => {
                    o.crashed |= words.next().is_some_and(|v| v.split('/').any(|c| num(c) != Some(0)));
                }
                _ => {}
            }
        }
    } else if line.contains("libFuzzer: run interrupted") {
        o.interrupted = true;
    } else if line.contains("ERROR: libFuzzer")
        || line.contains("ERROR: AddressSanitizer")
        || line.contains("panicked at")
    {
        o.crashed = true;
    } else if let Some(path) = line.split("Test unit written to ").nth(1) {
        o.artifact = Some(path.trim().to_string());
        o.crashed = true;
    }
}

/// The stage of `cargo xtask test`: every committed corpus input through its target on
/// the stable toolchain (`fuzz/tests/corpus.rs`), and the harnesses' own tests (the
/// library's: scenarios that show an oracle can fire), libFuzzer left out. Uses the
/// workspace's target directory (`CARGO_TARGET_DIR` if set), so the dependencies built
/// for the host tests are reused.
pub fn replay_corpus() -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let target_dir = crate::build::target_dir()?;
    let (manifest, dir) = (root.join("fuzz/Cargo.toml"), target_dir.display().to_string());
    crate::cargo(&[
        "test",
        "--locked",
        "--manifest-path",
        &manifest.display().to_string(),
        "--no-default-features",
        "--target-dir",
        &dir,
        "--lib",
        "--test",
        "corpus",
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_final_figures_and_crashes() {
        let mut o = Outcome::default();
        for l in [
            "#2\tINITED cov: 120 ft: 130 corp: 5/100b exec/s: 0 rss: 30Mb",
            "#10000000\tDONE   cov: 342 ft: 1290 corp: 88/4Kb lim: 4096 exec/s: 151515 rss: 60Mb",
            "stat::number_of_executed_units: 10000000",
            "stat::average_exec_per_sec:     151515",
        ] {
            read_line(l, &mut o);
        }
        assert_eq!(
            o,
            Outcome {
                execs: Some(10_000_000),
                exec_per_s: Some(151_515),
                cov: Some(342),
                ft: Some(1290),
                ..Outcome::default()
            }
        );
        read_line("==15442== libFuzzer: run interrupted; exiting", &mut o);
        assert!(o.interrupted && !o.crashed);
        read_line("artifact_prefix='x/'; Test unit written to fuzz/artifacts/wire/crash-abc", &mut o);
        assert!(o.crashed);
        assert_eq!(o.artifact.as_deref(), Some("fuzz/artifacts/wire/crash-abc"));
    }

    #[test]
    fn reads_fork_mode_progress() {
        let mut o = Outcome::default();
        read_line("#36320: cov: 744 ft: 2406 corp: 127 exec/s: 882 oom/timeout/crash: 0/0/0 time: 15s job: 7", &mut o);
        assert_eq!((o.execs, o.cov, o.ft, o.crashed), (Some(36_320), Some(744), Some(2406), false));
        read_line("#40000: cov: 744 ft: 2406 corp: 127 exec/s: 880 oom/timeout/crash: 0/1/0 time: 16s job: 8", &mut o);
        assert!(o.crashed);
    }
}
