// SPDX-License-Identifier: GPL-2.0-only
//! A deterministic timing model that runs the real firmware in simulated time.
//!
//! Several NICs, each with its host, sit on a crossbar switch. Time advances in fixed
//! ticks ([`Params::tick_ps`]); each tick every DMA engine moves the bytes its bandwidth
//! allows (after a per-transfer setup time during which it moves nothing), and every
//! [`Params::fw_poll_ps`] each NIC's firmware runs one pass of its main loop against
//! those engines. Bytes really move — host memory, NIC memory and the link carry the
//! data, and the link computes and checks the CRC trailer — so the model checks the data
//! path as well as timing. Links are wormhole-routed: a packet holds its receiver's
//! link-in engine from first to last byte, and a sender whose receiver has no buffer
//! posted stalls (back-pressure) instead of losing data. Optional faults (packet drop,
//! bit corruption) come from a seeded generator, so every run is reproducible.
//!
//! The hosts are minimal: they post send entries, keep frames attached to receive
//! slots, arm IPT entries, and poll the receive ring, charging fixed software costs
//! ([`Params::host_send_ps`], [`Params::host_recv_ps`]) like the papers' hosts.

mod engines;
mod host;
pub mod measure;
mod mem;

pub use engines::{LinkStats, TransferKind, TransferLog};
pub use host::{Delivered, Host, OutMsg, SentRecord, HOST_DMA_BASE};
pub use mem::SharedMem;

use crate::fw::Firmware;
use crate::iface::layout::{EndpointConfig, Policy};
use engines::{NicEngines, Wire};
use std::vec::Vec;

/// 1 µs in model time units (picoseconds).
pub const US: u64 = 1_000_000;

/// Bandwidths (MB/s = bytes/µs) and fixed costs (ps) of the modelled platform.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Host memory → NIC (PCI DMA read).
    pub host_read_mb_s: u64,
    /// NIC → host memory (PCI DMA write).
    pub host_write_mb_s: u64,
    /// Link, each direction.
    pub link_mb_s: u64,
    /// Per host-bus read (host → NIC): bus acquisition and DMA setup before the first
    /// byte moves.
    pub host_read_setup_ps: u64,
    /// Per host-bus write (NIC → host).
    pub host_write_setup_ps: u64,
    /// Per link-out transfer.
    pub link_setup_ps: u64,
    /// First byte out of the sender's link engine to first byte into the receiver's.
    pub link_latency_ps: u64,
    /// One pass of the firmware main loop.
    pub fw_poll_ps: u64,
    /// Host software to build a send entry and ring the doorbell.
    pub host_send_ps: u64,
    /// Host software to notice a received message and read it.
    pub host_recv_ps: u64,
    /// Model resolution.
    pub tick_ps: u64,
}

impl Params {
    /// DEC AlphaStation 500 + LANai 4.1 Myrinet, from the cut-through paper: PCI DMA read
    /// ≈ 128 MB/s, write ≈ half (the 21171 bridge), link 1.28 Gb/s. The fixed costs are
    /// calibrated by `cargo xtask bench dma --calibrate` against the paper's control
    /// message (27 µs), eager (177 µs) and best fixed-pulse (195 µs) latencies; the
    /// store-and-forward and streaming figures are then predictions.
    pub const fn alpha500() -> Self {
        Params {
            host_read_mb_s: 128,
            host_write_mb_s: 64,
            link_mb_s: 160,
            host_read_setup_ps: 3 * US,
            host_write_setup_ps: 5 * US / 2,
            link_setup_ps: 3 * US,
            link_latency_ps: US / 2,
            fw_poll_ps: US / 2,
            host_send_ps: 11_200_000,
            host_recv_ps: 11_200_000,
            tick_ps: US / 10,
        }
    }

    /// 450 MHz Pentium-III + LANai-4 Myrinet, the Slice paper's Table 1 platform. The
    /// bus bandwidth (same both ways), one per-transfer cost for every engine and the host
    /// software cost are fitted by `cargo xtask bench dma --calibrate` to all six figures
    /// of that table (the fit puts the host cost at zero: the model's NIC-side costs
    /// already account for the paper's latencies).
    pub const fn piii450() -> Self {
        Params {
            host_read_mb_s: 115,
            host_write_mb_s: 115,
            link_mb_s: 160,
            host_read_setup_ps: 4 * US,
            host_write_setup_ps: 4 * US,
            link_setup_ps: 4 * US,
            link_latency_ps: US / 2,
            fw_poll_ps: US / 2,
            host_send_ps: 0,
            host_recv_ps: 0,
            tick_ps: US / 10,
        }
    }

    /// Split a total host software cost evenly between the send and receive sides.
    pub const fn with_host_ps(mut self, total_ps: u64) -> Self {
        self.host_send_ps = total_ps / 2;
        self.host_recv_ps = total_ps - total_ps / 2;
        self
    }
}

/// Per-node firmware configuration written into the control block before boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub policy: Policy,
    pub send_pulse: u32,
    pub recv_pulse: u32,
    pub mtu: u32,
    pub notify: u32,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig { policy: Policy::Eager, send_pulse: 512, recv_pulse: 512, mtu: 8192, notify: 0 }
    }
}

/// Seeded link faults, applied per packet by the switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Probability (per million packets) that the switch drops a packet.
    pub drop_ppm: u32,
    /// Probability (per million packets) that one bit of a packet is flipped in transit.
    pub corrupt_ppm: u32,
    pub seed: u64,
}

/// A small deterministic generator (xorshift64*), enough for fault injection and keys.
#[derive(Clone, Copy, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// True with probability `ppm` per million.
    pub fn chance(&mut self, ppm: u32) -> bool {
        ppm > 0 && (self.next_u64() % 1_000_000) < ppm as u64
    }
}

struct Node {
    mem: SharedMem,
    fw: Firmware<SharedMem>,
    eng: NicEngines,
    host: Host,
}

/// NICs, hosts and a crossbar, advancing together in simulated time.
pub struct Cluster {
    params: Params,
    now_ps: u64,
    next_poll_ps: u64,
    nodes: Vec<Node>,
    wire: Wire,
}

impl Cluster {
    /// `n` nodes with ids 0..n, all configured with `cfg`, host memory `host_mem_bytes`.
    pub fn new(params: Params, n: usize, cfg: NodeConfig, faults: Faults) -> Self {
        Self::with_host_mem(params, n, cfg, faults, 2 << 20)
    }

    pub fn with_host_mem(params: Params, n: usize, cfg: NodeConfig, faults: Faults, host_mem_bytes: usize) -> Self {
        let nodes = (0..n)
            .map(|id| {
                let mem = SharedMem::new();
                EndpointConfig {
                    node_id: id as u16,
                    policy: cfg.policy,
                    send_pulse: cfg.send_pulse,
                    recv_pulse: cfg.recv_pulse,
                    mtu: cfg.mtu,
                    notify: cfg.notify,
                }
                .store(&mem);
                let host = Host::new(id as u16, mem.clone(), host_mem_bytes, cfg.mtu, params, faults.seed ^ id as u64);
                let fw = Firmware::new(mem.clone(), 0);
                Node { fw, eng: NicEngines::new(params), host, mem }
            })
            .collect();
        Cluster { params, now_ps: 0, next_poll_ps: 0, nodes, wire: Wire::new(n, faults) }
    }

    pub fn now_ps(&self) -> u64 {
        self.now_ps
    }
    pub fn params(&self) -> &Params {
        &self.params
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    pub fn host(&self, node: usize) -> &Host {
        &self.nodes[node].host
    }
    pub fn host_mut(&mut self, node: usize) -> &mut Host {
        &mut self.nodes[node].host
    }
    pub fn firmware(&self, node: usize) -> &Firmware<SharedMem> {
        &self.nodes[node].fw
    }
    pub fn nic_mem(&self, node: usize) -> &SharedMem {
        &self.nodes[node].mem
    }
    /// Every transfer each engine of `node` performed, in start order.
    pub fn transfer_log(&self, node: usize) -> &[TransferLog] {
        self.nodes[node].eng.log()
    }
    pub fn link_stats(&self) -> LinkStats {
        self.wire.stats()
    }

    /// Feed `bytes` into `node`'s link in as a packet from outside the cluster (a broken
    /// or hostile peer), `chunk` bytes per tick once a buffer is posted, ended by a good
    /// trailer (`trailer_ok`) or a bad one. Packets injected go in order, after a packet
    /// a modelled sender is in the middle of.
    pub fn inject(&mut self, node: usize, bytes: &[u8], chunk: u32, trailer_ok: bool) {
        self.wire.inject(node, bytes, chunk, trailer_ok);
    }

    /// Advance one tick.
    pub fn step(&mut self) {
        let now = self.now_ps;
        for n in self.nodes.iter_mut() {
            n.host.tick(now);
        }
        for (i, n) in self.nodes.iter_mut().enumerate() {
            n.eng.tick_host_dma(now, &n.mem, n.host.memory_mut());
            let _ = i;
        }
        self.wire.tick(now, &mut self.nodes.iter_mut().map(|n| (&mut n.eng, &n.mem)).collect::<Vec<_>>());
        if now >= self.next_poll_ps {
            for n in self.nodes.iter_mut() {
                n.eng.set_now(now);
                n.fw.poll(&mut n.eng);
            }
            self.next_poll_ps = now + self.params.fw_poll_ps;
        }
        self.now_ps = now + self.params.tick_ps;
    }

    /// Step until `done` holds or `limit_ps` of model time passed; returns whether `done` held.
    pub fn run_until(&mut self, limit_ps: u64, mut done: impl FnMut(&Cluster) -> bool) -> bool {
        let end = self.now_ps.saturating_add(limit_ps);
        while self.now_ps < end {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }

    /// True when no host has work queued and no NIC or wire holds a packet.
    pub fn is_quiet(&self) -> bool {
        self.wire.is_quiet() && self.nodes.iter().all(|n| n.host.is_quiet() && n.fw.is_quiet() && n.eng.is_idle())
    }
}
