// SPDX-License-Identifier: GPL-2.0-only
//! The link MAC's cost: 2-way 8 KB solicited calls with the cluster key on against off, taking turns in stretches.

use super::*;
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::UdpBackend;

/// Which link the MAC's cost is measured on.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum MacLink {
    /// Two NICs on UDP loopback: the deployed configuration (`mac_cost`).
    Udp,
    /// The in-process switch (`mac_cost_memory`): one address space, where a MAC
    /// protects nothing, reported so that its whole cost shows.
    Memory,
}

/// A 2-way setup (client node 0, server node 1) on `link`, under `key` or without one.
pub(crate) fn mac_setup(link: MacLink, key: Option<&ClusterKey>) -> anyhow::Result<(Port, ServerSide)> {
    let mut links = match link {
        MacLink::Memory => {
            let sw = InProcSwitch::new();
            (0..2).map(|id| Link::new(id, Box::new(sw.port(id)), FaultConfig::default())).collect::<Vec<_>>()
        }
        MacLink::Udp => {
            let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let mut b = [UdpBackend::bind(any)?, UdpBackend::bind(any)?];
            let addrs = [b[0].local_addr(), b[1].local_addr()];
            for u in b.iter_mut() {
                for (id, at) in addrs.iter().enumerate() {
                    u.add_peer(id as u16, *at);
                }
            }
            let [b0, b1] = b;
            vec![Link::new(0, Box::new(b0), FaultConfig::default()), Link::new(1, Box::new(b1), FaultConfig::default())]
        }
    };
    for l in links.iter_mut() {
        l.set_key(key);
    }
    let mut links = links.into_iter();
    let client = node_on(links.next().context("client link")?, 0, false)?;
    let server = node_on(links.next().context("server link")?, 1, false)?;
    Ok((client, ServerSide::Rpc(vec![server])))
}

/// Blocking 2-way 8 KB solicited call latencies (ns) without (`first`) and with
/// (`second`) a cluster key, taking turns as [`PairSeries`] does.
pub(crate) type MacSeries = PairSeries;

/// The link MAC's cost on `link`.
pub(crate) fn mac_series(link: MacLink, blocks: u32, block_calls: u32) -> anyhow::Result<MacSeries> {
    let key = ClusterKey::random()?;
    PairSeries::measure([mac_setup(link, None)?, mac_setup(link, Some(&key))?], [2, 2], blocks, block_calls)
}

impl PairSeries {
    /// The JSON object of a MAC series' figures.
    pub(crate) fn mac_json(&mut self, blocks: u32, block_calls: u32) -> serde_json::Value {
        json!({ "on_p50_us": pct(&mut self.second, 0.5), "off_p50_us": pct(&mut self.first, 0.5),
                "pairs": { "median": median(&self.pair_ratios), "p10": quantile(&self.pair_ratios, 0.1),
                           "p90": quantile(&self.pair_ratios, 0.9), "pairs": blocks, "calls_each": block_calls } })
    }

    /// The line printed for people, of a MAC series.
    pub(crate) fn mac_print(&mut self, link: MacLink, blocks: u32, block_calls: u32) {
        let what = match link {
            MacLink::Udp => "mac_cost, UDP loopback",
            MacLink::Memory => "mac_cost_memory, in-process link",
        };
        println!(
            "link MAC on / off ({what}; 2-way wait 8 KB solicited, {blocks} pairs of interleaved stretches of {block_calls} calls): {:.2} (p50 {:.2} / {:.2} µs; per pair median {:.2}, p10 {:.2}, p90 {:.2})",
            self.ratio(),
            pct(&mut self.second, 0.5),
            pct(&mut self.first, 0.5),
            median(&self.pair_ratios),
            quantile(&self.pair_ratios, 0.1),
            quantile(&self.pair_ratios, 0.9),
        );
    }
}
