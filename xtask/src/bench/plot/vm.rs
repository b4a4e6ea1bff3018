// SPDX-License-Identifier: GPL-2.0-only
//! The figure of `cargo xtask bench vm --plot`: the guest block device `/dev/gms0` against
//! the fair baseline (a virtio-blk disk on QEMU's NBD client reading `qemu-nbd` on the
//! host), the `null-co` floor and Linux's NBD client over virtio-net: 4 KiB random read
//! p50/p99, sequential MB/s of the raw device and of a file on ext2 read by `read()` and
//! by `mmap`, and the ratios against the fair baseline (or, for a run before it, against
//! NBD), from the bench's JSON lines (the device rows and the summary).

use super::{bars, num, Area, Bars, FONT};
use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The device rows' names, in the order drawn, with their legend labels.
const DEVICES: [(&str, &str); 4] = [
    ("gms", "/dev/gms0 on GMS"),
    ("fair", "virtio-blk on QEMU's NBD client (qemu-nbd on the host)"),
    ("null", "virtio-blk on null-co (the floor)"),
    ("nbd", "NBD over virtio-net (nbd-server in guest B)"),
];

/// Write `dir/vm.svg` from the bench's JSON lines.
pub fn write(dir: &Path, lines: &[Value]) -> anyhow::Result<PathBuf> {
    super::write_svg(dir, "vm", (1300, 480), |root| draw(root, lines))
}

fn draw(root: &Area, lines: &[Value]) -> anyhow::Result<()> {
    let row = |d: &str| lines.iter().find(|l| l["device"] == d);
    let mut series = Vec::new();
    for (dev, label) in DEVICES {
        if let Some(r) = row(dev) {
            let file = |k: &str| r[k].as_f64();
            series.push((
                label,
                num(r, "rand4k_p50_us")?,
                num(r, "rand4k_p99_us")?,
                vec![Some(num(r, "seq_mb_s")?), file("file_stream_mb_s"), file("file_mmap_mb_s")],
            ));
        }
    }
    anyhow::ensure!(!series.is_empty(), "no device rows (gms, nbd) in the bench's output");
    let summary = lines.iter().find(|l| l["summary"] == "vm").context("no summary line in the bench's output")?;
    // The fair baseline's ratios are medians of per-round ones; an older run has only NBD.
    let fair = &summary["gms_over_fair_nbd"];
    let (ratios, against) = if fair.is_object() { (fair, "fair NBD") } else { (&summary["gms_over_nbd"], "nbd") };
    let r = |k: &str| ratios[k].as_f64().or_else(|| ratios[k]["median"].as_f64());
    let subtitle = match (r("rand4k_p50"), r("rand4k_p99"), r("seq_mb_s")) {
        (Some(a), Some(b), Some(c)) => {
            let mut t = format!("gms / {against}: p50 {a:.2}×, p99 {b:.2}×, sequential {c:.2}×");
            if let (Some(s), Some(f), Some(m)) = (r("swap_time"), r("file_stream_mb_s"), r("file_mmap_mb_s")) {
                t.push_str(&format!(", file read() {f:.2}×, mmap {m:.2}×; swap time {s:.2}×"));
            }
            t
        }
        _ => "gms not measured".to_string(),
    };
    let title = format!(
        "Block devices in a TCG guest, {} MiB, medians of {} rounds — {subtitle}",
        summary["disk_mb"].as_u64().unwrap_or(0),
        summary["rounds"].as_u64().unwrap_or(0)
    );
    let root = root.titled(&title, (FONT, 20)).map_err(super::err)?;
    let (left, right) = root.split_horizontally(620);
    bars(
        &left,
        &Bars {
            title: "4 KiB random reads, O_DIRECT (lower is better)",
            y_desc: "latency (µs)",
            groups: vec!["p50".into(), "p99".into()],
            series: series.iter().map(|s| (s.0.to_string(), vec![Some(s.1), Some(s.2)])).collect(),
            fmt: |v| format!("{v:.0} µs"),
            reference: None,
        },
    )?;
    bars(
        &right,
        &Bars {
            title: "Sequential reads: raw device, file on ext2 (higher is better)",
            y_desc: "bandwidth (MB/s)",
            groups: vec!["raw, 256 KiB".into(), "file, read()".into(), "file, mmap".into()],
            series: series.iter().map(|s| (s.0.to_string(), s.3.clone())).collect(),
            fmt: |v| format!("{v:.1}"),
            reference: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rendering test on a hand-made report (not a measurement): the figure shows both
    /// devices' figures, the ratios and the axes.
    #[test]
    fn hand_made_report_renders() {
        let lines = vec![
            json!({"device": "nbd", "rand4k_p50_us": 1097.0, "rand4k_p99_us": 1882.0, "seq_mb_s": 42.0,
                   "file_stream_mb_s": 31.5, "file_mmap_mb_s": 22.5}),
            json!({"device": "gms", "rand4k_p50_us": 715.0, "rand4k_p99_us": 1454.0, "seq_mb_s": 29.0,
                   "file_stream_mb_s": 27.5, "file_mmap_mb_s": 18.5}),
            json!({"summary": "vm", "disk_mb": 32, "rounds": 3,
                   "gms_over_nbd": {"rand4k_p50": 0.652, "rand4k_p99": 0.773, "seq_mb_s": 0.69,
                                    "swap_time": 0.81, "file_stream_mb_s": 0.873, "file_mmap_mb_s": 0.822}}),
        ];
        let svg = super::super::svg_of((1300, 480), |a| draw(a, &lines)).unwrap();
        for t in [
            "715 µs",
            "1097 µs",
            "1454 µs",
            "1882 µs",
            "29.0",
            "42.0",
            "31.5",
            "18.5",
            "p50 0.65×",
            "mmap 0.82×",
            "swap time 0.81×",
            "file, read()",
            "latency (µs)",
            "bandwidth (MB/s)",
        ] {
            assert!(svg.contains(t), "{t} missing");
        }
        // Rows of a run before the file and swap workloads still draw (no file bars).
        let old = vec![
            json!({"device": "nbd", "rand4k_p50_us": 1097.0, "rand4k_p99_us": 1882.0, "seq_mb_s": 42.0}),
            json!({"summary": "vm", "disk_mb": 32, "rounds": 3,
                   "gms_over_nbd": {"rand4k_p50": 0.652, "rand4k_p99": 0.773, "seq_mb_s": 0.69}}),
        ];
        let before = super::super::svg_of((1300, 480), |a| draw(a, &old)).unwrap();
        assert!(before.contains("42.0") && before.contains("sequential 0.69×") && !before.contains("swap time"));
        assert!(svg.contains("/dev/gms0 on GMS") && svg.contains("NBD over virtio-net (nbd-server in guest B)"));
        // A run with the fair baseline: its rows drawn, its medians in the title.
        let fair = vec![
            lines[0].clone(),
            lines[1].clone(),
            json!({"device": "fair", "rand4k_p50_us": 690.0, "rand4k_p99_us": 1300.0, "seq_mb_s": 160.0}),
            json!({"device": "null", "rand4k_p50_us": 350.0, "rand4k_p99_us": 700.0, "seq_mb_s": 500.0}),
            json!({"summary": "vm", "disk_mb": 48, "rounds": 5,
                   "gms_over_fair_nbd": {"rand4k_p50": {"median": 1.038, "p10": 0.93, "p90": 1.04},
                                         "rand4k_p99": {"median": 1.5}, "seq_mb_s": {"median": 0.184}},
                   "gms_over_nbd": {"rand4k_p50": 0.652, "rand4k_p99": 0.773, "seq_mb_s": 0.69}}),
        ];
        let svg = super::super::svg_of((1300, 480), |a| draw(a, &fair)).unwrap();
        assert!(svg.contains("gms / fair NBD: p50 1.04×") && svg.contains("sequential 0.18×"), "{svg}");
        assert!(svg.contains("690 µs") && svg.contains("500.0") && svg.contains("null-co (the floor)"));
        // Without a GMS row the figure still shows NBD and says why.
        let nbd_only =
            vec![lines[0].clone(), json!({"summary": "vm", "disk_mb": 32, "rounds": 3, "gms_over_nbd": null})];
        let svg = super::super::svg_of((1100, 480), |a| draw(a, &nbd_only)).unwrap();
        assert!(svg.contains("gms not measured") && svg.contains("1097 µs"));
        assert!(super::super::svg_of((400, 300), |a| draw(a, &[])).is_err(), "no rows is an error");
    }
}
