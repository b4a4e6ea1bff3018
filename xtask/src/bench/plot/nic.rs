// SPDX-License-Identifier: GPL-2.0-only
//! The figure of `cargo xtask bench nic --plot`: the virtual NIC with native firmware
//! against the flashed riscv32 image, from the bench's JSON object.

use super::{bars, num, Area, Bars, FONT};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Write `dir/nic.svg` from the bench's JSON object.
pub fn write(dir: &Path, v: &Value) -> anyhow::Result<PathBuf> {
    super::write_svg(dir, "nic", (1300, 480), |root| draw(root, v))
}

fn draw(root: &Area, v: &Value) -> anyhow::Result<()> {
    let modes = [("native", "native firmware"), ("flashed", "flashed riscv32 image (emulated core)")];
    let mut m = Vec::new();
    for (key, label) in modes {
        let r = &v[key];
        m.push((
            label.to_string(),
            [
                num(r, "msgs_per_s")? / 1000.0,
                num(r, "stream_8k_mb_s")?,
                num(r, "oneway_8k_p50_us")?,
                num(r, "oneway_8k_p99_us")?,
            ],
        ));
    }
    let title = format!(
        "Virtual NIC to virtual NIC, in-process link: flashed / native = {:.2}× messages/s, {:.2}× 8 KB stream",
        m[1].1[0] / m[0].1[0],
        m[1].1[1] / m[0].1[1]
    );
    let root = root.titled(&title, (FONT, 20)).map_err(super::err)?;
    let panels = root.split_evenly((1, 3));
    let panel = |i: usize, title: &str, y: &str, groups: &[&str], idx: &[usize], fmt: fn(f64) -> String| {
        bars(
            &panels[i],
            &Bars {
                title,
                y_desc: y,
                groups: groups.iter().map(|g| g.to_string()).collect(),
                series: m.iter().map(|(n, f)| (n.clone(), idx.iter().map(|&k| Some(f[k])).collect())).collect(),
                fmt,
                reference: None,
            },
        )
    };
    panel(0, "Control messages (higher is better)", "thousand messages/s", &["control only"], &[0], |v| {
        format!("{v:.0} k")
    })?;
    panel(1, "8 KB streaming (higher is better)", "MB/s", &["8 KB payloads"], &[1], |v| format!("{v:.0}"))?;
    panel(2, "8 KB one-way latency (lower is better)", "one-way latency (µs)", &["p50", "p99"], &[2, 3], |v| {
        format!("{v:.1}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rendering test on a hand-made result (not a measurement).
    #[test]
    fn hand_made_result_renders() {
        let v = json!({"link": "in-process",
            "native": {"msgs_per_s": 700000.0, "stream_8k_mb_s": 2500.0, "oneway_8k_p50_us": 6.5, "oneway_8k_p99_us": 20.0},
            "flashed": {"msgs_per_s": 50000.0, "stream_8k_mb_s": 300.0, "oneway_8k_p50_us": 50.0, "oneway_8k_p99_us": 150.0}});
        let svg = super::super::svg_of((1300, 480), |a| draw(a, &v)).unwrap();
        for t in ["700 k", "50 k", "2500", "300", "6.5", "150.0", "0.07× messages/s", "thousand messages/s"] {
            assert!(svg.contains(t), "{t} missing");
        }
        let bad = super::super::svg_of((400, 300), |a| draw(a, &json!({"native": {}})));
        assert!(bad.unwrap_err().to_string().contains("msgs_per_s"));
    }
}
