// SPDX-License-Identifier: GPL-2.0-only
//! What `cargo xtask bench vm` reads from guest 0's console and reports: the per-device
//! rows (medians over rounds), their JSON form and the table.

use anyhow::Context;
use serde_json::{json, Value};

/// What a result line starts with on guest 0's console.
const RESULT: &str = "trapeze-bench: result ";

/// One device's figures, as trapeze-blkbench reported them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Row {
    pub device: String,
    pub path: String,
    pub bytes: u64,
    pub reads: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub seq_mb_s: f64,
    pub write_mb_s: Option<f64>,
    /// Guest 0's kernel CPU time per page of the sequential reads and of the pattern
    /// write (µs; system and interrupt time, none of the tool's own).
    pub seq_kernel_us_per_page: Option<f64>,
    pub write_kernel_us_per_page: Option<f64>,
    pub pages_verified: u64,
    /// Per-round (p50, p99, seq MB/s) when this row is the median of several rounds.
    pub per_round: Vec<(f64, f64, f64)>,
}

impl Row {
    pub(super) fn parse(v: &Value) -> anyhow::Result<Row> {
        let f = |k: &str| v[k].as_f64().with_context(|| format!("result without a number {k}: {v}"));
        let u = |k: &str| v[k].as_u64().with_context(|| format!("result without an integer {k}: {v}"));
        Ok(Row {
            device: v["name"].as_str().context("result without a name")?.to_string(),
            path: v["device"].as_str().unwrap_or("?").to_string(),
            bytes: u("bytes")?,
            reads: u("rand4k_reads")?,
            p50_us: f("rand4k_p50_us")?,
            p99_us: f("rand4k_p99_us")?,
            seq_mb_s: f("seq_mb_s")?,
            write_mb_s: v["write_mb_s"].as_f64(),
            seq_kernel_us_per_page: v["seq_kernel_us_per_page"].as_f64(),
            write_kernel_us_per_page: v["write_kernel_us_per_page"].as_f64(),
            pages_verified: u("pages_verified")?,
            per_round: Vec::new(),
        })
    }
    pub(super) fn json(&self) -> Value {
        json!({
            "device": self.device, "path": self.path, "bytes": self.bytes, "reads": self.reads,
            "rand4k_p50_us": round_to(self.p50_us, 1), "rand4k_p99_us": round_to(self.p99_us, 1),
            "seq_mb_s": round_to(self.seq_mb_s, 1), "write_mb_s": self.write_mb_s.map(|w| round_to(w, 1)),
            "seq_kernel_us_per_page": self.seq_kernel_us_per_page.map(|v| round_to(v, 2)),
            "write_kernel_us_per_page": self.write_kernel_us_per_page.map(|v| round_to(v, 2)),
            "pages_verified": self.pages_verified,
            "rounds": self.per_round.len(),
            "per_round": self.per_round.iter().map(|r| json!({"rand4k_p50_us": r.0, "rand4k_p99_us": r.1, "seq_mb_s": r.2})).collect::<Vec<_>>(),
        })
    }

    /// The median over rounds of one device (its rows, in order): p50, p99 and sequential
    /// bandwidth (and its kernel CPU per page) each the median of the rounds' figures; the
    /// write bandwidth and its CPU of the round that wrote; pages verified summed.
    pub(super) fn median_of(rows: &[Row]) -> Option<Row> {
        let first = rows.first()?;
        let mid = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        let median = |f: fn(&Row) -> f64| mid(rows.iter().map(f).collect());
        let seq_cpu: Vec<f64> = rows.iter().filter_map(|r| r.seq_kernel_us_per_page).collect();
        Some(Row {
            p50_us: median(|r| r.p50_us),
            p99_us: median(|r| r.p99_us),
            seq_mb_s: median(|r| r.seq_mb_s),
            write_mb_s: rows.iter().find_map(|r| r.write_mb_s),
            seq_kernel_us_per_page: (!seq_cpu.is_empty()).then(|| mid(seq_cpu)),
            write_kernel_us_per_page: rows.iter().find_map(|r| r.write_kernel_us_per_page),
            pages_verified: rows.iter().map(|r| r.pages_verified).sum(),
            per_round: rows.iter().map(|r| (r.p50_us, r.p99_us, r.seq_mb_s)).collect(),
            ..first.clone()
        })
    }
}

/// `x` rounded to `digits` decimals (for the JSON rows).
pub(super) fn round_to(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// What guest 0's console says: the rows and every other bench line.
pub(super) fn parse_console(console: &str) -> (Vec<anyhow::Result<Row>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for l in console.lines() {
        let l = l.trim_end_matches('\r');
        if let Some(j) = l.find(RESULT).map(|i| &l[i + RESULT.len()..]) {
            rows.push(serde_json::from_str::<Value>(j).map_err(anyhow::Error::from).and_then(|v| Row::parse(&v)));
        } else if let Some(i) = l.find("trapeze-bench: ") {
            notes.push(l[i + "trapeze-bench: ".len()..].to_string());
        }
    }
    (rows, notes)
}

/// The run's settings the table's heading names.
pub(super) struct Heading {
    pub disk_mb: u32,
    pub reads: u32,
    pub rounds: u32,
    pub readahead: u32,
}

/// The human-readable table: NBD's row, GMS's row (or why it is missing), the ratios.
pub(super) fn print_table(
    a: &Heading,
    nbd: &Row,
    gms_row: Option<&Row>,
    gms_missing: Option<&String>,
    notes: &[String],
    ram_backend: bool,
) {
    println!(
        "Block devices in guest A (TCG), {} MiB each, {} random 4 KiB reads and sequential 256 KiB reads \
         with O_DIRECT per round; medians of {} rounds taken in turn; GMS read-ahead {}",
        a.disk_mb,
        a.reads,
        a.rounds,
        if a.readahead > 0 { format!("{} pages", a.readahead) } else { "off".into() }
    );
    println!("{:<6} {:>14} {:>14} {:>12} {:>12}", "device", "4K p50 (us)", "4K p99 (us)", "seq MB/s", "write MB/s");
    let row = |r: &Row| {
        println!(
            "{:<6} {:>14.1} {:>14.1} {:>12.1} {:>12}",
            r.device,
            r.p50_us,
            r.p99_us,
            r.seq_mb_s,
            r.write_mb_s.map_or("-".into(), |w| format!("{w:.1}"))
        );
        if r.per_round.len() > 1 {
            let each = |f: fn(&(f64, f64, f64)) -> f64| {
                r.per_round.iter().map(|x| format!("{:.0}", f(x))).collect::<Vec<_>>().join(" / ")
            };
            println!("         rounds: p50 {} us; p99 {} us; seq {} MB/s", each(|x| x.0), each(|x| x.1), each(|x| x.2));
        }
    };
    row(nbd);
    match (gms_row, gms_missing) {
        (Some(g), _) => {
            row(g);
            if let Some(c) = notes.iter().find_map(|n| n.strip_prefix("gms: counters: ")) {
                println!("         {}", c.trim_end());
            }
            if ram_backend {
                println!(
                    "  (trapeze.ko says gms_disk_mb is a RAM backend: this row is blk-mq + local RAM, \
                     not network memory yet)"
                );
            }
            println!(
                "gms / nbd: 4K p50 {:.2}x, 4K p99 {:.2}x, sequential bandwidth {:.2}x",
                g.p50_us / nbd.p50_us,
                g.p99_us / nbd.p99_us,
                g.seq_mb_s / nbd.seq_mb_s
            );
        }
        (None, Some(why)) => println!("gms    not measured: {why}"),
        (None, None) => {}
    }
    println!("(nbd: Linux's NBD client in guest A, Debian nbd-server in guest B on a tmpfs file, virtio-net over QEMU UDP sockets)");
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"tool":"trapeze-blkbench","name":"nbd","device":"/dev/nbd0","bytes":67108864,"write_mb_s":12.5,"rand4k_reads":2000,"rand4k_p50_us":410.2,"rand4k_p99_us":1900.0,"rand4k_mean_us":500.0,"seq_block_kib":256,"seq_mb_s":35.5,"write_kernel_us_per_page":null,"seq_kernel_us_per_page":41.5,"pages_verified":18384}"#;

    #[test]
    fn console_results_and_notes_are_found() {
        let console = format!(
            "[    3.0] random kernel line\r\ntrapeze-bench: nbd: /dev/nbd0 connected, 64 MiB\r\ntrapeze-bench: result {LINE}\r\n\
             trapeze-bench: gms: /dev/gms0 does not exist after insmod trapeze.ko node=0 gms_disk_mb=64\r\n"
        );
        let (rows, notes) = parse_console(&console);
        assert_eq!(rows.len(), 1);
        let r = rows.into_iter().next().unwrap().unwrap();
        assert_eq!((r.device.as_str(), r.bytes, r.reads), ("nbd", 64 << 20, 2000));
        assert_eq!((r.p50_us, r.p99_us, r.seq_mb_s, r.write_mb_s), (410.2, 1900.0, 35.5, Some(12.5)));
        assert_eq!((r.seq_kernel_us_per_page, r.write_kernel_us_per_page), (Some(41.5), None));
        assert_eq!(notes.len(), 2);
        assert!(notes[1].starts_with("gms: /dev/gms0 does not exist"));
        let (bad, _) = parse_console("trapeze-bench: result {\"name\":\"nbd\"}\n");
        assert!(bad[0].is_err(), "a result without figures is an error");
    }

    #[test]
    fn rounds_combine_into_medians() {
        let (rows, _) = parse_console(&format!("trapeze-bench: result {LINE}\n"));
        let r = rows.into_iter().next().unwrap().unwrap();
        let round = |p50, p99, seq, w| Row { p50_us: p50, p99_us: p99, seq_mb_s: seq, write_mb_s: w, ..r.clone() };
        let m = Row::median_of(&[
            round(300.0, 900.0, 30.0, Some(9.0)),
            round(100.0, 5000.0, 10.0, None),
            round(200.0, 700.0, 20.0, None),
        ])
        .unwrap();
        assert_eq!((m.p50_us, m.p99_us, m.seq_mb_s, m.write_mb_s), (200.0, 900.0, 20.0, Some(9.0)));
        assert_eq!((m.pages_verified, m.per_round.len()), (3 * 18384, 3));
        let even = Row::median_of(&[round(100.0, 1.0, 1.0, None), round(300.0, 3.0, 3.0, None)]).unwrap();
        assert_eq!(even.p50_us, 200.0);
        assert!(Row::median_of(&[]).is_none());
        let j = m.json();
        assert_eq!(j["rounds"], 3);
        assert_eq!(j["per_round"][1]["rand4k_p50_us"], 100.0);
    }
}
