// SPDX-License-Identifier: GPL-2.0-only
//! The figure of `cargo xtask bench gms --plot`: sequential read bandwidth from network
//! memory against read-ahead depth and modelled wire delay, beside the local disk, and
//! random 8 KB getpage latency, from the bench's JSON lines.

use super::{bars, num, Area, Bars, FONT};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Write `dir/gms.svg` from the bench's JSON lines.
pub fn write(dir: &Path, lines: &[Value]) -> anyhow::Result<PathBuf> {
    super::write_svg(dir, "gms", (1300, 520), |root| draw(root, lines))
}

fn draw(root: &Area, lines: &[Value]) -> anyhow::Result<()> {
    let seq: Vec<&Value> = lines.iter().filter(|l| l["row"] == "seq_read" && l["source"] == "gms").collect();
    anyhow::ensure!(!seq.is_empty(), "no GMS sequential-read rows in the bench's output");
    let mut depths: Vec<u64> = seq.iter().filter_map(|l| l["readahead"].as_u64()).collect();
    depths.sort_unstable();
    depths.dedup();
    let mut delays: Vec<f64> = seq.iter().filter_map(|l| l["wire_delay_us"].as_f64()).collect();
    delays.sort_by(f64::total_cmp);
    delays.dedup();
    let mut series = Vec::new();
    for &w in &delays {
        let mut v = Vec::new();
        for &d in &depths {
            let r = seq.iter().find(|l| l["readahead"].as_u64() == Some(d) && l["wire_delay_us"].as_f64() == Some(w));
            v.push(r.map(|r| num(r, "mb_s")).transpose()?);
        }
        let mut name = if w == 0.0 { "no wire delay".to_string() } else { format!("{w} µs one-way wire delay") };
        if let (Some(Some(first)), Some(Some(last)), true) = (v.first(), v.last(), v.len() > 1) {
            name.push_str(&format!(" (read-ahead {} / {}: {:.1}×)", depths[depths.len() - 1], depths[0], last / first));
        }
        series.push((name, v));
    }
    let disk = lines.iter().find(|l| l["row"] == "seq_read" && l["source"] == "disk_odirect");
    let disk_seq = disk.and_then(|d| d["mb_s"].as_f64()).filter(|x| x.is_finite());
    let random = |src: &str| lines.iter().find(|l| l["row"] == "random_8k" && l["source"] == src);
    let pages = seq[0]["pages"].as_u64().unwrap_or(0);
    let title = format!("GMS on a 3-node in-process cluster, {pages} pages of 8 KiB, best of the scans per depth");
    let root = root.titled(&title, (FONT, 20)).map_err(super::err)?;
    let (left, right) = root.split_horizontally(860);
    bars(
        &left,
        &Bars {
            title: "Sequential reads from network memory (higher is better)",
            y_desc: "bandwidth (MB/s)",
            groups: depths.iter().map(|d| format!("read-ahead {d}")).collect(),
            series,
            fmt: |v| format!("{v:.0}"),
            reference: disk_seq.map(|d| (format!("local disk, O_DIRECT: {d:.0} MB/s"), d)),
        },
    )?;
    let mut lat = Vec::new();
    for (src, name) in [("gms", "GMS getpage"), ("disk_odirect", "local disk, O_DIRECT")] {
        if let Some(r) = random(src) {
            let (p50, p99) = (r["p50_us"].as_f64().filter(|x| x.is_finite()), r["p99_us"].as_f64());
            if p50.is_some() {
                lat.push((name.to_string(), vec![p50, p99.filter(|x| x.is_finite())]));
            }
        }
    }
    if lat.is_empty() {
        return Ok(());
    }
    bars(
        &right,
        &Bars {
            title: "Random 8 KB reads (lower is better)",
            y_desc: "latency (µs)",
            groups: vec!["p50".into(), "p99".into()],
            series: lat,
            fmt: |v| format!("{v:.1}"),
            reference: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rendering test on hand-made rows (not a measurement).
    #[test]
    fn hand_made_rows_render() {
        let mut lines = Vec::new();
        for (w, base) in [(0.0, 1000.0), (2.0, 500.0), (10.0, 200.0)] {
            for (d, k) in [(0, 1.0), (4, 2.0), (16, 3.0)] {
                lines.push(json!({"row": "seq_read", "source": "gms", "readahead": d, "mb_s": base * k,
                                  "pages": 4000, "wire_delay_us": w}));
            }
        }
        lines.push(json!({"row": "seq_read", "source": "disk_odirect", "readahead": 0, "mb_s": 111.0}));
        lines.push(json!({"row": "random_8k", "source": "gms", "p50_us": 5.5, "p99_us": 12.0}));
        lines.push(json!({"row": "random_8k", "source": "disk_odirect", "p50_us": 70.0, "p99_us": 140.0}));
        let svg = super::super::svg_of((1300, 520), |a| draw(a, &lines)).unwrap();
        for t in [
            "read-ahead 16",
            "10 µs one-way wire delay",
            "no wire delay (read-ahead 16 / 0: 3.0×)",
            "3000",
            "600",
            "111 MB/s",
            "70.0",
            "5.5",
        ] {
            assert!(svg.contains(t), "{t} missing");
        }
        assert!(super::super::svg_of((400, 300), |a| draw(a, &lines[9..])).is_err(), "no GMS rows is an error");
    }
}
