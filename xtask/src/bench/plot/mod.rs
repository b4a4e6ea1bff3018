// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench … --plot DIR`: the benches' figures as SVG (plotters' SVG backend),
//! each stamped with the command and date that made it; the shared drawing helpers.

pub mod gms;
pub mod nic;
pub mod rpc;
pub mod vm;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The drawing area every figure function draws on.
pub type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Font family of every label (the SVG names it; the viewer picks the face).
pub const FONT: &str = "sans-serif";

/// Series colours, distinguishable in print and for the common colour-vision deficiencies
/// (Okabe–Ito).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

/// Any plotters error as anyhow's (plotters' error types borrow the backend's).
pub fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the figure: {e:?}")
}

/// Draw a `size` figure with `draw` and write it to `dir/name.svg`, with a comment giving
/// the command that made it and the date; returns the path.
pub fn write_svg(
    dir: &Path,
    name: &str,
    size: (u32, u32),
    draw: impl FnOnce(&Area) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.svg"));
    let text = stamp(&svg, &format!("made by `{}` on {}", command_line(), today()));
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("figure written to {}", path.display());
    Ok(path)
}

/// The command as a user types it: `cargo xtask` and xtask's own arguments.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// `svg` with `note` as its `<desc>` (the first child of the root element, which viewers
/// show as the image's description; unlike a comment it may contain `--`).
fn stamp(svg: &str, note: &str) -> String {
    let escaped = note.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    match svg.find("<svg").and_then(|i| svg[i..].find('>').map(|j| i + j + 1)) {
        Some(at) => format!("{}\n<desc>{escaped}</desc>{}", &svg[..at], &svg[at..]),
        None => svg.to_string(),
    }
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_date(secs / 86_400);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_date(days: u64) -> (u64, u64, u64) {
    // Count in 400-year eras from 0000-03-01, so the leap day ends each year.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

/// Write the JSON lines a figure was drawn from beside it (`dir/name.json`).
pub fn write_json(dir: &Path, name: &str, lines: &[Value]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// Parse a bench's stdout: one JSON object per non-empty line.
pub fn parse_lines(text: &str) -> anyhow::Result<Vec<Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("the bench printed a line that is not JSON: {l}")))
        .collect()
}

/// A number from a JSON object, or an error naming the key.
pub fn num(v: &Value, key: &str) -> anyhow::Result<f64> {
    v[key].as_f64().with_context(|| format!("no number {key:?} in {v}"))
}

/// A list of numbers from a JSON value, or an error naming what it is.
pub fn nums(v: &Value, what: &str) -> anyhow::Result<Vec<f64>> {
    v.as_array()
        .with_context(|| format!("no list {what}"))?
        .iter()
        .map(|x| x.as_f64().with_context(|| format!("{what}: {x} is not a number")))
        .collect()
}

/// A grouped bar chart: one group per category along x, one bar per series in each.
pub struct Bars<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    pub groups: Vec<String>,
    /// Series name and its value in each group (`None`: no bar).
    pub series: Vec<(String, Vec<Option<f64>>)>,
    /// How a bar's value is printed above it.
    pub fmt: fn(f64) -> String,
    /// A horizontal reference line across the chart: its label and value.
    pub reference: Option<(String, f64)>,
}

/// Draw `b` on `area`.
pub fn bars(area: &Area, b: &Bars) -> anyhow::Result<()> {
    let top = b
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .chain(b.reference.as_ref().map(|r| r.1))
        .fold(0.0f64, f64::max);
    anyhow::ensure!(top.is_finite() && top > 0.0, "{}: nothing to draw (largest value {top})", b.title);
    let n = b.groups.len();
    let groups = b.groups.clone();
    let mut chart = ChartBuilder::on(area)
        .caption(b.title, (FONT, 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        // Headroom above the bars for the value labels and the legend (upper left).
        .build_cartesian_2d(Groups(n), 0.0..top * (1.12 + 0.1 * (b.series.len() + 1) as f64))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| groups.get(x.floor() as usize).cloned().unwrap_or_default())
        .y_label_formatter(&|y| tick(*y))
        .light_line_style(BLACK.mix(0.04))
        .x_label_style((FONT, 16))
        .y_label_style((FONT, 15))
        .y_desc(b.y_desc)
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    let k = b.series.len().max(1) as f64;
    let width = 0.8 / k;
    let label = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (s, (name, values)) in b.series.iter().enumerate() {
        let colour = PALETTE[s % PALETTE.len()];
        let x0 = |g: usize| g as f64 + 0.1 + s as f64 * width;
        let rects: Vec<_> = values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| Rectangle::new([(x0(g), 0.0), (x0(g) + width * 0.92, v)], colour.filled())))
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        let texts: Vec<_> = values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| Text::new((b.fmt)(v), (x0(g) + width * 0.46, v), label.clone())))
            .collect();
        chart.draw_series(texts).map_err(err)?;
    }
    if let Some((name, y)) = &b.reference {
        let style = ShapeStyle { color: BLACK.to_rgba(), filled: false, stroke_width: 2 };
        chart
            .draw_series(DashedLineSeries::new([(0.0, *y), (n as f64, *y)], 8, 5, style))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], style));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// The x axis of a grouped bar chart: `0.0..n`, group `g` spanning `g..g + 1`, one tick
/// (and label) at each group's centre.
struct Groups(usize);

impl Ranged for Groups {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        limit.0 + ((limit.1 - limit.0) as f64 * v / self.0.max(1) as f64).round() as i32
    }
    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, _: H) -> Vec<f64> {
        (0..self.0).map(|g| g as f64 + 0.5).collect()
    }
    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

/// A legend of line series drawn in its own strip (below the charts, where it hides no
/// data): entries left to right, wrapping, each a short line in its colour and its name.
pub fn legend_strip(area: &Area, entries: &[(String, RGBColor)]) -> anyhow::Result<()> {
    let (w, _) = area.dim_in_pixel();
    let size = 16;
    let (mut x, mut y) = (40i32, 10i32);
    for (name, colour) in entries {
        // An estimate of the text's width: the SVG viewer picks the face.
        let width = 34 + (name.chars().count() as f64 * f64::from(size) * 0.55) as i32 + 30;
        if x + width > w as i32 && x > 40 {
            (x, y) = (40, y + 26);
        }
        area.draw(&PathElement::new(vec![(x, y + 8), (x + 26, y + 8)], colour.stroke_width(3))).map_err(err)?;
        area.draw(&Circle::new((x + 13, y + 8), 3, colour.filled())).map_err(err)?;
        area.draw(&Text::new(name.clone(), (x + 34, y), (FONT, size))).map_err(err)?;
        x += width;
    }
    Ok(())
}

/// An axis tick's label: whole numbers without decimals.
pub fn tick(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The legend box of a chart at `pos`.
pub fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    pos: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .label_font((FONT, 15))
        .draw()
        .map_err(err)
}

/// Draws one bar chart on a panel of a hand-made figure and returns the SVG (tests).
#[cfg(test)]
pub fn svg_of(size: (u32, u32), draw: impl FnOnce(&Area) -> anyhow::Result<()>) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_is_the_root_elements_description() {
        let s = stamp("<svg width=\"1\">\n<rect/>\n</svg>\n", "made by `cargo xtask bench dma --plot d` <now>");
        assert_eq!(
            s,
            "<svg width=\"1\">\n<desc>made by `cargo xtask bench dma --plot d` &lt;now&gt;</desc>\n<rect/>\n</svg>\n"
        );
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        // 2000-02-29 (a leap day of a century divisible by 400) and 2026-11-24.
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_781), (2026, 11, 24));
    }

    #[test]
    fn bars_draw_every_group_series_and_value() {
        let svg = svg_of((600, 400), |a| {
            bars(
                a,
                &Bars {
                    title: "Two groups",
                    y_desc: "MB/s",
                    groups: vec!["left".into(), "right".into()],
                    series: vec![
                        ("first".into(), vec![Some(10.0), None]),
                        ("second".into(), vec![Some(20.0), Some(5.5)]),
                    ],
                    fmt: |v| format!("{v:.1}"),
                    reference: Some(("disk".into(), 12.0)),
                },
            )
        })
        .unwrap();
        for text in ["Two groups", "MB/s", "left", "right", "first", "second", "disk", "10.0", "20.0", "5.5"] {
            assert!(svg.contains(&format!("\n{text}\n")), "{text} missing from the SVG");
        }
        let nothing = svg_of((300, 200), |a| {
            bars(
                a,
                &Bars {
                    title: "empty",
                    y_desc: "",
                    groups: vec!["g".into()],
                    series: vec![("s".into(), vec![None])],
                    fmt: |v| format!("{v}"),
                    reference: None,
                },
            )
        });
        assert!(nothing.unwrap_err().to_string().contains("nothing to draw"));
    }

    #[test]
    fn bench_output_lines_parse_or_name_the_bad_line() {
        let v = parse_lines("{\"a\":1}\n\n{\"b\":[1,2.5]}\n").unwrap();
        assert_eq!((num(&v[0], "a").unwrap(), nums(&v[1]["b"], "b").unwrap()), (1.0, vec![1.0, 2.5]));
        assert!(parse_lines("table header\n").unwrap_err().to_string().contains("table header"));
        assert!(num(&v[0], "zz").unwrap_err().to_string().contains("zz"));
    }
}
