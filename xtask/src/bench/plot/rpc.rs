// SPDX-License-Identifier: GPL-2.0-only
//! The figure of `cargo xtask bench rpc --plot`: latency CDFs of NetRPC calls against UDP
//! and TCP loopback round trips moving the same 16 B request / 8 KB reply, each placement
//! beside its like (two cores, one core), from the bench's JSON lines (`cdf_us`: the
//! latency at each of the summary's `cdf_quantiles`).

use super::{err, legend_strip, nums, Area, FONT, PALETTE};
use anyhow::Context;
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Write `dir/rpc.svg` from the bench's JSON lines.
pub fn write(dir: &Path, lines: &[Value]) -> anyhow::Result<PathBuf> {
    super::write_svg(dir, "rpc", (1300, 620), |root| draw(root, lines))
}

/// One distribution: its name and (latency µs, fraction of calls at or below it).
type Cdf = (String, Vec<(f64, f64)>);

fn draw(root: &Area, lines: &[Value]) -> anyhow::Result<()> {
    let summary = lines.iter().find(|l| l["summary"] == true).context("no summary line in the bench's output")?;
    let qs = nums(&summary["cdf_quantiles"], "cdf_quantiles (the bench predates latency quantiles?)")?;
    let cdf = |v: &Value, what: &str| -> anyhow::Result<Vec<(f64, f64)>> {
        let us = nums(v, what)?;
        anyhow::ensure!(us.len() == qs.len(), "{what}: {} values for {} quantiles", us.len(), qs.len());
        Ok(us.into_iter().zip(qs.iter().copied()).collect())
    };
    let row = |ways: u64, payload: u64, kind: &str| {
        lines.iter().find(|l| {
            l["variant"] == "wait"
                && l["ways"].as_u64() == Some(ways)
                && l["payload"].as_u64() == Some(payload)
                && l["kind"] == kind
        })
    };
    let mut two_cores: Vec<Cdf> = Vec::new();
    for (ways, payload, kind, name) in [
        (2, 0, "none", "NetRPC 2-way, 0 B reply"),
        (2, 8192, "solicited", "NetRPC 2-way, 8 KB (IPT, zero-copy)"),
        (3, 8192, "solicited", "NetRPC 3-way, 8 KB (delegated)"),
    ] {
        if let Some(r) = row(ways, payload, kind) {
            two_cores.push((name.into(), cdf(&r["cdf_us"], name)?));
        }
    }
    let cross = &summary["cross_core"];
    two_cores.push(("UDP, 8 KB reply".into(), cdf(&cross["udp_8k_cdf_us"], "cross_core.udp_8k_cdf_us")?));
    two_cores.push(("TCP (NODELAY), 8 KB reply".into(), cdf(&cross["tcp_8k_cdf_us"], "cross_core.tcp_8k_cdf_us")?));
    let same = &summary["same_core"];
    let one_core: Vec<Cdf> = vec![
        (two_cores[1].0.clone(), cdf(&same["rpc_2way_8k_cdf_us"], "same_core.rpc_2way_8k_cdf_us")?),
        (two_cores[two_cores.len() - 2].0.clone(), cdf(&same["udp_8k_cdf_us"], "same_core.udp_8k_cdf_us")?),
        (two_cores[two_cores.len() - 1].0.clone(), cdf(&same["tcp_8k_cdf_us"], "same_core.tcp_8k_cdf_us")?),
    ];
    let root = root
        .titled(
            "NetRPC calls against UDP and TCP loopback round trips (16 B request), one run, blocking calls one at a time",
            (FONT, 20),
        )
        .map_err(err)?;
    let (charts, strip) = root.split_vertically(root.dim_in_pixel().1 as i32 - 70);
    let (left, right) = charts.split_horizontally(650);
    // Colours follow the series' names across both panels; one legend below them.
    let names: Vec<String> = two_cores.iter().map(|c| c.0.clone()).collect();
    chart(&left, "Two cores: client on CPU 0, server on CPU 1", &two_cores, &names)?;
    chart(&right, "One core: both NetRPC nodes on one thread, both socket ends on CPU 0", &one_core, &names)?;
    let entries: Vec<(String, RGBColor)> =
        names.iter().enumerate().map(|(k, n)| (n.clone(), PALETTE[k % PALETTE.len()])).collect();
    legend_strip(&strip, &entries)
}

/// One panel of CDFs on a log latency axis, up to the 99.9th percentile.
fn chart(area: &Area, title: &str, cdfs: &[Cdf], names: &[String]) -> anyhow::Result<()> {
    let shown = |c: &Cdf| c.1.iter().filter(|p| p.1 <= 0.999).map(|p| p.0).collect::<Vec<_>>();
    let lo = cdfs.iter().flat_map(shown).fold(f64::MAX, f64::min);
    let hi = cdfs.iter().flat_map(shown).fold(0.0f64, f64::max);
    anyhow::ensure!(lo > 0.0 && hi >= lo, "{title}: no latencies to draw");
    let (lo, hi) = (lo * 0.7, hi * 1.4);
    let mut c = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(14)
        .margin_right(34)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(ticks_1_2_5(lo, hi)), 0.0..1.0)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("round-trip latency (µs, log scale)")
        .y_desc("fraction of calls at or below")
        .x_label_formatter(&|x| if *x >= 1.0 { format!("{x:.0}") } else { format!("{x}") })
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(BLACK.mix(0.04))
        .draw()
        .map_err(err)?;
    for (name, points) in cdfs {
        let k = names.iter().position(|n| n == name).unwrap_or(0);
        let colour = PALETTE[k % PALETTE.len()];
        let pts: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.1 <= 0.999).collect();
        c.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2))).map_err(err)?;
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(err)?;
    }
    Ok(())
}

/// Ticks at 1, 2 and 5 times the powers of ten within `lo..=hi` (1 and 10 times only when
/// the range spans more than two decades).
fn ticks_1_2_5(lo: f64, hi: f64) -> Vec<f64> {
    let steps: &[f64] = if hi / lo > 300.0 { &[1.0] } else { &[1.0, 2.0, 5.0] };
    let mut v = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        v.extend(steps.iter().map(|s| s * decade).filter(|t| (lo..=hi).contains(t)));
        decade *= 10.0;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_ticks_step_1_2_5_or_by_decades() {
        assert_eq!(ticks_1_2_5(0.7, 60.0), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(ticks_1_2_5(1.0, 5000.0), [1.0, 10.0, 100.0, 1000.0]);
    }

    /// A rendering test on hand-made distributions (not a measurement).
    #[test]
    fn hand_made_distributions_render() {
        let q = [0.0, 0.5, 0.9, 0.999, 1.0];
        let d = |base: f64| json!(q.iter().map(|x| base * (1.0 + x)).collect::<Vec<_>>());
        let lines = vec![
            json!({"variant": "wait", "ways": 2, "payload": 0, "kind": "none", "cdf_us": d(2.0)}),
            json!({"variant": "wait", "ways": 2, "payload": 8192, "kind": "solicited", "cdf_us": d(4.0)}),
            json!({"variant": "wait", "ways": 3, "payload": 8192, "kind": "solicited", "cdf_us": d(5.0)}),
            json!({"summary": true, "cdf_quantiles": q,
                   "cross_core": {"udp_8k_cdf_us": d(90.0), "tcp_8k_cdf_us": d(100.0)},
                   "same_core": {"rpc_2way_8k_cdf_us": d(1.0), "udp_8k_cdf_us": d(6.0), "tcp_8k_cdf_us": d(7.0)}}),
        ];
        let svg = super::super::svg_of((1300, 620), |a| draw(a, &lines)).unwrap();
        for t in
            ["NetRPC 3-way, 8 KB (delegated)", "UDP, 8 KB reply", "TCP (NODELAY), 8 KB reply", "log scale", "One core"]
        {
            assert!(svg.contains(t), "{t} missing");
        }
        let mut old = lines.clone();
        old[3]["cdf_quantiles"] = Value::Null;
        let e = super::super::svg_of((400, 300), |a| draw(a, &old)).unwrap_err();
        assert!(e.to_string().contains("cdf_quantiles"), "{e}");
    }
}
