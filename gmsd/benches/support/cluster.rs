// SPDX-License-Identifier: GPL-2.0-only
//! Three `gmsd` over UDP on 127.0.0.1 holding a data set of 8 KiB pages with one copy, for
//! the benches that read it back (`scale`, `baselines`; each includes this file by
//! `#[path]`, beside `tests/support/daemons.rs` as `daemons`). Node 0 lends nothing
//! (`--budget-mb 1`): a client's puts through it spread the set over nodes 1 and 2, and
//! its gets go over the network. Optionally node 0 is pinned to CPU 0, the lenders to CPU 1.

#![allow(dead_code)] // each includer uses its own part

use super::daemons::{held, over_udp, put_pages, stat, udp_ports, Daemons};
use anyhow::{bail, Context};
use gms::prelude::{PageId, Version};
use gmsd::client::Client;
use gmsd::proto::{GetOutcome, PutOutcome, PAGE_BYTES};
use std::time::{Duration, Instant};
use trapeze_node::gms::page_pattern;

/// The volume the benches' pages live in.
pub const VOL: u64 = 21;
pub const NODES: u16 = 3;
/// Rounds of puts of the pages not yet stored before the fill gives up.
const FILL_ROUNDS: usize = 5;

/// Page `page`'s bytes: its pattern at version 0.
pub fn content(page: u64) -> Vec<u8> {
    page_pattern(PageId::new(VOL, page), Version(0))
}

/// Three daemons holding `0..pages` of [`VOL`], and a client connected to node 0.
pub struct Cluster {
    pub daemons: Daemons,
    pub client: Client,
    pub pages: u64,
}

impl Cluster {
    pub fn start(tag: &str, mib: u64, spin: u64, pin: bool) -> anyhow::Result<Cluster> {
        let spin = spin.to_string();
        let lend = (mib / 2 + mib / 8 + 4).to_string();
        // Node 0 is the directory node of a third of the pages: its directory is sized
        // for half the set, as it would be by default for a node lending that much.
        let dir0 = (mib / 2 + 64).to_string();
        // Node 0 writes the whole set as one volume: it must be that large.
        let pages = (mib << 20) / PAGE_BYTES as u64;
        let volume = pages.to_string();
        let ports = udp_ports(NODES)?;
        let mut daemons = Daemons::new(tag, NODES, move |n| {
            let mut cmd = match n {
                0 => over_udp(&ports, n, &["--budget-mb", "1", "--directory-mb", &dir0, "--volume-pages", &volume]),
                _ => over_udp(&ports, n, &["--budget-mb", &lend]),
            };
            // A bench measures reads, not failure detection: a peer starved of CPU for a
            // second on a busy machine must not be declared failed (its pages would miss).
            cmd.args(["--replicas", "1", "--idle-spin-us", &spin, "--dead-after-ms", "5000"]);
            cmd
        })?;
        for n in 0..NODES {
            daemons.spawn(n).context("spawning gmsd")?;
            if pin {
                daemons.pin(n, usize::from(n != 0)).context("pinning gmsd")?;
            }
        }
        let client = daemons
            .wait_all_up(Duration::from_secs(20))
            .map_err(anyhow::Error::msg)
            .and_then(|()| Client::connect(&daemons.sock(0)).context("connecting to gmsd 0"));
        match client {
            Ok(client) => Ok(Cluster { daemons, client, pages }),
            Err(e) => {
                daemons.print_logs();
                Err(e)
            }
        }
    }

    /// Put every page, again for those a target refused or a timeout left unknown.
    pub fn fill(&mut self) -> anyhow::Result<()> {
        let mut todo: Vec<u64> = (0..self.pages).collect();
        for _ in 0..FILL_ROUNDS {
            let mut again = Vec::new();
            let mut why = std::collections::BTreeMap::new();
            for (&i, r) in todo.iter().zip(put_pages(&mut self.client, VOL, &todo, content)?) {
                if !matches!(r, PutOutcome::Stored { .. }) {
                    *why.entry(format!("{r:?}")).or_insert(0u64) += 1;
                    again.push(i);
                }
            }
            if again.is_empty() {
                return Ok(());
            }
            eprintln!(
                "scale: {} of {} pages put again ({why:?}); lenders hold {:?}",
                again.len(),
                todo.len(),
                self.held()
            );
            todo = again;
        }
        bail!("{} of {} pages could not be stored in {FILL_ROUNDS} rounds", todo.len(), self.pages)
    }

    /// The pages each lender holds.
    pub fn held(&self) -> Vec<u64> {
        (1..NODES).map(|n| stat(&self.daemons.sock(n)).as_ref().map_or(0, held)).collect()
    }

    /// One timed network-only get of a random page, checked: its latency in µs.
    pub fn get(&mut self, r: &mut fastrand::Rng) -> anyhow::Result<f64> {
        let i = r.u64(..self.pages);
        let p = PageId::new(VOL, i);
        let t = Instant::now();
        let g = self.client.get_many(&[p], true)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        match g.first() {
            Some(GetOutcome::Hit { data, .. }) if *data == content(i) => Ok(us),
            Some(GetOutcome::Hit { .. }) => bail!("page {i} of {}: wrong bytes", self.pages),
            Some(GetOutcome::Miss(why)) => bail!("page {i} of {}: missed: {why}", self.pages),
            None => bail!("page {i} of {}: no answer", self.pages),
        }
    }
}
