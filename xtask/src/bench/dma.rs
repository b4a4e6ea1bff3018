// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench dma`: the DMA-policy table of the cut-through and Slice papers,
//! reproduced by running the real firmware in the timing model.
//!
//! Everything here is model time, so the figures are deterministic and independent of
//! the machine's load. Latency is one message of 128 B control + 8 KB payload from the
//! sending host's call to the receiving host having read it; streaming bandwidth is the
//! receiver's delivered payload rate for back-to-back 8 KB messages. The baseline is
//! store-and-forward, measured in the same run with the same parameters.

mod figure;
use serde_json::{json, Value};
use trapeze_firmware::iface::layout::Policy;
use trapeze_firmware::sim::measure::{cfg, one_way_us, stream};
use trapeze_firmware::sim::{Params, US};

#[derive(clap::Args)]
pub struct DmaArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Re-derive the platform constants from the papers' figures and show the fit.
    #[arg(long)]
    calibrate: bool,
    /// Also print the pulse-threshold sweeps (the papers' Figures 4 and 6).
    #[arg(long)]
    sweep: bool,
    /// Messages per streaming run.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(4..=4096))]
    stream_count: u32,
    /// Also draw the figure (latency against pulse threshold beside the paper's points,
    /// latency and streaming bandwidth per policy) into DIR/dma.svg.
    #[arg(long, value_name = "DIR", conflicts_with = "calibrate")]
    plot: Option<std::path::PathBuf>,
}

impl Default for DmaArgs {
    fn default() -> Self {
        DmaArgs { json: false, calibrate: false, sweep: false, stream_count: 64, plot: None }
    }
}

const PAYLOAD: u32 = 8192;
pub(super) const EAGER_THRESHOLDS: [u32; 5] = [256, 384, 512, 768, 1024];
pub(super) const FIXED_PULSES: [u32; 8] = [512, 768, 1024, 1280, 1408, 1536, 2048, 4096];
/// The Slice paper's fixed pipeline moved 1408-byte transfers.
pub(super) const SLICE_FIXED_PULSE: u32 = 1408;

/// A platform: model parameters plus the paper's figures to print beside ours.
pub(super) struct Platform {
    pub(super) key: &'static str,
    pub(super) name: &'static str,
    pub(super) params: Params,
    pub(super) paper: Paper,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Paper {
    pub(super) saf_us: Option<f64>,
    pub(super) fixed_us: Option<f64>,
    pub(super) eager_us: Option<f64>,
    pub(super) ctrl_us: Option<f64>,
    pub(super) saf_mb_s: Option<f64>,
    pub(super) fixed_mb_s: Option<f64>,
    pub(super) eager_mb_s: Option<f64>,
    pub(super) source: &'static str,
}

pub(super) fn platforms() -> [Platform; 2] {
    [
        Platform {
            key: "alpha500",
            name: "AlphaStation 500 + LANai 4.1 (cut-through paper, Fig. 4/6)",
            params: Params::alpha500(),
            paper: Paper {
                saf_us: Some(308.0),
                fixed_us: Some(195.0),
                eager_us: Some(177.0),
                ctrl_us: Some(27.0),
                source: "Trapeze cut-through delivery, sections 4.1-4.5",
                ..Paper::default()
            },
        },
        Platform {
            key: "piii450",
            name: "Pentium-III 450 + LANai-4 (Slice paper, Table 1)",
            params: Params::piii450(),
            paper: Paper {
                saf_us: Some(217.0),
                fixed_us: Some(124.0),
                eager_us: Some(112.0),
                saf_mb_s: Some(110.0),
                fixed_mb_s: Some(77.0),
                eager_mb_s: Some(110.0),
                source: "Trapeze/Slice adaptive pipelining, Table 1",
                ..Paper::default()
            },
        },
    ]
}

/// Everything measured on one platform.
pub(super) struct Measured {
    pub(super) ctrl_us: f64,
    pub(super) saf_us: f64,
    pub(super) fixed_best: (f64, u32, u32),
    pub(super) eager_best: (f64, u32, u32),
    pub(super) fixed_sweep: Vec<(u32, u32, f64)>,
    pub(super) eager_sweep: Vec<(u32, u32, f64)>,
    pub(super) stream_saf: f64,
    pub(super) stream_eager: f64,
    pub(super) stream_fixed: f64,
    pub(super) stream_fixed_slice: f64,
    pub(super) eager_write_growth: (f64, f64),
}

fn lat(p: Params, policy: Policy, s: u32, r: u32, payload: u32) -> anyhow::Result<f64> {
    one_way_us(p, cfg(policy, s, r), payload)
        .ok_or_else(|| anyhow::anyhow!("model lost or damaged a message ({policy:?} {s}/{r})"))
}

fn best(sweep: &[(u32, u32, f64)]) -> (f64, u32, u32) {
    sweep.iter().fold((f64::MAX, 0, 0), |b, &(s, r, us)| if us < b.0 { (us, s, r) } else { b })
}

pub(super) fn measure(p: Params, count: u32) -> anyhow::Result<Measured> {
    let ctrl_us = lat(p, Policy::Eager, 512, 512, 0)?;
    let saf_us = lat(p, Policy::StoreAndForward, PAYLOAD, PAYLOAD, PAYLOAD)?;
    let mut fixed_sweep = Vec::new();
    for &s in &FIXED_PULSES {
        for &r in &FIXED_PULSES {
            fixed_sweep.push((s, r, lat(p, Policy::FixedPulse, s, r, PAYLOAD)?));
        }
    }
    let mut eager_sweep = Vec::new();
    for &s in &EAGER_THRESHOLDS {
        for &r in &EAGER_THRESHOLDS {
            eager_sweep.push((s, r, lat(p, Policy::Eager, s, r, PAYLOAD)?));
        }
    }
    let fixed_best = best(&fixed_sweep);
    let eager_best = best(&eager_sweep);
    let st = |policy, s, r| {
        stream(p, cfg(policy, s, r), PAYLOAD, count as usize)
            .ok_or_else(|| anyhow::anyhow!("model lost or damaged a streamed message ({policy:?})"))
    };
    let saf = st(Policy::StoreAndForward, PAYLOAD, PAYLOAD)?;
    let eager = st(Policy::Eager, eager_best.1, eager_best.2)?;
    let fixed = st(Policy::FixedPulse, fixed_best.1, fixed_best.2)?;
    let fixed_slice = st(Policy::FixedPulse, SLICE_FIXED_PULSE, SLICE_FIXED_PULSE)?;
    Ok(Measured {
        ctrl_us,
        saf_us,
        fixed_best,
        eager_best,
        fixed_sweep,
        eager_sweep,
        stream_saf: saf.mb_s,
        stream_eager: eager.mb_s,
        stream_fixed: fixed.mb_s,
        stream_fixed_slice: fixed_slice.mb_s,
        eager_write_growth: (eager.first_quarter_write_bytes, eager.last_quarter_write_bytes),
    })
}

fn params_json(p: &Params) -> Value {
    let us = |ps: u64| ps as f64 / US as f64;
    json!({
        "host_read_mb_s": p.host_read_mb_s, "host_write_mb_s": p.host_write_mb_s,
        "link_mb_s": p.link_mb_s,
        "host_read_setup_us": us(p.host_read_setup_ps), "host_write_setup_us": us(p.host_write_setup_ps),
        "link_setup_us": us(p.link_setup_ps), "link_latency_us": us(p.link_latency_ps),
        "fw_poll_us": us(p.fw_poll_ps), "host_send_us": us(p.host_send_ps),
        "host_recv_us": us(p.host_recv_ps), "tick_us": us(p.tick_ps),
    })
}

fn platform_json(pl: &Platform, m: &Measured) -> Value {
    json!({
        "platform": pl.key,
        "store_and_forward_us": round1(m.saf_us),
        "fixed_pulse_best_us": round1(m.fixed_best.0),
        "fixed_pulse_best_bytes": [m.fixed_best.1, m.fixed_best.2],
        "eager_us": round1(m.eager_best.0),
        "eager_thresholds_bytes": [m.eager_best.1, m.eager_best.2],
        "ctrl_only_us": round1(m.ctrl_us),
        "eager_over_saf": round3(m.eager_best.0 / m.saf_us),
        "fixed_over_saf": round3(m.fixed_best.0 / m.saf_us),
        "stream_mb_s": {
            "store_and_forward": round1(m.stream_saf),
            "fixed_pulse": round1(m.stream_fixed),
            "fixed_pulse_1408": round1(m.stream_fixed_slice),
            "eager": round1(m.stream_eager),
        },
        "stream_over_saf": {
            "fixed_pulse": round3(m.stream_fixed / m.stream_saf),
            "fixed_pulse_1408": round3(m.stream_fixed_slice / m.stream_saf),
            "eager": round3(m.stream_eager / m.stream_saf),
        },
        "eager_stream_mean_write_bytes": {
            "first_quarter": round1(m.eager_write_growth.0),
            "last_quarter": round1(m.eager_write_growth.1),
        },
        "paper": {
            "source": pl.paper.source,
            "store_and_forward_us": pl.paper.saf_us, "fixed_pulse_us": pl.paper.fixed_us,
            "eager_us": pl.paper.eager_us, "ctrl_only_us": pl.paper.ctrl_us,
            "stream_mb_s": { "store_and_forward": pl.paper.saf_mb_s,
                "fixed_pulse": pl.paper.fixed_mb_s, "eager": pl.paper.eager_mb_s },
        },
        "params": params_json(&pl.params),
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn opt(x: Option<f64>, unit: &str) -> String {
    x.map_or("—".into(), |v| format!("{v:.0} {unit}"))
}

fn print_table(pl: &Platform, m: &Measured, sweep: bool) {
    println!("\n{}", pl.name);
    println!("{:<52} {:>12} {:>12}", "one-way 128 B + 8 KB (host to host)", "model", "paper");
    let row = |label: String, v: f64, unit: &str, paper: Option<f64>| {
        println!("{label:<52} {:>12} {:>12}", format!("{v:.1} {unit}"), opt(paper, unit));
    };
    row("control message only".into(), m.ctrl_us, "µs", pl.paper.ctrl_us);
    row("store-and-forward".into(), m.saf_us, "µs", pl.paper.saf_us);
    row(
        format!("fixed pulses (best: send {} / recv {} B)", m.fixed_best.1, m.fixed_best.2),
        m.fixed_best.0,
        "µs",
        pl.paper.fixed_us,
    );
    row(
        format!("eager DMA (best: send {} / recv {} B)", m.eager_best.1, m.eager_best.2),
        m.eager_best.0,
        "µs",
        pl.paper.eager_us,
    );
    let pr = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.3}", a / b),
        _ => "—".into(),
    };
    println!(
        "{:<52} {:>12} {:>12}",
        "eager / store-and-forward",
        format!("{:.3}", m.eager_best.0 / m.saf_us),
        pr(pl.paper.eager_us, pl.paper.saf_us)
    );
    println!("{:<52} {:>12} {:>12}", "stream of 8 KB payloads (receiver)", "model", "paper");
    row("store-and-forward".into(), m.stream_saf, "MB/s", pl.paper.saf_mb_s);
    row(format!("fixed pulses (latency-best {} B)", m.fixed_best.2), m.stream_fixed, "MB/s", None);
    row(
        format!("fixed pulses ({SLICE_FIXED_PULSE} B, as in Slice)"),
        m.stream_fixed_slice,
        "MB/s",
        pl.paper.fixed_mb_s,
    );
    row("eager DMA (adaptive pipelining)".into(), m.stream_eager, "MB/s", pl.paper.eager_mb_s);
    println!(
        "{:<52} {:>12} {:>12}",
        "eager / store-and-forward",
        format!("{:.3}", m.stream_eager / m.stream_saf),
        pr(pl.paper.eager_mb_s, pl.paper.saf_mb_s)
    );
    println!(
        "{:<52} {:>12} {:>12}",
        format!("fixed {SLICE_FIXED_PULSE} B / store-and-forward"),
        format!("{:.3}", m.stream_fixed_slice / m.stream_saf),
        pr(pl.paper.fixed_mb_s, pl.paper.saf_mb_s)
    );
    println!(
        "{:<52} {:>12}",
        "eager: mean host-write bytes, first → last quarter",
        format!("{:.0} → {:.0}", m.eager_write_growth.0, m.eager_write_growth.1)
    );
    if sweep {
        print_sweep(
            "fixed pulses: latency (µs), rows = send pulse, columns = receive pulse",
            &FIXED_PULSES,
            &m.fixed_sweep,
        );
        print_sweep(
            "eager DMA: latency (µs), rows = send threshold, columns = receive threshold",
            &EAGER_THRESHOLDS,
            &m.eager_sweep,
        );
    }
}

fn print_sweep(title: &str, axis: &[u32], sweep: &[(u32, u32, f64)]) {
    println!("\n{title}");
    print!("{:>8}", "");
    for r in axis {
        print!("{r:>8}");
    }
    println!();
    for s in axis {
        print!("{s:>8}");
        for r in axis {
            let v = sweep.iter().find(|&&(a, b, _)| a == *s && b == *r).map_or(f64::NAN, |x| x.2);
            print!("{v:>8.1}");
        }
        println!();
    }
}

pub fn run(a: DmaArgs) -> anyhow::Result<()> {
    if a.calibrate {
        return calibrate();
    }
    let pls = platforms();
    let mut results = Vec::new();
    for pl in &pls {
        results.push(measure(pl.params, a.stream_count)?);
    }
    if let Some(dir) = &a.plot {
        let runs: Vec<(&Platform, &Measured)> = pls.iter().zip(&results).collect();
        figure::write(dir, &runs)?;
    }
    if a.json {
        // The first platform (the AlphaStation, as the cut-through paper) is the headline;
        // every platform is also listed in full.
        let mut head = platform_json(&pls[0], &results[0]);
        let all: Vec<Value> = pls.iter().zip(&results).map(|(p, m)| platform_json(p, m)).collect();
        head["platforms"] = Value::Array(all);
        println!("{}", serde_json::to_string(&head)?);
        return Ok(());
    }
    println!("Trapeze firmware DMA policies in the timing model (deterministic model time;");
    println!("baseline: store-and-forward measured in the same run with the same parameters)");
    for (pl, m) in pls.iter().zip(&results) {
        print_table(pl, m, a.sweep);
    }
    Ok(())
}

/// Re-derive the platform constants from the papers and print the fit.
fn calibrate() -> anyhow::Result<()> {
    let half_us = |x: u64| x * US / 2;
    // AlphaStation: bandwidths from the paper; fit (read/link setup, write setup) to the
    // eager and best fixed-pulse latencies, with host software cost making the control
    // message 27 µs. Store-and-forward and streaming are left as predictions.
    println!("AlphaStation 500: fit setup costs to eager 177 µs, fixed-best 195 µs; host cost → ctrl 27 µs");
    let mut best_fit: Option<(f64, Params, f64, f64)> = None;
    for rl in 1..=12u64 {
        for w in 1..=16u64 {
            let mut p = Params::alpha500().with_host_ps(0);
            p.host_read_setup_ps = half_us(rl);
            p.link_setup_ps = half_us(rl);
            p.host_write_setup_ps = half_us(w);
            let ctrl0 = lat(p, Policy::Eager, 512, 512, 0)?;
            let host = (27.0 - ctrl0).max(0.0);
            let eager = best(
                &EAGER_THRESHOLDS
                    .iter()
                    .map(|&t| (t, t, lat(p, Policy::Eager, t, t, PAYLOAD).unwrap_or(f64::MAX)))
                    .collect::<Vec<_>>(),
            )
            .0 + host;
            let fixed = best(
                &FIXED_PULSES
                    .iter()
                    .map(|&t| (t, t, lat(p, Policy::FixedPulse, t, t, PAYLOAD).unwrap_or(f64::MAX)))
                    .collect::<Vec<_>>(),
            )
            .0 + host;
            let err = ((eager - 177.0) / 177.0).powi(2) + ((fixed - 195.0) / 195.0).powi(2);
            if best_fit.as_ref().is_none_or(|b| err < b.0) {
                let p = p.with_host_ps((host * US as f64).round() as u64);
                best_fit = Some((err, p, eager, fixed));
            }
        }
    }
    if let Some((err, p, eager, fixed)) = best_fit {
        println!(
            "  best: {}  → eager {eager:.1} µs, fixed {fixed:.1} µs, rms error {:.1}%",
            params_json(&p),
            (err / 2.0).sqrt() * 100.0
        );
        println!("  baked Params::alpha500(): {}", params_json(&Params::alpha500()));
    }
    // Pentium-III: fit bus bandwidth, one per-transfer setup cost and host cost to all
    // six figures of the Slice paper's Table 1.
    println!("Pentium-III 450: fit bus MB/s, setup and host cost to Slice Table 1 (217/124/112 µs, 110/77/110 MB/s)");
    let mut best_fit: Option<(f64, Params, [f64; 6])> = None;
    for bus in (100..=140u64).step_by(5) {
        for o in 2..=20u64 {
            let mut p = Params::piii450().with_host_ps(0);
            p.host_read_mb_s = bus;
            p.host_write_mb_s = bus;
            p.host_read_setup_ps = half_us(o);
            p.host_write_setup_ps = half_us(o);
            p.link_setup_ps = half_us(o);
            let saf = lat(p, Policy::StoreAndForward, PAYLOAD, PAYLOAD, PAYLOAD)?;
            let fixed = lat(p, Policy::FixedPulse, SLICE_FIXED_PULSE, SLICE_FIXED_PULSE, PAYLOAD)?;
            let (eager, es, er) = best(
                &EAGER_THRESHOLDS
                    .iter()
                    .map(|&t| (t, t, lat(p, Policy::Eager, t, t, PAYLOAD).unwrap_or(f64::MAX)))
                    .collect::<Vec<_>>(),
            );
            let host = ((217.0 - saf) + (124.0 - fixed) + (112.0 - eager)) / 3.0;
            let host = host.max(0.0);
            let bw = |policy, s, r| stream(p, cfg(policy, s, r), PAYLOAD, 32).map_or(0.0, |x| x.mb_s);
            let v = [
                saf + host,
                fixed + host,
                eager + host,
                bw(Policy::StoreAndForward, PAYLOAD, PAYLOAD),
                bw(Policy::FixedPulse, SLICE_FIXED_PULSE, SLICE_FIXED_PULSE),
                bw(Policy::Eager, es, er),
            ];
            let target = [217.0, 124.0, 112.0, 110.0, 77.0, 110.0];
            let err: f64 = v.iter().zip(target).map(|(a, b)| ((a - b) / b).powi(2)).sum();
            if best_fit.as_ref().is_none_or(|b| err < b.0) {
                best_fit = Some((err, p.with_host_ps((host * US as f64).round() as u64), v));
            }
        }
    }
    if let Some((err, p, v)) = best_fit {
        println!("  best: {}", params_json(&p));
        println!(
            "  → {:.1} / {:.1} / {:.1} µs, {:.1} / {:.1} / {:.1} MB/s, rms error {:.1}%",
            v[0],
            v[1],
            v[2],
            v[3],
            v[4],
            v[5],
            (err / 6.0).sqrt() * 100.0
        );
        println!("  baked Params::piii450(): {}", params_json(&Params::piii450()));
    }
    Ok(())
}
