// SPDX-License-Identifier: GPL-2.0-only
//! Target `firmware_send`: the firmware taking send-ring entries of a hostile host, in
//! the timing model (`trapeze_firmware::sim`), with the oracle "never DMA outside a
//! posted frame or an armed IPT entry".
//!
//! Two nodes. The input writes raw send-ring entries on node 0 — any lengths, segment
//! counts, segments (inside host memory or anywhere), peers and payload tokens (forged,
//! or real ones of node 1 with their key bits flipped or not) — bypassing the modelled
//! host's checks; node 1 arms IPT entries first. The model then runs until quiet. Every
//! transfer each NIC's host-bus engine started is checked against what its host offered:
//! a host read must lie inside one segment of a send entry posted on that node, a host
//! write inside a frame attached to one of its receive slots or armed in its IPT. The
//! engine's own bus check (which refuses addresses outside host memory) is not relied on:
//! the log records what the firmware asked for.

use arbitrary::{Arbitrary, Unstructured};
use trapeze_firmware::iface::entry::{state, Ring, Segment, Slot};
use trapeze_firmware::iface::layout::{Policy, MAX_SEGMENTS, RECV_RING_ENTRIES, SEND_RING_ENTRIES};
use trapeze_firmware::sim::{Cluster, Faults, NodeConfig, Params, TransferKind, HOST_DMA_BASE, US};

const HOST_MEM: u64 = 192 << 10;
/// Model time a script may take (µs); a quiet cluster stops sooner.
const LIMIT_US: u64 = 2000;

/// A fast, coarse platform: 1 µs ticks, 1 GB/s everywhere, so an iteration takes
/// hundreds of ticks rather than the calibrated platforms' hundred thousand.
const FAST: Params = Params {
    host_read_mb_s: 1000,
    host_write_mb_s: 1000,
    link_mb_s: 1000,
    host_read_setup_ps: US,
    host_write_setup_ps: US,
    link_setup_ps: US,
    link_latency_ps: US,
    fw_poll_ps: US,
    host_send_ps: 0,
    host_recv_ps: 0,
    tick_ps: US,
};

#[derive(Arbitrary, Debug)]
struct Seg {
    /// Inside node 0's host memory (offset modulo its size) unless `raw`.
    raw: bool,
    addr: u64,
    len: u32,
}

#[derive(Arbitrary, Debug)]
enum Token {
    None,
    /// IPT entry `index % armed` of node 1, its token xor `flip`.
    Armed {
        index: u8,
        flip: u64,
    },
    Forged(u64),
}

#[derive(Arbitrary, Debug)]
struct Entry {
    ctrl_len: u32,
    payload_len: u32,
    /// Lengths within reach of the segments unless `raw_len`.
    raw_len: bool,
    peer: u8,
    token: Token,
    nseg: u32,
    segs: Vec<Seg>,
    ctrl: [u8; 8],
}

#[derive(Arbitrary, Debug)]
struct Script {
    policy: u8,
    send_pulse: u16,
    recv_pulse: u16,
    mtu: u16,
    /// IPT entries node 1 arms: frame length and segment count.
    arms: Vec<(u16, u8)>,
    entries: Vec<Entry>,
}

/// Host-memory ranges a node offered for DMA, `[start, end)` as DMA addresses.
#[derive(Default)]
struct Offered {
    reads: Vec<(u64, u64)>,
    writes: Vec<(u64, u64)>,
}

fn inside(ranges: &[(u64, u64)], addr: u64, len: u32) -> bool {
    len == 0 || ranges.iter().any(|&(s, e)| addr >= s && addr.checked_add(len as u64).is_some_and(|end| end <= e))
}

fn range(addr: u64, len: u32) -> (u64, u64) {
    (addr, addr.saturating_add(len as u64))
}

pub fn fuzz(data: &[u8]) {
    let Ok(s) = Script::arbitrary(&mut Unstructured::new(data)) else { return };
    let policy = match s.policy % 3 {
        0 => Policy::Eager,
        1 => Policy::FixedPulse,
        _ => Policy::StoreAndForward,
    };
    let mtu = 64 + (s.mtu as u32 % 4033);
    let cfg = NodeConfig {
        policy,
        send_pulse: 4 + (s.send_pulse as u32 % 4096),
        recv_pulse: 4 + (s.recv_pulse as u32 % 4096),
        mtu,
        notify: 0,
    };
    let mut c = Cluster::with_host_mem(FAST, 2, cfg, Faults::default(), HOST_MEM as usize);
    let mut offered = [Offered::default(), Offered::default()];
    for (n, o) in offered.iter_mut().enumerate() {
        for i in 0..RECV_RING_ENTRIES {
            let slot = Slot::new(c.nic_mem(n), Ring::Recv, i);
            for k in 0..slot.nseg().min(MAX_SEGMENTS) {
                let seg = slot.segment(k);
                o.writes.push(range(seg.addr, seg.len));
            }
        }
    }
    let mut tokens = Vec::new();
    for &(len, frames) in s.arms.iter().take(8) {
        let len = 1 + len as u32 % (2 * mtu);
        if let Some((token, addr)) = c.host_mut(1).arm(len, frames as u32) {
            tokens.push(token.0);
            offered[1].writes.push(range(addr, len));
        }
    }
    for (i, e) in s.entries.iter().take(SEND_RING_ENTRIES as usize).enumerate() {
        let slot = Slot::new(c.nic_mem(0), Ring::Send, i as u32);
        let segs: Vec<Segment> = e
            .segs
            .iter()
            .take(MAX_SEGMENTS as usize)
            .map(|g| {
                let addr = if g.raw { g.addr } else { HOST_DMA_BASE + g.addr % HOST_MEM };
                let len = if g.raw { g.len } else { g.len % (2 * mtu) };
                Segment { addr, len }
            })
            .collect();
        let have: u64 = segs.iter().map(|g| g.len as u64).sum();
        let (nseg, payload_len, ctrl_len) = if e.raw_len {
            (e.nseg, e.payload_len, e.ctrl_len)
        } else {
            (segs.len() as u32, e.payload_len % (have as u32).saturating_add(1), e.ctrl_len % 129)
        };
        for (k, g) in segs.iter().enumerate() {
            slot.set_segment(k as u32, *g);
        }
        for g in segs.iter().take(nseg.min(MAX_SEGMENTS) as usize) {
            offered[0].reads.push(range(g.addr, g.len));
        }
        let token = match e.token {
            Token::None => 0,
            Token::Armed { index, flip } if !tokens.is_empty() => tokens[index as usize % tokens.len()] ^ flip,
            Token::Armed { flip, .. } => flip,
            Token::Forged(t) => t,
        };
        slot.set_ctrl_len(ctrl_len);
        slot.set_payload_len(payload_len);
        slot.set_peer(e.peer as u32 % 3);
        slot.set_token(token);
        slot.set_nseg(nseg);
        slot.set_flags(0);
        slot.write_ctrl(&e.ctrl);
        slot.set_state_release(state::READY | (i as u32 + 1) << state::SEQ_SHIFT);
    }
    // Let the firmware see the entries, then run until nothing moves.
    c.run_until(20 * US, |_| false);
    c.run_until(LIMIT_US * US, |c| c.is_quiet());
    for (n, o) in offered.iter().enumerate() {
        for t in c.transfer_log(n) {
            match t.kind {
                TransferKind::HostRead => assert!(
                    inside(&o.reads, t.host_addr, t.len),
                    "node {n}: host read {:#x}+{} outside every posted send segment",
                    t.host_addr,
                    t.len
                ),
                TransferKind::HostWrite => assert!(
                    inside(&o.writes, t.host_addr, t.len),
                    "node {n}: host write {:#x}+{} outside every receive frame and armed IPT entry",
                    t.host_addr,
                    t.len
                ),
                TransferKind::LinkTx => {}
            }
        }
    }
}
