// SPDX-License-Identifier: GPL-2.0-only
//! The rows of Table 1: latency and bandwidth of one variant, payload and reply kind.

use super::*;

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    None,
    Solicited,
    Unsolicited,
    Copy,
}

pub(crate) fn reply_to(p: &mut Port, kind: Kind) -> anyhow::Result<ReplyTo<Frame>> {
    Ok(match kind {
        Kind::None => ReplyTo::None,
        Kind::Solicited => p.solicit()?,
        Kind::Unsolicited => ReplyTo::Unsolicited,
        Kind::Copy => ReplyTo::UnsolicitedCopy { frame: p.node.frames.alloc().context("no free frame")? },
    })
}

pub(crate) fn finish(p: &mut Port, o: Outcome<Frame>, len: u32) -> anyhow::Result<()> {
    let r = o.map_err(|e| anyhow::anyhow!("call failed: {e:?}"))?;
    match r.payload {
        Payload::Frame { frame, len: l } | Payload::Buffer { frame, len: l } => {
            anyhow::ensure!(l == len, "reply payload {l} bytes, expected {len}");
            p.done_with(frame);
        }
        Payload::None => anyhow::ensure!(len == 0, "reply without payload"),
    }
    Ok(())
}

pub(crate) struct Row {
    pub(crate) variant: &'static str,
    pub(crate) ways: u32,
    pub(crate) payload: u32,
    pub(crate) kind: &'static str,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) mb_s: f64,
    pub(crate) calls_s: f64,
    /// Latency (µs) at each of `CDF_Q`.
    pub(crate) cdf: Vec<f64>,
}

pub(crate) fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// The quantiles the JSON gives of each latency distribution (`cdf_us`): a compact
/// stand-in for the samples, enough to draw their CDF (`cargo xtask bench rpc --plot`).
pub(crate) const CDF_Q: [f64; 18] =
    [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0];

/// Latencies (ns) at each of `CDF_Q`, in µs to 0.01.
pub(crate) fn cdf(v: &mut [u64]) -> Vec<f64> {
    CDF_Q.iter().map(|&q| (pct(v, q) * 100.0).round() / 100.0).collect()
}

pub(crate) fn run_row(
    p: &mut Port,
    ways: u32,
    variant: &'static str,
    payload: u32,
    kind: Kind,
    a: &Args,
) -> anyhow::Result<Row> {
    let dst = 1;
    let mut lat = Vec::with_capacity(a.calls as usize);
    let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
        let rt = reply_to(p, kind)?;
        let r = if ways == 2 {
            p.rpc.call::<Get2>(now, &mut p.node, dst, &req(payload), rt, mode)
        } else {
            p.rpc.call::<Get3>(now, &mut p.node, dst, &req(payload), rt, mode)
        };
        r.map_err(|e| anyhow::anyhow!("call: {e:?}"))
    };
    let deferred = variant == "defer";
    // Latency: one call at a time.
    for _ in 0..a.calls {
        let t0 = Instant::now();
        if variant == "wait" {
            let id = issue(p, Mode::Wait, p.now_at(t0))?;
            let o = loop {
                p.poll();
                if let Some(o) = p.rpc.take_outcome(id) {
                    break o;
                }
            };
            lat.push(t0.elapsed().as_nanos() as u64);
            finish(p, o, payload)?;
        } else {
            let before = p.node.service.done;
            p.node.service.busy_once = deferred;
            let id = issue(p, Mode::NonBlocking, p.now_at(t0))?;
            p.rpc.push_continuation(id, cont, 0).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            while p.node.service.done == before {
                p.poll();
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let n = a.bw_calls;
    let secs = bandwidth(p, variant, payload, n, a.window, &issue, &mut || {})?;
    let kind_name = match kind {
        Kind::None => "none",
        Kind::Solicited => "solicited",
        Kind::Unsolicited => "unsolicited",
        Kind::Copy => "unsolicited+copy",
    };
    Ok(Row {
        variant,
        ways,
        payload,
        kind: kind_name,
        p50: pct(&mut lat, 0.5),
        p99: pct(&mut lat, 0.99),
        cdf: cdf(&mut lat),
        mb_s: n as f64 * payload as f64 / secs / 1e6,
        calls_s: n as f64 / secs,
    })
}

/// Seconds for `n` calls made by `issue`: one at a time (`wait`, each reply checked to
/// carry `payload` bytes), or with `window` nonblocking calls outstanding, finished by
/// continuations (`cont`, `defer`).
pub(crate) fn bandwidth(
    p: &mut Port,
    variant: &str,
    payload: u32,
    n: u32,
    window: u32,
    issue: &dyn Fn(&mut Port, Mode, u64) -> anyhow::Result<CallId>,
    also: &mut dyn FnMut(),
) -> anyhow::Result<f64> {
    let deferred = variant == "defer";
    let t0 = Instant::now();
    if variant == "wait" {
        for _ in 0..n {
            let id = issue(p, Mode::Wait, p.now())?;
            let o = loop {
                p.poll();
                also();
                if let Some(o) = p.rpc.take_outcome(id) {
                    break o;
                }
            };
            finish(p, o, payload)?;
        }
    } else {
        let start_done = p.node.service.done;
        let mut issued = 0;
        while p.node.service.done - start_done < n as u64 {
            // One clock reading per burst of calls (their timeouts need no finer time),
            // none while the window is full.
            let mut now = None;
            while issued < n && issued as u64 - (p.node.service.done - start_done) < window as u64 {
                p.node.service.busy_once = deferred;
                let t = *now.get_or_insert_with(|| p.now());
                let id = issue(p, Mode::NonBlocking, t)?;
                p.rpc.push_continuation(id, cont, 0).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                issued += 1;
            }
            p.poll();
            also();
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}
