// SPDX-License-Identifier: GPL-2.0-only
//! 3-way against 2-way latency, taking turns in stretches.

use super::*;

/// Blocking 8 KB solicited call latencies (ns), 2-way (node 0 → 1) and 3-way (node 0 →
/// directory 1 → holder 2 → node 0), on two setups alive side by side that take turns on
/// the client and server threads in `blocks` pairs of stretches of `block_calls` calls
/// (order alternating), as [`BwSeries`] does and for the same reason.
pub(crate) struct WaysSeries {
    pub(crate) two: Vec<u64>,
    pub(crate) three: Vec<u64>,
    /// Per pair of stretches, 3-way p50 / 2-way p50, sorted.
    pub(crate) pair_ratios: Vec<f64>,
}

impl WaysSeries {
    pub(crate) fn measure(blocks: u32, block_calls: u32) -> anyhow::Result<Self> {
        let (mut two, two_side) = rpc_setup(2)?;
        let (mut three, three_side) = rpc_setup(3)?;
        let mut s = WaysSeries { two: Vec::new(), three: Vec::new(), pair_ratios: Vec::new() };
        SharedServer::serve(vec![two_side, three_side], |server| {
            for (i, p) in [&mut two, &mut three].into_iter().enumerate() {
                server.switch_to(i);
                wait_8k_latencies(p, i as u32 + 2, block_calls, || {})?;
            }
            for i in 0..blocks {
                let mut p50 = [0.0; 2];
                for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                    server.switch_to(side);
                    let (p, all) = if side == 0 { (&mut two, &mut s.two) } else { (&mut three, &mut s.three) };
                    let mut lat = wait_8k_latencies(p, side as u32 + 2, block_calls, || {})?;
                    all.extend_from_slice(&lat);
                    p50[side] = pct(&mut lat, 0.5);
                }
                s.pair_ratios.push(p50[1] / p50[0]);
            }
            Ok(())
        })?;
        s.pair_ratios.sort_by(f64::total_cmp);
        Ok(s)
    }

    /// p50 of all 3-way calls / p50 of all 2-way calls: the headline.
    pub(crate) fn ratio(&mut self) -> f64 {
        pct(&mut self.three, 0.5) / pct(&mut self.two, 0.5)
    }
}
