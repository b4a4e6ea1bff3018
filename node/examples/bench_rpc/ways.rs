// SPDX-License-Identifier: GPL-2.0-only
//! Two setups measured against each other, taking turns in stretches: 3-way against
//! 2-way latency, and (in `mac`) the link MAC on against off.

use super::*;

/// Blocking 8 KB solicited call latencies (ns) of two setups alive side by side that take
/// turns on the client and server threads in `blocks` pairs of stretches of `block_calls`
/// calls (order alternating), as [`BwSeries`] does and for the same reason.
pub(crate) struct PairSeries {
    pub(crate) first: Vec<u64>,
    pub(crate) second: Vec<u64>,
    /// Per pair of stretches, second's p50 / first's p50, sorted.
    pub(crate) pair_ratios: Vec<f64>,
}

/// 2-way (node 0 → 1) as `first` and 3-way (node 0 → directory 1 → holder 2 → node 0)
/// as `second`.
pub(crate) type WaysSeries = PairSeries;

impl PairSeries {
    /// 3-way against 2-way.
    pub(crate) fn ways(blocks: u32, block_calls: u32) -> anyhow::Result<Self> {
        Self::measure([rpc_setup(2)?, rpc_setup(3)?], [2, 3], blocks, block_calls)
    }

    /// `setups[i]` making calls of `ways[i]` hops.
    pub(crate) fn measure(
        setups: [(Port, ServerSide); 2],
        ways: [u32; 2],
        blocks: u32,
        block_calls: u32,
    ) -> anyhow::Result<Self> {
        let [(mut a, a_side), (mut b, b_side)] = setups;
        let mut s = PairSeries { first: Vec::new(), second: Vec::new(), pair_ratios: Vec::new() };
        SharedServer::serve(vec![a_side, b_side], |server| {
            for (i, p) in [&mut a, &mut b].into_iter().enumerate() {
                server.switch_to(i);
                wait_8k_latencies(p, ways[i], block_calls, || {})?;
            }
            for i in 0..blocks {
                let mut p50 = [0.0; 2];
                for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                    server.switch_to(side);
                    let (p, all) = if side == 0 { (&mut a, &mut s.first) } else { (&mut b, &mut s.second) };
                    let mut lat = wait_8k_latencies(p, ways[side], block_calls, || {})?;
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

    /// p50 of all of second's calls / p50 of all of first's: the headline.
    pub(crate) fn ratio(&mut self) -> f64 {
        pct(&mut self.second, 0.5) / pct(&mut self.first, 0.5)
    }
}
