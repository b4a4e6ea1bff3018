// SPDX-License-Identifier: GPL-2.0-only
//! `replication_cost` for `cargo xtask bench vm`: what a second copy of every page costs a
//! writer of `/dev/gms0`, measured in the same run as the NBD comparison.
//!
//! Each session boots fresh guests (guest 0 with the disk, two GMS servers whose budgets
//! each hold a full copy of it), so no session inherits another's pages: guest 0 loads
//! trapeze.ko with `gms_replicas=R`, writes the disk's pattern in 256 KiB `O_DIRECT`
//! writes (bandwidth), then times random 4 KiB writes one by one (p50/p99), reads pages
//! back checked, and powers off (`kernel-crate/guest/bench.sh`, `replication_session`).
//! Sessions alternate r = 1, r = 2 for `pairs` pairs; `replication_cost` is the median
//! over the pairs of r2/r1 4 KiB write p50, `replication_cost_seq` the same for the time
//! of the sequential pattern write.
//!
//! The repair session (`repair_mb_s`): fresh guests, guest 0's disk written with two
//! copies on three servers, then guest 0 prints `trapeze-bench: KILL node 3` and xtask
//! SIGKILLs that server; guest 0 times re-replication from the failure's declaration to
//! the last copy re-made (`repair_session` in `bench.sh`) and reads the whole disk back
//! checked. `repair_mb_s` is the copies re-made × 4 KiB over that time.

use super::workloads::median;
use crate::vm::bench_guests::{self, BenchGuests};
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Guests of a session: the writer and two servers (r = 2 needs two other members).
const GUESTS: u16 = 3;
/// Guests of the repair session: the writer and three servers, the last one killed (two
/// copies stay possible without it).
const REPAIR_GUESTS: u16 = 4;
/// The line guest 0 prints to have the host kill the last server.
const REPAIR_KILL: &str = "trapeze-bench: KILL node 3";

/// What the sessions share.
pub(super) struct Sessions {
    pub pairs: u32,
    pub disk_mb: u32,
    pub writes: u32,
    pub seed: u64,
    pub mem_mib: u32,
    pub bzimage: PathBuf,
    pub modules: Vec<PathBuf>,
    pub script: Vec<u8>,
    pub files: Vec<(String, Vec<u8>, u32)>,
    /// trapeze.ko's parameters (the built module's).
    pub params: Vec<String>,
}

/// One session's figures.
#[derive(Clone, Copy, Debug)]
struct Figures {
    write_mb_s: f64,
    write4k_p50_us: f64,
    write4k_p99_us: f64,
}

impl Sessions {
    /// Run the pairs; the summary's `replication` object and its two ratios.
    pub(super) fn run(&self) -> anyhow::Result<Value> {
        let mut pairs = Vec::new();
        for p in 1..=self.pairs {
            let r1 = self.session(1).with_context(|| format!("replication pair {p}, one copy"))?;
            let r2 = self.session(2).with_context(|| format!("replication pair {p}, two copies"))?;
            eprintln!(
                "  replication pair {p}: 4 KiB write p50 {:.0} / {:.0} us, pattern write {:.1} / {:.1} MB/s (r=1 / r=2)",
                r1.write4k_p50_us, r2.write4k_p50_us, r1.write_mb_s, r2.write_mb_s
            );
            pairs.push((r1, r2));
        }
        Ok(summarize(&pairs, self.disk_mb, self.writes))
    }

    /// Boot fresh guests once with `gms_replicas=r`; guest 0's figures.
    fn session(&self, r: u32) -> anyhow::Result<Figures> {
        let console = self.boot("replication", GUESTS, r, None)?;
        parse(&console)
    }

    /// `n` repair sessions: the summary's `repair_mb_s` (their median) and `repair` (each
    /// session's figures).
    pub(super) fn repairs(&self, n: u32) -> anyhow::Result<Value> {
        let mut runs = Vec::new();
        for i in 1..=n {
            runs.push(self.repair().with_context(|| format!("repair session {i}"))?);
        }
        let rates: Vec<f64> = runs.iter().filter_map(|v| v["repair_mb_s"].as_f64()).collect();
        Ok(json!({
            "repair_mb_s": median(rates).map(|x| super::report::round_to(x, 3)),
            "repair": runs.iter().map(|v| v["repair"].clone()).collect::<Vec<_>>(),
        }))
    }

    /// One repair session: fresh guests, the disk written with two copies on three servers,
    /// then the third server killed; the summary's `repair` object and `repair_mb_s`.
    fn repair(&self) -> anyhow::Result<Value> {
        let console = self.boot("repair", REPAIR_GUESTS, 2, Some((REPAIR_KILL, REPAIR_GUESTS - 1)))?;
        let pages = u64::from(self.disk_mb) * 256;
        let r = parse_repair(&console, pages)?;
        eprintln!(
            "  repair: {} copies re-made in {:.2} s after the failure was declared: {:.2} MB/s; {} pages read back checked",
            r["rereplicated"], r["repair_secs"], r["repair_mb_s"], pages
        );
        Ok(json!({ "repair_mb_s": r["repair_mb_s"].clone(), "repair": r }))
    }

    /// Boot `guests` fresh guests in bench mode `mode`, guest 0's disk keeping `r` copies,
    /// every server's budget holding a whole copy with a quarter to spare; guest 0's console.
    fn boot(&self, mode: &str, guests: u16, r: u32, kill_on: Option<(&'static str, u16)>) -> anyhow::Result<String> {
        let pages = u64::from(self.disk_mb) * 256;
        let extra = [format!("gms_replicas={r}"), format!("gms_budget_pages={}", pages * 5 / 4)];
        let args = super::module_args::gms_args(&self.params, guests, self.disk_mb, 0, &extra)
            .map_err(|why| anyhow::anyhow!("{why}"))?;
        let words = format!(
            "trapeze_bench_mb={} trapeze_bench_seed={} trapeze_bench_repl_writes={}",
            self.disk_mb, self.seed, self.writes
        );
        Ok(self.boot_with(mode, &args, &words, kill_on, false, false)?.0)
    }

    /// Boot one fresh guest per entry of `args` (its trapeze.ko arguments) in bench mode
    /// `mode` with the kernel command-line `words`, the link under a fresh cluster key
    /// unless `no_key`; guest 0's console, once it finished without kernel trouble, and
    /// (with `cpu_marks`) the host CPU time of every guest's QEMU and NIC at guest 0's
    /// `cpu begin|end` lines.
    pub(super) fn boot_with(
        &self,
        mode: &str,
        args: &[String],
        words: &str,
        kill_on: Option<(&'static str, u16)>,
        no_key: bool,
        cpu_marks: bool,
    ) -> anyhow::Result<(String, Vec<crate::vm::cpu_marks::CpuMark>)> {
        let append = args
            .iter()
            .map(|a| format!("trapeze_bench_mode={mode} {words} trapeze_bench_ko={}", bench_guests::base64_word(a)))
            .collect();
        let outcomes = bench_guests::run(BenchGuests {
            guests: u16::try_from(args.len())?,
            mem_mib: self.mem_mib,
            bzimage: self.bzimage.clone(),
            modules: self.modules.clone(),
            script: self.script.clone(),
            files: self.files.clone(),
            append,
            net_pair: false,
            timeout: Duration::from_secs(600),
            kill_on,
            nic_trace: None,
            no_key,
            guest0_qemu: Vec::new(),
            cpu_marks: cpu_marks.then(Vec::new),
        })?;
        let g0 = outcomes.iter().find(|o| o.idx == 0).context("guest 0 missing")?;
        let trouble: Vec<&String> = outcomes.iter().flat_map(|o| o.trouble.iter()).collect();
        if let Some(t) = trouble.first() {
            bail!("kernel trouble in a guest: {t}");
        }
        ensure!(g0.exited, "guest 0 did not finish (console {})", g0.console_path.display());
        Ok((g0.console.clone(), g0.marks.clone()))
    }
}

/// Guest 0's repair line, with the read-back check's pages verified (all `pages`), or the
/// errors it reported.
fn parse_repair(console: &str, pages: u64) -> anyhow::Result<Value> {
    let (_, notes) = super::report::parse_console(console);
    if let Some(e) = notes.iter().find(|n| n.starts_with("errors: ")) {
        bail!("{e}");
    }
    let line = notes.iter().find_map(|n| n.strip_prefix("repair-result ")).context("no repair-result line")?;
    let v: Value = serde_json::from_str(line).context("the repair-result line is not JSON")?;
    let check = notes.iter().find_map(|n| n.strip_prefix("repair-check ")).context("no repair-check line")?;
    let c: Value = serde_json::from_str(check).context("the repair-check line is not JSON")?;
    let verified = c["pages_verified"].as_u64().unwrap_or(0);
    ensure!(verified >= pages, "after the repair only {verified} of the disk's {pages} pages were read back checked");
    ensure!(v["short"] == 0, "replicas still short of a copy after the repair: {line}");
    ensure!(v["rereplicated"].as_u64().unwrap_or(0) > 0, "no copy was re-made after the kill: {line}");
    ensure!(v["repair_mb_s"].as_f64().is_some(), "repair-result has no repair_mb_s: {line}");
    Ok(v)
}

/// Guest 0's result line, or the errors it reported.
fn parse(console: &str) -> anyhow::Result<Figures> {
    let (_, notes) = super::report::parse_console(console);
    if let Some(e) = notes.iter().find(|n| n.starts_with("errors: ")) {
        bail!("{e}");
    }
    let json = notes.iter().find_map(|n| n.strip_prefix("repl-result ")).context("no repl-result line")?;
    let v: Value = serde_json::from_str(json).context("the repl-result line is not JSON")?;
    let f = |k: &str| v[k].as_f64().with_context(|| format!("repl-result has no number {k:?}: {json}"));
    Ok(Figures {
        write_mb_s: f("write_mb_s")?,
        write4k_p50_us: f("write4k_p50_us")?,
        write4k_p99_us: f("write4k_p99_us")?,
    })
}

/// The summary's replication part from (r=1, r=2) pairs.
fn summarize(pairs: &[(Figures, Figures)], disk_mb: u32, writes: u32) -> Value {
    let med = |f: &dyn Fn(&(Figures, Figures)) -> f64| median(pairs.iter().map(f).collect());
    let r = |v: Option<f64>| v.map(|x| super::report::round_to(x, 3));
    let side = |pick: fn(&(Figures, Figures)) -> Figures| {
        json!({
            "write_mb_s": r(med(&|p| pick(p).write_mb_s)),
            "write4k_p50_us": r(med(&|p| pick(p).write4k_p50_us)),
            "write4k_p99_us": r(med(&|p| pick(p).write4k_p99_us)),
        })
    };
    json!({
        "replication_cost": r(med(&|(a, b)| b.write4k_p50_us / a.write4k_p50_us)),
        "replication_cost_seq": r(med(&|(a, b)| a.write_mb_s / b.write_mb_s)),
        "replication": {
            "pairs": pairs.len(),
            "disk_mb": disk_mb,
            "writes": writes,
            "r1": side(|p| p.0),
            "r2": side(|p| p.1),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_parses_and_errors_win() {
        let ok = "x\ntrapeze-bench: repl-result {\"write_mb_s\":12.5,\"write4k_writes\":500,\"write4k_p50_us\":800.0,\
                  \"write4k_p99_us\":2000.0}\n";
        let f = parse(ok).unwrap();
        assert_eq!((f.write_mb_s, f.write4k_p50_us, f.write4k_p99_us), (12.5, 800.0, 2000.0));
        let bad = format!("{ok}trapeze-bench: errors: replication: 1 page error(s)\n");
        assert!(parse(&bad).unwrap_err().to_string().contains("page error"));
        assert!(parse("nothing\n").is_err());
    }

    #[test]
    fn the_repair_line_needs_every_page_checked_and_no_copy_short() {
        let line = "trapeze-bench: repair-result {\"rereplicated\":900,\"repair_secs\":1.50,\"repair_mb_s\":2.344,\
                    \"short\":0,\"failed_copies\":0}\n";
        let check = "trapeze-bench: repair-check {\"pages_verified\":2048}\n";
        let v = parse_repair(&format!("{line}{check}"), 2048).unwrap();
        assert_eq!(v["repair_mb_s"], 2.344);
        assert!(parse_repair(&format!("{line}{check}"), 4096).is_err(), "every page must be checked");
        assert!(parse_repair(line, 2048).is_err(), "the check line must be there");
        let short = line.replace("\"short\":0", "\"short\":3");
        assert!(parse_repair(&format!("{short}{check}"), 2048).is_err());
        let err = format!("{line}{check}trapeze-bench: errors: repair: 1 page error(s)\n");
        assert!(parse_repair(&err, 2048).unwrap_err().to_string().contains("page error"));
    }

    #[test]
    fn the_cost_is_the_median_of_the_pairs_ratios() {
        let f = |mb: f64, p50: f64| Figures { write_mb_s: mb, write4k_p50_us: p50, write4k_p99_us: 2.0 * p50 };
        let pairs = [(f(10.0, 100.0), f(8.0, 120.0)), (f(12.0, 100.0), f(6.0, 200.0)), (f(10.0, 100.0), f(5.0, 150.0))];
        let s = summarize(&pairs, 8, 500);
        assert_eq!(s["replication_cost"], 1.5);
        assert_eq!(s["replication_cost_seq"], 2.0);
        assert_eq!(s["replication"]["r1"]["write4k_p50_us"], 100.0);
        assert_eq!(s["replication"]["pairs"], 3);
    }
}
