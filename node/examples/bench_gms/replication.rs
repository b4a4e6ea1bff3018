// SPDX-License-Identifier: GPL-2.0-only
//! What replication costs a writer: node 0 of a 3-node cluster (its two lenders on another
//! thread) writes the same pages again and again through the client core (`gms::store`, the
//! policy `/dev/gms0` and `gmsd` run), a round with one copy of each page (`r = 1`) and a
//! round with two on distinct lenders (`r = 2`) in turn, each round within a fraction of a
//! second so both see the same phase of this VM. A write is done when all its replicas are
//! stored (the store puts a refused or unanswered one again). Rounds come in pairs (which
//! one goes first alternates); `replication_cost` is the median over the pairs of the
//! r = 2 round's time over the r = 1 round's.

use super::{median, pct};
use anyhow::{bail, Context};
use gms::prelude::*;
use gms::store::{Outcome, Phase, StoreConfig, StoreError};
use std::time::Instant;
use trapeze_node::gms::{page_pattern, Cluster, StoreIo, UserStore};
use trapeze_node::rpc::FRAME_BYTES;

/// The volumes' identities (apart from the other benchmarks'), by replica count.
const IDENTITY: [u64; 2] = [0x7265_706c_0001, 0x7265_706c_0002];

/// A write of page `page`.
struct W {
    page: u64,
    data: Vec<u8>,
}

impl StoreIo for W {
    fn key(&self) -> u64 {
        self.page
    }
    fn data(&self) -> &[u8] {
        &self.data
    }
}

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

/// One round: every page written through `store`; µs per page.
fn round(c: &mut Cluster, store: &mut UserStore<W>, data: &[Vec<u8>]) -> anyhow::Result<f64> {
    let pages = data.len();
    let mut next = 0;
    let mut done = Vec::new();
    let mut written = 0;
    let t = Instant::now();
    while written < pages {
        while next < pages {
            let w = W { page: next as u64, data: data[next].clone() };
            match store.write(c.ports[0].now(), next as u64, w) {
                Ok(_) => next += 1,
                Err((_, StoreError::Busy)) => break,
                Err((_, e)) => bail!("replication: page {next} refused: {e:?}"),
            }
        }
        c.store_step(0, store, &mut done);
        for (w, o, _) in done.drain(..) {
            match o {
                Outcome::Written { .. } => written += 1,
                o => bail!("replication: page {} ended {o:?}", w.page),
            }
        }
        if t.elapsed().as_secs() > 60 {
            bail!("replication: a round of {pages} pages did not finish in 60 s");
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / pages as f64)
}

/// A store of `pages` pages keeping `r` copies, on node 0, loaded.
fn store(c: &mut Cluster, r: u8, pages: u64) -> anyhow::Result<UserStore<W>> {
    let cfg = StoreConfig { replicas: r, page_bytes: FRAME_BYTES, ..StoreConfig::DEFAULT };
    let mut s = UserStore::new(cfg, IDENTITY[usize::from(r - 1)], 0, pages, &[1, 2])
        .map_err(|e| anyhow::anyhow!("replication: a store: {e:?}"))?;
    let t = Instant::now();
    let mut done = Vec::new();
    while s.phase().loading() {
        c.store_step(0, &mut s, &mut done);
        if t.elapsed().as_secs() > 30 {
            bail!("replication: the r = {r} volume did not load in 30 s");
        }
    }
    match s.phase() {
        Phase::Ready => Ok(s),
        p => bail!("replication: the r = {r} volume: {p:?}"),
    }
}

/// `pairs` pairs of rounds writing `pages` pages with r = 1 and r = 2 on a fresh cluster
/// whose lenders have `budget` pages each; then every page is read back and checked.
pub fn run(pages: u64, pairs: u32, budget: usize) -> anyhow::Result<Replication> {
    if 3 * pages > 2 * budget as u64 {
        bail!(
            "replication: {pages} pages in one and two copies do not fit lenders of {budget} pages with room to spare"
        );
    }
    let gms_cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::with_firmware(3, budget, gms_cfg, None, Default::default())?;
    c.ports[0].node.set_budget(0);
    let servers = c.spawn_servers_with(1, false)?;
    let data: Vec<Vec<u8>> = (0..pages).map(|n| page_pattern(PageId::new(IDENTITY[0], n), Version(0))).collect();
    let mut stores = [store(&mut c, 1, pages)?, store(&mut c, 2, pages)?];
    let mut out = Replication { pages, r1: Vec::new(), r2: Vec::new(), again: 0 };
    for pair in 0..pairs {
        let order: [u8; 2] = if pair % 2 == 0 { [1, 2] } else { [2, 1] };
        for r in order {
            let us = round(&mut c, &mut stores[usize::from(r - 1)], &data)?;
            if r == 1 {
                out.r1.push(us);
            } else {
                out.r2.push(us);
            }
        }
    }
    out.again = stores.iter().map(|s| s.stats.retries).sum();
    for s in &mut stores {
        let mut done = Vec::new();
        for n in 0..pages {
            let t = Instant::now();
            while s.read(c.ports[0].now(), n, W { page: n, data: Vec::new() }).is_err() {
                c.store_step(0, s, &mut done);
                if t.elapsed().as_secs() > 30 {
                    bail!("replication: page {n} could not be read");
                }
            }
        }
        let t = Instant::now();
        while done.len() < pages as usize {
            c.store_step(0, s, &mut done);
            if t.elapsed().as_secs() > 30 {
                bail!("replication: reading back did not finish in 30 s");
            }
        }
        for (w, o, bytes) in done {
            let ok = matches!(o, Outcome::Read { .. }) && bytes.as_deref() == Some(&data[w.page as usize][..]);
            if !ok {
                bail!("replication: page {}: {o:?}, wrong or no bytes", w.page);
            }
        }
    }
    c.rejoin(servers).context("replication: the lenders back")?;
    Ok(out)
}
