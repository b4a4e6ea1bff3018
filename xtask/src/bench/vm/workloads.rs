// SPDX-License-Identifier: GPL-2.0-only
//! The file and swap workloads of `cargo xtask bench vm`, as guest 0's console reports
//! them: `trapeze-filebench` runs on ext2 (write, streaming `read()`, `mmap`, each read
//! after the page cache was dropped), `trapeze-memhog` under swap, the "errors:" lines of
//! every phase, and the per-device figures they give (medians over rounds).

use super::report::round_to;
use anyhow::{bail, Context};
use serde_json::{json, Value};

/// What a file result line starts with (after "trapeze-bench: ").
const FILE_RESULT: &str = "file-result ";
/// What a swap result line starts with.
const SWAP_RESULT: &str = "swap-result ";
/// What an error line starts with: "errors: PHASE: what".
const ERRORS: &str = "errors: ";

/// One `trapeze-filebench` run.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FileRun {
    pub device: String,
    /// write, stream or mmap.
    pub mode: String,
    pub bytes: u64,
    pub mb_s: f64,
    pub pages_verified: u64,
}

/// One `trapeze-memhog` run under swap.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SwapRun {
    pub device: String,
    /// Wall time of the whole workload.
    pub secs: f64,
    pub mib: u64,
    /// RAM left to it (its cgroup's memory.max), MiB; `None`: no limit (the all-in-RAM run).
    pub avail_mb: Option<u64>,
    /// What its pages held: "incompressible" or "compressible" (`trapeze-memhog`'s pattern).
    pub pattern: String,
    /// On zram: the data and compressed KiB when it held the most (`mm_stat`).
    pub zram_kib: Option<(u64, u64)>,
    pub pages_verified: u64,
    pub peak_swap_kib: u64,
    /// KiB read from and written to the device while the workload ran (its
    /// `/sys/block/*/stat`): how much it really swapped.
    pub swap_in_kib: u64,
    pub swap_out_kib: u64,
    /// Seconds of each of the workload's phases (write, the checks, the rewrite), in order.
    pub phases: Vec<(String, f64)>,
}

impl SwapRun {
    /// Wall time per MiB swapped out and in: how fast the device swaps, whatever the
    /// kernel chose to swap (a few hundred KiB more RAM can halve that).
    pub(super) fn secs_per_mib(&self) -> Option<f64> {
        let mib = (self.swap_in_kib + self.swap_out_kib) as f64 / 1024.0;
        (mib > 0.0).then(|| self.secs / mib)
    }
}

/// Everything of the two workloads on guest 0's console.
#[derive(Debug, Default)]
pub(super) struct Workloads {
    pub files: Vec<FileRun>,
    pub swaps: Vec<SwapRun>,
    /// "PHASE: what" of every error line, in order.
    pub errors: Vec<String>,
}

impl Workloads {
    /// Read the bench's notes (guest 0's lines without the "trapeze-bench: " prefix); a
    /// result line that does not parse is an error.
    pub(super) fn parse(notes: &[String]) -> anyhow::Result<Workloads> {
        let mut w = Workloads::default();
        for n in notes {
            if let Some(j) = n.strip_prefix(FILE_RESULT) {
                let v: Value = serde_json::from_str(j).with_context(|| format!("file result {j}"))?;
                w.files.push(FileRun {
                    device: str_of(&v, "name")?,
                    mode: str_of(&v, "mode")?,
                    bytes: u64_of(&v, "bytes")?,
                    mb_s: v["mb_s"].as_f64().with_context(|| format!("file result without mb_s: {v}"))?,
                    pages_verified: u64_of(&v, "pages_verified")?,
                });
            } else if let Some(j) = n.strip_prefix(SWAP_RESULT) {
                let v: Value = serde_json::from_str(j).with_context(|| format!("swap result {j}"))?;
                let m = &v["memhog"];
                if m["pages_wrong"].as_u64() != Some(0) {
                    bail!("swap result with wrong pages (or no count of them): {v}");
                }
                let avail_mb = match &v["avail_mb"] {
                    Value::Null => None,
                    a => Some(a.as_u64().with_context(|| format!("swap result with a bad avail_mb: {v}"))?),
                };
                let zram_kib = match (&v["zram_peak_data_kib"], &v["zram_peak_compr_kib"]) {
                    (Value::Null, Value::Null) => None,
                    _ => Some((u64_of(&v, "zram_peak_data_kib")?, u64_of(&v, "zram_peak_compr_kib")?)),
                };
                w.swaps.push(SwapRun {
                    device: str_of(&v, "name")?,
                    secs: m["secs"].as_f64().with_context(|| format!("swap result without memhog secs: {v}"))?,
                    mib: u64_of(m, "mib")?,
                    avail_mb,
                    pattern: str_of(m, "pattern")?,
                    zram_kib,
                    pages_verified: u64_of(m, "pages_verified")?,
                    peak_swap_kib: u64_of(&v, "peak_swap_kib")?,
                    swap_in_kib: u64_of(&v, "swap_in_kib")?,
                    swap_out_kib: u64_of(&v, "swap_out_kib")?,
                    phases: phases_of(m)?,
                });
            } else if let Some(e) = n.strip_prefix(ERRORS) {
                w.errors.push(e.to_string());
            }
        }
        Ok(w)
    }

    /// The median MB/s of a device's file runs of one mode.
    pub(super) fn file_mb_s(&self, device: &str, mode: &str) -> Option<f64> {
        median(self.files.iter().filter(|f| f.device == device && f.mode == mode).map(|f| f.mb_s).collect())
    }

    /// The device's swap runs as one: the mean of their times and of what they swapped,
    /// the largest peak, every page they verified.
    pub(super) fn swap(&self, device: &str) -> Option<SwapRun> {
        let runs: Vec<&SwapRun> = self.swaps.iter().filter(|s| s.device == device).collect();
        let first = *runs.first()?;
        let n = runs.len() as u64;
        let mean_kib = |f: fn(&SwapRun) -> u64| runs.iter().map(|s| f(s)).sum::<u64>() / n;
        Some(SwapRun {
            secs: runs.iter().map(|s| s.secs).sum::<f64>() / n as f64,
            pages_verified: runs.iter().map(|s| s.pages_verified).sum(),
            peak_swap_kib: runs.iter().map(|s| s.peak_swap_kib).max().unwrap_or(0),
            swap_in_kib: mean_kib(|s| s.swap_in_kib),
            swap_out_kib: mean_kib(|s| s.swap_out_kib),
            phases: first
                .phases
                .iter()
                .map(|(name, _)| {
                    // Every run that has the phase (each has every phase, as memhog reports them).
                    let t: Vec<f64> =
                        runs.iter().filter_map(|s| s.phases.iter().find(|(n, _)| n == name)).map(|&(_, t)| t).collect();
                    (name.clone(), t.iter().sum::<f64>() / t.len() as f64)
                })
                .collect(),
            ..first.clone()
        })
    }

    /// Why the workloads of a measured device are incomplete, if they are.
    pub(super) fn missing(&self, device: &str) -> Vec<String> {
        let mut why = Vec::new();
        for mode in ["write", "stream", "mmap"] {
            if self.file_mb_s(device, mode).is_none() {
                why.push(format!("{device}: no file {mode} result"));
            }
        }
        if self.swap(device).is_none() {
            why.push(format!("{device}: no swap result"));
        }
        why
    }

    /// The device row's keys for the workloads (merged into the row of `trapeze-blkbench`).
    pub(super) fn row_keys(&self, device: &str) -> Value {
        let runs = |mode: &str| self.files.iter().filter(|f| f.device == device && f.mode == mode).count();
        let mut keys = json!({
            "file_bytes": self.files.iter().find(|f| f.device == device).map(|f| f.bytes),
            "file_write_mb_s": self.file_mb_s(device, "write").map(|v| round_to(v, 1)),
            "file_stream_mb_s": self.file_mb_s(device, "stream").map(|v| round_to(v, 1)),
            "file_mmap_mb_s": self.file_mb_s(device, "mmap").map(|v| round_to(v, 1)),
            "file_rounds": runs("stream").min(runs("mmap")),
            "file_pages_verified": self.files.iter().filter(|f| f.device == device).map(|f| f.pages_verified).sum::<u64>(),
        });
        if let (Some(o), Value::Object(s)) = (keys.as_object_mut(), self.swap_keys(device)) {
            o.extend(s);
        }
        keys
    }

    /// The keys of a swap run (`device`: a device row's name, or a swap baseline's).
    pub(super) fn swap_keys(&self, device: &str) -> Value {
        let swap = self.swap(device);
        json!({
            "swap_runs": self.swaps.iter().filter(|s| s.device == device).count(),
            "swap_secs": swap.as_ref().map(|s| round_to(s.secs, 2)),
            "swap_mib": swap.as_ref().map(|s| s.mib),
            "swap_avail_mb": swap.as_ref().and_then(|s| s.avail_mb),
            "swap_pattern": swap.as_ref().map(|s| s.pattern.clone()),
            "swap_peak_mib": swap.as_ref().map(|s| round_to(s.peak_swap_kib as f64 / 1024.0, 1)),
            "swap_in_mib": swap.as_ref().map(|s| round_to(s.swap_in_kib as f64 / 1024.0, 1)),
            "swap_out_mib": swap.as_ref().map(|s| round_to(s.swap_out_kib as f64 / 1024.0, 1)),
            "swap_pages_verified": swap.as_ref().map(|s| s.pages_verified),
            "swap_secs_per_mib": swap.as_ref().and_then(SwapRun::secs_per_mib).map(|v| round_to(v, 4)),
            "swap_phase_secs": swap.map(|s| {
                s.phases.iter().map(|(n, t)| (n.clone(), json!(round_to(*t, 2)))).collect::<serde_json::Map<_, _>>()
            }),
        })
    }

    /// The gms/nbd ratios of the workloads: swap wall time (lower is better for gms),
    /// file MB/s by stream and by mmap (higher is better for gms, as `seq_mb_s`).
    pub(super) fn ratios(&self) -> Value {
        json!({
            "swap_time": ratio(self.swap("gms").map(|s| s.secs), self.swap("nbd").map(|s| s.secs)),
            "swap_time_per_mib": ratio(
                self.swap("gms").as_ref().and_then(SwapRun::secs_per_mib),
                self.swap("nbd").as_ref().and_then(SwapRun::secs_per_mib)
            ),
            "file_stream_mb_s": ratio(self.file_mb_s("gms", "stream"), self.file_mb_s("nbd", "stream")),
            "file_mmap_mb_s": ratio(self.file_mb_s("gms", "mmap"), self.file_mb_s("nbd", "mmap")),
            "swap_phase_time": self.phase_ratios().into_iter().map(|(n, r)| (n, json!(r))).collect::<serde_json::Map<_, _>>(),
        })
    }

    /// gms/nbd of each swap phase's mean time, in the phases' order.
    pub(super) fn phase_ratios(&self) -> Vec<(String, f64)> {
        let (Some(g), Some(n)) = (self.swap("gms"), self.swap("nbd")) else { return Vec::new() };
        g.phases
            .iter()
            .filter_map(|(name, tg)| {
                let tn = n.phases.iter().find(|(m, _)| m == name).map(|&(_, t)| t);
                Some((name.clone(), ratio(Some(*tg), tn)?))
            })
            .collect()
    }

    /// The table's lines for the workloads.
    pub(super) fn print_table(&self, devices: &[&str]) {
        println!(
            "{:<6} {:>14} {:>14} {:>14} {:>14} {:>12} {:>16}",
            "device", "file write", "file read()", "file mmap", "swap workload", "swap peak", "swapped out/in"
        );
        let mb = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} MB/s"));
        for d in devices {
            let s = self.swap(d);
            let s = s.as_ref();
            println!(
                "{:<6} {:>14} {:>14} {:>14} {:>14} {:>12} {:>16}",
                d,
                mb(self.file_mb_s(d, "write")),
                mb(self.file_mb_s(d, "stream")),
                mb(self.file_mb_s(d, "mmap")),
                s.map_or("-".into(), |s| format!("{:.1} s", s.secs)),
                s.map_or("-".into(), |s| format!("{:.1} MiB", s.peak_swap_kib as f64 / 1024.0)),
                s.map_or("-".into(), |s| format!(
                    "{:.1}/{:.1} MiB",
                    s.swap_out_kib as f64 / 1024.0,
                    s.swap_in_kib as f64 / 1024.0
                )),
            );
        }
        let phases = self.phase_ratios();
        if !phases.is_empty() {
            let each: Vec<String> = phases.iter().map(|(n, r)| format!("{n} {r:.2}x")).collect();
            println!("  swap workload's phases, gms / nbd time: {}", each.join(", "));
        }
        if let Some(s) = self.swaps.iter().find(|s| s.device == "gms") {
            println!(
                "  (file: ext2, page cache dropped before each read; swap: {} MiB of trapeze-memhog pages with {} MiB \
                 of RAM left, every page verified)",
                s.mib,
                s.avail_mb.unwrap_or(0)
            );
        }
    }
}

/// gms / nbd, rounded; `None` without both or with no NBD figure.
fn ratio(g: Option<f64>, n: Option<f64>) -> Option<f64> {
    match (g, n) {
        (Some(g), Some(n)) if n > 0.0 => Some(round_to(g / n, 3)),
        _ => None,
    }
}

fn str_of(v: &Value, k: &str) -> anyhow::Result<String> {
    Ok(v[k].as_str().with_context(|| format!("result without a string {k}: {v}"))?.to_string())
}

/// The (name, seconds) of a `trapeze-memhog` report's phases.
fn phases_of(memhog: &Value) -> anyhow::Result<Vec<(String, f64)>> {
    let Some(phases) = memhog["phases"].as_array() else { bail!("swap result without phases: {memhog}") };
    phases
        .iter()
        .map(|p| {
            let secs = p["secs"].as_f64().with_context(|| format!("swap phase without secs: {p}"))?;
            Ok((str_of(p, "name")?, secs))
        })
        .collect()
}

fn u64_of(v: &Value, k: &str) -> anyhow::Result<u64> {
    v[k].as_u64().with_context(|| format!("result without an integer {k}: {v}"))
}

/// The median of `v` (the mean of the middle two for an even count).
pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dev: &str, mode: &str, mb_s: f64) -> String {
        format!(
            "file-result {{\"tool\":\"trapeze-filebench\",\"name\":\"{dev}\",\"path\":\"/mnt/{dev}/data\",\
             \"mode\":\"{mode}\",\"bytes\":16777216,\"secs\":0.5,\"mb_s\":{mb_s},\"pages_verified\":4096}}"
        )
    }

    fn swap(dev: &str, secs: f64, wrong: u64) -> String {
        format!(
            "swap-result {{\"name\":\"{dev}\",\"device\":\"/dev/{dev}0\",\"avail_mb\":16,\"peak_swap_kib\":9216,\
             \"swap_in_kib\":20480,\"swap_out_kib\":12288,\"memhog\":{{\"tool\":\"trapeze-memhog\",\"pages\":6144,\"mib\":24,\"pages_verified\":18432,\
             \"pages_wrong\":{wrong},\"pattern\":\"incompressible\",\"secs\":{secs},\"phases\":[{{\"name\":\"write\",\"secs\":1.0}},\
             {{\"name\":\"verify-seq\",\"secs\":{}}}]}}}}",
            secs - 1.0
        )
    }

    #[test]
    fn results_give_medians_ratios_and_row_keys() {
        let mut notes: Vec<String> = vec!["nbd: round 1: something".into()];
        for (d, base) in [("nbd", 40.0), ("gms", 60.0)] {
            notes.push(file(d, "write", base / 4.0));
            for r in [1.0, 3.0, 2.0] {
                notes.push(file(d, "stream", base * r));
                notes.push(file(d, "mmap", base / 2.0 * r));
            }
        }
        notes.push(swap("nbd", 20.0, 0));
        notes.push(swap("gms", 8.0, 0));
        let w = Workloads::parse(&notes).unwrap();
        assert_eq!((w.files.len(), w.swaps.len(), w.errors.len()), (14, 2, 0));
        assert_eq!(w.file_mb_s("gms", "stream"), Some(120.0));
        assert_eq!(w.file_mb_s("nbd", "mmap"), Some(40.0));
        let r = w.ratios();
        assert_eq!((r["swap_time"].as_f64(), r["file_stream_mb_s"].as_f64()), (Some(0.4), Some(1.5)));
        assert_eq!(r["file_mmap_mb_s"].as_f64(), Some(1.5));
        let k = w.row_keys("gms");
        assert_eq!((k["file_stream_mb_s"].as_f64(), k["file_write_mb_s"].as_f64()), (Some(120.0), Some(15.0)));
        assert_eq!(
            (k["file_rounds"].as_u64(), k["swap_secs"].as_f64(), k["swap_mib"].as_u64()),
            (Some(3), Some(8.0), Some(24))
        );
        assert_eq!((k["swap_peak_mib"].as_f64(), k["file_pages_verified"].as_u64()), (Some(9.0), Some(7 * 4096)));
        assert_eq!((k["swap_out_mib"].as_f64(), k["swap_in_mib"].as_f64()), (Some(12.0), Some(20.0)));
        // 32 MiB moved by each: the per-MiB ratio is the wall-time ratio here.
        assert_eq!((k["swap_secs_per_mib"].as_f64(), r["swap_time_per_mib"].as_f64()), (Some(0.25), Some(0.4)));
        assert!(w.missing("gms").is_empty() && w.missing("nbd").is_empty());
    }

    #[test]
    fn swap_rounds_are_averaged() {
        let notes = [swap("nbd", 12.0, 0), swap("gms", 6.0, 0), swap("gms", 5.0, 0), swap("nbd", 10.0, 0)];
        let w = Workloads::parse(&notes).unwrap();
        let g = w.swap("gms").unwrap();
        assert_eq!((g.secs, g.pages_verified, g.swap_out_kib), (5.5, 2 * 18432, 12288));
        assert_eq!(w.ratios()["swap_time"].as_f64(), Some(0.5));
        assert_eq!(w.row_keys("nbd")["swap_runs"].as_u64(), Some(2));
        // Each phase is averaged by name, and compared between the devices.
        assert_eq!(g.phases, [("write".to_string(), 1.0), ("verify-seq".to_string(), 4.5)]);
        assert_eq!(w.row_keys("gms")["swap_phase_secs"]["verify-seq"].as_f64(), Some(4.5));
        assert_eq!(w.phase_ratios(), [("write".to_string(), 1.0), ("verify-seq".to_string(), 0.45)]);
        assert_eq!(w.ratios()["swap_phase_time"]["verify-seq"].as_f64(), Some(0.45));
    }

    #[test]
    fn missing_results_and_error_lines_are_reported() {
        let notes = vec![
            file("nbd", "write", 10.0),
            "errors: file gms: mount -t ext2 /dev/gms0 failed: bad superblock".to_string(),
            "errors: swap nbd: trapeze-memhog exit status 137: Killed".to_string(),
        ];
        let w = Workloads::parse(&notes).unwrap();
        assert_eq!(
            w.errors,
            [
                "file gms: mount -t ext2 /dev/gms0 failed: bad superblock",
                "swap nbd: trapeze-memhog exit status 137: Killed"
            ]
        );
        assert_eq!(w.missing("nbd"), ["nbd: no file stream result", "nbd: no file mmap result", "nbd: no swap result"]);
        let r = w.ratios();
        assert!(r["swap_time"].is_null() && r["file_stream_mb_s"].is_null());
        assert!(w.row_keys("gms")["swap_secs"].is_null());
    }

    #[test]
    fn bad_result_lines_are_errors() {
        assert!(Workloads::parse(&["file-result {\"name\":\"nbd\"}".into()]).is_err());
        assert!(Workloads::parse(&["file-result not json".into()]).is_err());
        let e = Workloads::parse(&[swap("gms", 3.0, 2)]).unwrap_err();
        assert!(format!("{e:#}").contains("wrong pages"), "{e:#}");
    }
}
