// SPDX-License-Identifier: GPL-2.0-only
//! Target `firmware_send`: the firmware taking send-ring entries of a hostile host, in
//! the timing model (`trapeze_firmware::sim`), with the oracle "never DMA outside a
//! posted frame, an armed IPT entry or an exported answer-table entry".
//!
//! Two nodes. The input writes raw send-ring entries on node 0 — any lengths, segment
//! counts, segments (inside host memory or anywhere), peers, payload tokens (forged, or
//! real ones of node 1 with their key bits flipped or not) and send flags, answerable
//! requests among them whose control message ends with a descriptor naming an entry of
//! node 1's answer table (its key right or not, the payload token one node 0 armed or
//! not) — bypassing the modelled host's checks; both nodes arm IPT entries first, and
//! node 1 exports, retracts, reuses and half-changes answer-table entries while the
//! requests and answers are in flight ([`crate::answers`]). The model then runs until
//! quiet. Every transfer each NIC's host-bus engine started is checked against what its
//! host offered: a host read on node 0 must lie inside one segment of a send entry posted
//! there, a host read on node 1 (answers: its host posts nothing) inside a frame its host
//! exported, a host write inside a frame attached to one of the node's receive slots or
//! armed in its IPT. An answer leaves only whole, from its entry's live export (the
//! sequence unchanged since it was looked up) and with that export's bytes, and node 0
//! receives only such answers. The engine's own bus check (which refuses addresses
//! outside host memory) is not relied on: the log records what the firmware asked for.

use crate::answers::{check_host_writes, key_of, offer_writes, Change, Exports, SLOTS};
use arbitrary::{Arbitrary, Unstructured};
use trapeze_firmware::iface::answer::{send_flags, Descriptor};
use trapeze_firmware::iface::entry::{rx_flags, state, Ring, Segment, Slot};
use trapeze_firmware::iface::layout::{Policy, MAX_SEGMENTS, SEND_RING_ENTRIES};
use trapeze_firmware::sim::{Cluster, Faults, NodeConfig, Params, TransferKind, HOST_DMA_BASE, US};

const HOST_MEM: u64 = 256 << 10;

/// A fast, coarse platform: 1 µs ticks, 1 GB/s everywhere, so an iteration takes
/// hundreds of ticks rather than the calibrated platforms' hundred thousand.
pub(crate) const FAST: Params = Params {
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

#[derive(Arbitrary, Clone, Debug)]
pub(crate) enum Token {
    None,
    /// IPT entry `index % armed` of the node, its token xor `flip` if given.
    Armed {
        index: u8,
        flip: Option<u64>,
    },
    Forged(u64),
}

/// An answerable request's descriptor, appended to the control message.
#[derive(Arbitrary, Clone, Debug)]
pub(crate) struct Desc {
    /// Entry `slot % SLOTS` of node 1's table, or any index if `raw`.
    pub(crate) slot: u32,
    pub(crate) raw: bool,
    /// The key: one of the harness's (`answers::key_of`), xor `flip` if given.
    pub(crate) key: u8,
    pub(crate) flip: Option<u64>,
    /// IPT entry `index % armed` of node 0 (its token xor `flip`), or this token.
    pub(crate) token: Token,
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
    /// Send flags (any bits); a descriptor sets `ANSWERABLE` too.
    flags: u32,
    desc: Option<Desc>,
}

#[derive(Arbitrary, Debug)]
struct Script {
    policy: u8,
    send_pulse: u16,
    recv_pulse: u16,
    mtu: u16,
    /// IPT entries node 1 arms: frame length and segment count.
    arms: Vec<(u16, u8)>,
    /// IPT entries node 0 arms (for answers).
    arms0: Vec<(u16, u8)>,
    /// Node 1's answer table before the run.
    exports: Vec<Change>,
    entries: Vec<Entry>,
    /// Changes of node 1's table during the run, each after a pause (µs, modulo 64).
    changes: Vec<(u8, Change)>,
}

pub(crate) fn inside(ranges: &[(u64, u64)], addr: u64, len: u32) -> bool {
    len == 0 || ranges.iter().any(|&(s, e)| addr >= s && addr.checked_add(len as u64).is_some_and(|end| end <= e))
}

pub(crate) fn range(addr: u64, len: u32) -> (u64, u64) {
    (addr, addr.saturating_add(len as u64))
}

pub fn fuzz(data: &[u8]) {
    let _ = run(data);
}

/// What an input made of the answer table: answers that left node 1 whole, answers node
/// 0's host received (`None`: not a script).
pub fn run(data: &[u8]) -> Option<(u32, usize)> {
    let s = Script::arbitrary(&mut Unstructured::new(data)).ok()?;
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
    let (tokens, writes) = offer_writes(&mut c, mtu, [&s.arms0, &s.arms]);
    // Host-memory ranges node 0 offered for DMA reads: its posted send segments.
    let mut reads = Vec::new();
    let mut exports = Exports::new(1, mtu);
    for ch in s.exports.iter().take(SLOTS as usize + 2) {
        exports.apply(&mut c, ch);
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
            reads.push(range(g.addr, g.len));
        }
        let token = token_of(&e.token, &tokens[1]);
        let mut ctrl = e.ctrl.to_vec();
        let (mut ctrl_len, mut peer, mut flags) = (ctrl_len, e.peer as u32 % 3, e.flags);
        if let Some(d) = &e.desc {
            ctrl.truncate((ctrl_len as usize).min(ctrl.len()) & !3);
            ctrl.extend_from_slice(&d.bytes(&tokens[0]));
            flags |= send_flags::ANSWERABLE;
            if !e.raw_len {
                (ctrl_len, peer) = (ctrl.len() as u32, 1);
            }
        }
        slot.set_ctrl_len(ctrl_len);
        slot.set_payload_len(payload_len);
        slot.set_peer(peer);
        slot.set_token(token);
        slot.set_nseg(nseg);
        slot.set_flags(flags);
        slot.write_ctrl(&ctrl);
        slot.set_state_release(state::READY | (i as u32 + 1) << state::SEQ_SHIFT);
    }
    // Let the firmware see the entries, changing node 1's table as the script says,
    // then run until nothing moves; node 1's transfers are checked after every tick.
    for (pause, ch) in s.changes.iter().take(16) {
        exports.run_for(&mut c, *pause as u64 % 64);
        exports.apply(&mut c, ch);
    }
    exports.run_for(&mut c, 20);
    exports.settle(&mut c, 0);
    let received = c.host(0).delivered.iter().filter(|d| d.flags & rx_flags::ANSWER != 0).count();
    // Node 1's reads are answers, checked by `exports`; node 0's are its sends.
    for t in c.transfer_log(0).iter().filter(|t| t.kind == TransferKind::HostRead) {
        assert!(
            inside(&reads, t.host_addr, t.len),
            "node 0: host read {:#x}+{} outside every posted send segment",
            t.host_addr,
            t.len
        );
    }
    for (n, w) in writes.iter().enumerate() {
        check_host_writes(&c, n, w);
    }
    Some((exports.answers, received))
}

/// The payload token a script's [`Token`] stands for, `armed` the node's armed tokens.
pub(crate) fn token_of(t: &Token, armed: &[u64]) -> u64 {
    match *t {
        Token::None => 0,
        Token::Armed { index, flip } if !armed.is_empty() => armed[index as usize % armed.len()] ^ flip.unwrap_or(0),
        Token::Armed { flip, .. } => flip.unwrap_or(0),
        Token::Forged(t) => t,
    }
}

impl Desc {
    /// The descriptor's bytes, `armed` the requester's armed tokens.
    pub(crate) fn bytes(&self, armed: &[u64]) -> [u8; Descriptor::BYTES] {
        let index = if self.raw { self.slot } else { self.slot % SLOTS };
        Descriptor { index, key: key_of(self.key) ^ self.flip.unwrap_or(0), token: token_of(&self.token, armed) }
            .to_bytes()
    }
}
