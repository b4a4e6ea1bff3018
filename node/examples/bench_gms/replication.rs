// SPDX-License-Identifier: GPL-2.0-only
//! What replication costs a writer: node 0 of a 3-node cluster (its two lenders on another
//! thread) writes the same pages again and again, a round with one copy of each page
//! (`r = 1`) and a round with two on distinct lenders (`r = 2`, [`ReplicaWrite`]) in
//! turn, each round within a fraction of a second so both see the same phase of this VM.
//! A write is done when all its replicas are stored; a replica refused or unanswered goes
//! again. Rounds come in pairs (which one goes first alternates); `replication_cost` is
//! the median over the pairs of the r = 2 round's time over the r = 1 round's.

use super::{median, pct};
use anyhow::{bail, Context};
use gms::prelude::*;
use std::collections::VecDeque;
use std::time::Instant;
use trapeze_node::gms::{page_pattern, replica, Cluster, Got, ReplicaWrite};

/// The pages' space (apart from the other benchmarks').
const SPACE: u64 = 6;
/// Putpages in flight at most (as the load of the read benchmarks).
const WINDOW: usize = 32;

/// Write time per page (µs) of each round, by replica count.
pub struct Replication {
    pub pages: u64,
    pub r1: Vec<f64>,
    pub r2: Vec<f64>,
    /// Replica puts that went again (refused or unanswered).
    pub again: u64,
}

impl Replication {
    /// Per pair, the r = 2 round's time over the r = 1 round's.
    pub fn pair_ratios(&self) -> Vec<f64> {
        self.r1.iter().zip(&self.r2).map(|(a, b)| b / a).collect()
    }
    /// The median of [`Self::pair_ratios`].
    pub fn cost(&self) -> f64 {
        median(self.pair_ratios())
    }
    pub fn p50(&self, r: u8) -> f64 {
        pct(&mut if r == 1 { self.r1.clone() } else { self.r2.clone() }, 0.5)
    }
}

/// One round: every page written as `r` replicas at `version` (a replica put again at a
/// newer one, below the next round's); µs per page and the puts that went again.
fn round(c: &mut Cluster, data: &[Vec<u8>], r: u8, version: u64) -> anyhow::Result<(f64, u64)> {
    let pages = data.len();
    let mut writes: Vec<ReplicaWrite> = (0..pages).map(|_| ReplicaWrite::new(r, Version(version))).collect();
    let mut todo: VecDeque<(usize, u8)> = (0..pages).flat_map(|n| (0..r).map(move |k| (n, k))).collect();
    let (mut stored, mut again, mut newer) = (0, 0u64, version);
    let t = Instant::now();
    while stored < pages * usize::from(r) {
        while c.ports[0].in_flight() < WINDOW {
            let Some((n, k)) = todo.pop_front() else { break };
            let page = PageId::new(SPACE, n as u64);
            let mut next = || {
                newer += 1;
                Version(newer)
            };
            if c.ports[0].put_replica(&mut writes[n], page, k, &data[n], &mut next).is_err() {
                todo.push_front((n, k));
                break;
            }
        }
        c.poll();
        for (p, v, res) in c.ports[0].put_log.drain(..) {
            let (n, k) = (p.page as usize, ((p.space ^ SPACE) >> 60) as u8);
            if writes[n].done(k, v, &res) {
                if matches!(res, PutResult::Stored { .. }) {
                    stored += 1;
                } else {
                    again += 1;
                    todo.push_back((n, k));
                }
            }
        }
        if t.elapsed().as_secs() > 60 {
            bail!("replication: a round of {pages} pages with r = {r} did not finish in 60 s");
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / pages as f64;
    Ok((us, again))
}

/// `pairs` pairs of rounds writing `pages` pages with r = 1 and r = 2 on a fresh cluster
/// whose lenders have `budget` pages each; then every page's replica 0 is read back and
/// checked.
pub fn run(pages: u64, pairs: u32, budget: usize) -> anyhow::Result<Replication> {
    if 2 * pages > budget as u64 {
        bail!("replication: {pages} pages in two copies do not fit lenders of {budget} pages with room to spare");
    }
    let gms_cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::with_firmware(3, budget, gms_cfg, None, Default::default())?;
    c.ports[0].node.set_budget(0);
    let servers = c.spawn_servers_with(1, false)?;
    let data: Vec<Vec<u8>> = (0..pages).map(|n| page_pattern(PageId::new(SPACE, n), Version(0))).collect();
    let mut out = Replication { pages, r1: Vec::new(), r2: Vec::new(), again: 0 };
    // Versions: each round above every version the rounds before could have used.
    let mut version = 1u64 << 32;
    for pair in 0..pairs {
        let order: [u8; 2] = if pair % 2 == 0 { [1, 2] } else { [2, 1] };
        for r in order {
            let (us, again) = round(&mut c, &data, r, version)?;
            version += 1 << 32;
            out.again += again;
            if r == 1 {
                out.r1.push(us);
            } else {
                out.r2.push(us);
            }
        }
    }
    let want = version - (1 << 32);
    for (n, d) in data.iter().enumerate() {
        match c.get_wait(0, replica(PageId::new(SPACE, n as u64), 0)).context("replication: read back")? {
            Got::Hit { data: got, version: v, .. } if got == *d && v.0 >= want => {}
            Got::Hit { version: v, .. } => bail!("replication: page {n}: wrong bytes or old version {v:?}"),
            Got::Miss => bail!("replication: page {n} missed"),
        }
    }
    c.rejoin(servers)?;
    Ok(out)
}
