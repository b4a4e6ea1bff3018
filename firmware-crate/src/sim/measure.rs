// SPDX-License-Identifier: GPL-2.0-only
//! Standard measurements on the model, shared by `cargo xtask bench dma` and the tests.

use super::{Cluster, Faults, NodeConfig, OutMsg, Params, TransferKind, US};
use crate::iface::layout::Policy;
use std::vec;
use std::vec::Vec;

/// One-way latency of a single message (128-byte control message + `payload` bytes)
/// from host send call to the receiving host having read it, in µs. `None` if it was
/// not delivered intact within 100 ms of model time.
pub fn one_way_us(params: Params, cfg: NodeConfig, payload: u32) -> Option<f64> {
    let mut c = Cluster::new(params, 2, cfg, Faults::default());
    let data: Vec<u8> = (0..payload).map(|i| (i * 31 + 7) as u8).collect();
    c.host_mut(0).post(0, OutMsg { peer: 1, ctrl: vec![0xA5; 128], payload: data.clone(), ..Default::default() });
    c.run_until(100_000 * US, |c| !c.host(1).delivered.is_empty());
    let d = c.host(1).delivered.first()?;
    (d.payload == data).then(|| d.at_ps as f64 / US as f64)
}

/// Result of a back-to-back stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stream {
    /// Payload bandwidth at the receiving host over the steady part of the stream.
    pub mb_s: f64,
    /// Mean payload bytes per host-write transfer at the receiver, first and last
    /// quarter of the stream (adaptive pipelining shows as growth).
    pub first_quarter_write_bytes: f64,
    pub last_quarter_write_bytes: f64,
}

/// Stream `count` messages of 128 + `payload` bytes from node 0 to node 1, all posted
/// at time 0, and measure the receiver's delivered bandwidth. `None` if any message was
/// lost or damaged.
pub fn stream(params: Params, cfg: NodeConfig, payload: u32, count: usize) -> Option<Stream> {
    let mut c = Cluster::with_host_mem(params, 2, cfg, Faults::default(), 8 << 20);
    let msgs: Vec<Vec<u8>> =
        (0..count).map(|k| (0..payload).map(|i| (i as usize * 13 + k * 101) as u8).collect()).collect();
    for (k, m) in msgs.iter().enumerate() {
        let ctrl = (k as u32).to_le_bytes().repeat(32);
        c.host_mut(0).post(0, OutMsg { peer: 1, ctrl, payload: m.clone(), ..Default::default() });
    }
    c.run_until(10_000_000 * US, |c| c.host(1).delivered.len() == count);
    let got = &c.host(1).delivered;
    if got.len() != count || got.iter().zip(&msgs).any(|(d, m)| &d.payload != m) {
        return None;
    }
    // Skip the first message (pipeline fill): bandwidth between first and last arrival.
    let span = (got[count - 1].at_ps - got[0].at_ps) as f64 / US as f64;
    let mb_s = (count as f64 - 1.0) * payload as f64 / span;
    let writes: Vec<u32> =
        c.transfer_log(1).iter().filter(|t| t.kind == TransferKind::HostWrite).map(|t| t.len).collect();
    let q = (writes.len() / 4).max(1);
    let mean = |w: &[u32]| w.iter().map(|&x| x as f64).sum::<f64>() / w.len().max(1) as f64;
    Some(Stream {
        mb_s,
        first_quarter_write_bytes: mean(&writes[..q.min(writes.len())]),
        last_quarter_write_bytes: mean(&writes[writes.len().saturating_sub(q)..]),
    })
}

/// Config with `policy` and the same threshold on both sides.
pub fn cfg(policy: Policy, send_pulse: u32, recv_pulse: u32) -> NodeConfig {
    NodeConfig { policy, send_pulse, recv_pulse, ..NodeConfig::default() }
}
