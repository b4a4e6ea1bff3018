// SPDX-License-Identifier: GPL-2.0-only
//! The figure of `cargo xtask bench dma --plot`: one-way latency of a 128 B + 8 KB message
//! against the pulse threshold in the timing model, in the shape of the cut-through
//! paper's Figures 4 (fixed pulses) and 6 (eager DMA), beside the paper's stated points;
//! latency and streaming bandwidth per policy on both modelled platforms beside the papers.

use super::super::plot::{bars, err, legend, Area, Bars, FONT, PALETTE};
use super::{Measured, Platform, EAGER_THRESHOLDS, SLICE_FIXED_PULSE};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// Receive pulses drawn in the fixed-pulse panel (of the swept eight, to stay readable).
const FIXED_RECV_SHOWN: [u32; 5] = [512, 1024, 1280, 2048, 4096];

/// Write `dir/dma.svg`: the first platform is the cut-through paper's AlphaStation, whose
/// sweeps are drawn; every platform's policies are in the bar panels.
pub fn write(dir: &Path, runs: &[(&Platform, &Measured)]) -> anyhow::Result<PathBuf> {
    super::super::plot::write_svg(dir, "dma", (1400, 1000), |root| draw(root, runs))
}

/// A latency-against-threshold panel: one line per receive threshold, the paper's points.
struct Sweep<'a> {
    title: &'a str,
    x_desc: &'a str,
    sweep: &'a [(u32, u32, f64)],
    recv: &'a [u32],
    /// Extra model points (label, x, µs), drawn as hollow squares.
    model_points: Vec<(String, u32, f64)>,
    /// The paper's stated figures (label, x, µs), drawn as black crosses.
    paper_points: Vec<(String, u32, f64)>,
}

fn sweep_panel(area: &Area, s: &Sweep) -> anyhow::Result<()> {
    let xs: Vec<u32> = s.sweep.iter().map(|p| p.0).chain(s.model_points.iter().map(|p| p.1)).collect();
    let ys: Vec<f64> = s
        .sweep
        .iter()
        .filter(|p| s.recv.contains(&p.1))
        .map(|p| p.2)
        .chain(s.model_points.iter().chain(&s.paper_points).map(|p| p.2))
        .collect();
    let (x_lo, x_hi) = (*xs.iter().min().unwrap_or(&256) as f64, *xs.iter().max().unwrap_or(&8192) as f64);
    let (y_lo, y_hi) = (ys.iter().copied().fold(f64::MAX, f64::min), ys.iter().copied().fold(0.0f64, f64::max));
    anyhow::ensure!(y_hi > 0.0, "{}: nothing to draw", s.title);
    // Ticks at the swept values, less those too close to a neighbour to label.
    let mut keys: Vec<f64> = xs.iter().map(|&x| x as f64).filter(|x| ![1408.0, 1536.0].contains(x)).collect();
    keys.sort_by(f64::total_cmp);
    keys.dedup();
    let mut c = ChartBuilder::on(area)
        .caption(s.title, (FONT, 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (x_lo * 0.9..x_hi * 1.1).log_scale().with_key_points(keys),
            // Room above the curves for the legend, below them for the point labels.
            (y_lo - 0.25 * (y_hi - y_lo) - 5.0).max(0.0)..y_hi + (y_hi - y_lo) + 5.0,
        )
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(s.x_desc)
        .y_desc("one-way latency, 128 B + 8 KB (µs)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| super::super::plot::tick(*y))
        .light_line_style(BLACK.mix(0.04))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    for (k, &r) in s.recv.iter().enumerate() {
        let colour = PALETTE[k % PALETTE.len()];
        let mut pts: Vec<(f64, f64)> =
            s.sweep.iter().filter(|p| p.1 == r).map(|p| (f64::from(p.0), p.2)).collect::<Vec<_>>();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))
            .map_err(err)?
            .label(format!("model, receive {r} B"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(err)?;
    }
    // Point labels sit left of their point (the rightmost points are at the axis' end).
    let label = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    let square = BLACK.stroke_width(2);
    for (i, (name, x, y)) in s.model_points.iter().enumerate() {
        let p = (f64::from(*x), *y);
        let drawn = c
            .draw_series([EmptyElement::at(p) + plotters::element::Rectangle::new([(-6, -6), (6, 6)], square)])
            .map_err(err)?;
        if i == 0 {
            drawn
                .label("model, store-and-forward")
                .legend(move |(x, y)| plotters::element::Rectangle::new([(x + 3, y - 6), (x + 15, y + 6)], square));
        }
        c.draw_series([Text::new(name.clone(), (p.0 / 1.08, p.1), label.clone())]).map_err(err)?;
    }
    let cross = BLACK.stroke_width(3);
    for (i, (name, x, y)) in s.paper_points.iter().enumerate() {
        let p = (f64::from(*x), *y);
        let drawn = c.draw_series([Cross::new(p, 7, cross)]).map_err(err)?;
        if i == 0 {
            drawn.label("paper (figures its text states)").legend(move |(x, y)| Cross::new((x + 9, y), 6, cross));
        }
        if name.is_empty() {
        } else if p.0 >= x_hi {
            c.draw_series([Text::new(name.clone(), (p.0 / 1.08, p.1), label.clone())]).map_err(err)?;
        } else {
            let below = label.clone().pos(Pos::new(HPos::Center, VPos::Top));
            c.draw_series([Text::new(
                name.clone(),
                (p.0, (p.1 - (y_hi - y_lo) * 0.06).min(y_lo - (y_hi - y_lo) * 0.1)),
                below,
            )])
            .map_err(err)?;
        }
    }
    legend(&mut c, SeriesLabelPosition::UpperLeft)
}

fn draw(root: &Area, runs: &[(&Platform, &Measured)]) -> anyhow::Result<()> {
    let &(alpha, am) = runs.first().ok_or_else(|| anyhow::anyhow!("no platform measured"))?;
    let root = root
        .titled("Firmware DMA policies in the timing model (deterministic model time) beside the papers", (FONT, 22))
        .map_err(err)?;
    let panels = root.split_evenly((2, 2));
    let p = &alpha.paper;
    let mut fixed_paper = Vec::new();
    if let Some(us) = p.saf_us {
        fixed_paper.push((format!("paper {us:.0} µs"), 8192, us));
    }
    if let Some(us) = p.fixed_us {
        // §4.1: "a single pulse size of 1280 bytes is near optimal".
        fixed_paper.push((format!("best {us:.0} µs (1280 B near optimal)"), 1280, us));
    }
    sweep_panel(
        &panels[0],
        &Sweep {
            title: "Fixed pulses, AlphaStation 500 (cut-through paper, Fig. 4)",
            x_desc: "send pulse = threshold (bytes, log scale)",
            sweep: &am.fixed_sweep,
            recv: &FIXED_RECV_SHOWN,
            model_points: vec![(format!("model {:.0} µs", am.saf_us), 8192, am.saf_us)],
            paper_points: fixed_paper,
        },
    )?;
    // §4.2: 177 µs with send/receive thresholds 384/512, 512/512 and 512/384.
    let eager_paper = p
        .eager_us
        .map(|us| vec![(format!("{us:.0} µs at 384/512, 512/512, 512/384"), 384, us), (String::new(), 512, us)])
        .unwrap_or_default();
    sweep_panel(
        &panels[1],
        &Sweep {
            title: "Eager DMA, AlphaStation 500 (cut-through paper, Fig. 6)",
            x_desc: "send threshold (bytes, log scale)",
            sweep: &am.eager_sweep,
            recv: &EAGER_THRESHOLDS,
            model_points: Vec::new(),
            paper_points: eager_paper,
        },
    )?;
    let short = |pl: &Platform| if pl.key == "alpha500" { "AlphaStation" } else { "Pentium-III" };
    let mut lat = Vec::new();
    let mut bw = Vec::new();
    for &(pl, m) in runs {
        lat.push((format!("{} model", short(pl)), vec![Some(m.saf_us), Some(m.fixed_best.0), Some(m.eager_best.0)]));
        lat.push((format!("{} paper", short(pl)), vec![pl.paper.saf_us, pl.paper.fixed_us, pl.paper.eager_us]));
        bw.push((
            format!("{} model", short(pl)),
            vec![Some(m.stream_saf), Some(m.stream_fixed), Some(m.stream_fixed_slice), Some(m.stream_eager)],
        ));
        if pl.paper.saf_mb_s.is_some() {
            bw.push((
                format!("{} paper", short(pl)),
                vec![pl.paper.saf_mb_s, None, pl.paper.fixed_mb_s, pl.paper.eager_mb_s],
            ));
        }
    }
    bars(
        &panels[2],
        &Bars {
            title: "One-way latency per policy, best thresholds (lower is better)",
            y_desc: "latency (µs)",
            groups: vec!["store-and-forward".into(), "fixed pulses".into(), "eager DMA".into()],
            series: lat,
            fmt: |v| format!("{v:.0}"),
            reference: None,
        },
    )?;
    bars(
        &panels[3],
        &Bars {
            title: "Streaming 8 KB messages, receiver's rate (higher is better)",
            y_desc: "bandwidth (MB/s)",
            groups: vec![
                "store-and-forward".into(),
                "fixed, latency-best".into(),
                format!("fixed {SLICE_FIXED_PULSE} B"),
                "eager DMA".into(),
            ],
            series: bw,
            fmt: |v| format!("{v:.0}"),
            reference: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::{measure, platforms};
    use super::*;

    /// The figure of the real (deterministic) model: both sweeps, the paper's points and
    /// every policy's bars are drawn.
    #[test]
    fn the_models_figure_shows_sweeps_papers_points_and_policies() {
        let pls = platforms();
        let ms: Vec<Measured> = pls.iter().map(|p| measure(p.params, 16).unwrap()).collect();
        let runs: Vec<(&Platform, &Measured)> = pls.iter().zip(&ms).collect();
        let svg = super::super::super::plot::svg_of((1400, 1000), |a| draw(a, &runs)).unwrap();
        for t in [
            "Fig. 4",
            "Fig. 6",
            "model, receive 1280 B",
            "model, receive 384 B",
            "paper (figures its text states)",
            "paper 308 µs",
            "177 µs at 384/512, 512/512, 512/384",
            "Pentium-III paper",
            "fixed 1408 B",
            "latency (µs)",
            "bandwidth (MB/s)",
        ] {
            assert!(svg.contains(t), "{t} missing");
        }
        assert!(super::super::super::plot::svg_of((400, 300), |a| draw(a, &[])).is_err(), "no platform is an error");
    }
}
