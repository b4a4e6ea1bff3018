// SPDX-License-Identifier: GPL-2.0-only
//! The answer table of a modelled node under a script, and the oracle for what its NIC
//! does with it — shared by `firmware_send` and `firmware_recv`.
//!
//! The script exports, retracts, rewrites and half-changes entries of the serving node's
//! table (`iface::answer`) while requests are in flight, the way a host may: it makes an
//! entry's sequence odd before it touches the entry or the bytes the entry names. Every
//! export is a **generation** with its own bytes and its own reply (whose first 8 bytes
//! are the generation's tag and entry index), so an answer tells which generation it
//! claims to carry. [`Exports::scan`], called after every model tick, checks each new
//! transfer of the serving NIC:
//! - a host read lies inside a frame the host exported at some time up to now (the NIC
//!   reads host memory by itself only for answers);
//! - an answer's last pulse leaves only while its generation is still the entry's live
//!   export (not retracted, not being changed, not replaced), with exactly that
//!   generation's reply, length and bytes in staging — so neither a torn payload nor an
//!   answer for an entry that is not exported (or whose sequence moved) ever leaves.
//!
//! [`Exports::check_delivered`] then checks what the requester's host received as
//! answers: a generation's reply and bytes, never a mixture.
//!
//! Both targets also share the run around it: [`offer_writes`] arms the nodes' IPT
//! entries and notes every range they offer for DMA writes, [`Exports::run_for`] and
//! [`Exports::settle`] run the cluster with the scan after every tick (settle: until it
//! is quiet, then the delivered answers checked), and [`check_host_writes`] checks that
//! every DMA write of a node landed in a range it offered.

use crate::firmware::{inside, range};
use arbitrary::Arbitrary;
use trapeze_firmware::iface::answer::{self, Export, REPLY_MAX};
use trapeze_firmware::iface::entry::{rx_flags, Ring, Slot};
use trapeze_firmware::iface::layout::{MAX_MTU_BYTES, MAX_SEGMENTS, RECV_RING_ENTRIES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_firmware::iface::regs::tx_flags;
use trapeze_firmware::iface::wire::{Header, FLAG_ANSWERED, HEADER_BYTES};
use trapeze_firmware::sim::{Cluster, TransferKind, US};

/// Entries a script uses (indexes `0..SLOTS`): few, so requests and changes collide.
pub const SLOTS: u32 = 4;
/// Model time the cluster may take to go quiet at the end of a script (µs).
pub const LIMIT_US: u64 = 2000;

/// A change of the serving host's table, applied between model ticks.
#[derive(Arbitrary, Debug)]
pub enum Change {
    /// Export `len` bytes (in a fresh frame, or over the entry's last frame), under `key`
    /// with `extra` reply bytes after the tag.
    Publish { slot: u8, len: u16, key: u8, fresh: bool, extra: Vec<u8> },
    /// Retract the entry.
    Retract { slot: u8 },
    /// Retract the entry and reuse its frame at once (the race: the old answer
    /// may be leaving).
    Reuse { slot: u8, fill: u8 },
    /// Begin a change and leave the entry odd (changing).
    Begin { slot: u8 },
}

/// One export: what an answer from it must carry.
struct Gen {
    tag: u32,
    slot: u32,
    bytes: Vec<u8>,
    reply: Vec<u8>,
}

/// The packet the serving NIC is sending, as its first pulse staged it.
struct Leaving {
    off: u32,
    hdr: Header,
}

pub struct Exports {
    node: usize,
    mtu: u32,
    gens: Vec<Gen>,
    /// The live generation of each slot (index into `gens`), and the frame it used last.
    live: [Option<usize>; SLOTS as usize],
    frame: [Option<(u64, u32)>; SLOTS as usize],
    /// Every frame exported so far, `[start, end)`.
    ever: Vec<(u64, u64)>,
    seen: usize,
    leaving: Option<Leaving>,
    /// Answers that left, whole and unaborted.
    pub answers: u32,
}

/// The key a script's key byte stands for (never 0 when picked: 0 is a fine key too).
pub fn key_of(k: u8) -> u64 {
    0x6b65_7900_0000_0000 | u64::from(k % 4)
}

fn fill(tag: u32, len: usize, with: u8) -> Vec<u8> {
    (0..len).map(|i| (tag as usize * 131 + i * 7) as u8 ^ with).collect()
}

impl Exports {
    pub fn new(node: usize, mtu: u32) -> Self {
        Exports {
            node,
            mtu,
            gens: Vec::new(),
            live: [None; SLOTS as usize],
            frame: [None; SLOTS as usize],
            ever: Vec::new(),
            seen: 0,
            leaving: None,
            answers: 0,
        }
    }

    /// Apply `ch` to the serving node's table and host memory.
    pub fn apply(&mut self, c: &mut Cluster, ch: &Change) {
        let n = self.node;
        match ch {
            Change::Publish { slot, len, key, fresh, extra } => {
                let s = u32::from(*slot) % SLOTS;
                let tag = self.gens.len() as u32 + 1;
                let len = 1 + u32::from(*len) % (self.mtu + self.mtu / 4);
                let bytes = fill(tag, len as usize, 0);
                let mut reply = [tag.to_le_bytes(), s.to_le_bytes()].concat();
                reply.extend(extra.iter().take(REPLY_MAX as usize - 8));
                // Changing the bytes of a published entry: its sequence goes odd first.
                let _ = answer::begin(c.nic_mem(n), s);
                self.live[s as usize] = None;
                let addr = match self.frame[s as usize] {
                    Some((addr, flen)) if !fresh && flen >= len => c.host_mut(n).write(addr, &bytes).then_some(addr),
                    _ => c.host_mut(n).store(&bytes),
                };
                let Some(addr) = addr else { return };
                self.frame[s as usize] = Some((addr, len));
                self.ever.push((addr, addr + u64::from(len)));
                let e = Export { key: key_of(*key), addr, len, reply: &reply };
                answer::publish(c.nic_mem(n), s, &e).expect("a well-formed export");
                self.live[s as usize] = Some(self.gens.len());
                self.gens.push(Gen { tag, slot: s, bytes, reply });
            }
            Change::Retract { slot } => {
                let s = u32::from(*slot) % SLOTS;
                answer::retract(c.nic_mem(n), s).expect("an entry");
                self.live[s as usize] = None;
            }
            Change::Reuse { slot, fill: with } => {
                let s = u32::from(*slot) % SLOTS;
                answer::retract(c.nic_mem(n), s).expect("an entry");
                self.live[s as usize] = None;
                if let Some((addr, len)) = self.frame[s as usize] {
                    c.host_mut(n).write(addr, &fill(0, len as usize, *with | 1));
                }
            }
            Change::Begin { slot } => {
                let s = u32::from(*slot) % SLOTS;
                answer::begin(c.nic_mem(n), s).expect("an entry");
                self.live[s as usize] = None;
            }
        }
    }

    /// Check the serving NIC's transfers since the last call (call it after every tick).
    pub fn scan(&mut self, c: &Cluster) {
        let log = c.transfer_log(self.node);
        for t in &log[self.seen..] {
            match t.kind {
                TransferKind::HostRead => {
                    let end = t.host_addr.checked_add(u64::from(t.len));
                    assert!(
                        t.len == 0 || self.ever.iter().any(|&(s, e)| t.host_addr >= s && end.is_some_and(|x| x <= e)),
                        "node {}: host read {:#x}+{} outside every frame its host exported",
                        self.node,
                        t.host_addr,
                        t.len
                    );
                }
                TransferKind::HostWrite => {}
                TransferKind::LinkTx => {
                    let mem = c.nic_mem(self.node);
                    if t.flags & tx_flags::FIRST != 0 {
                        let mut hb = [0u8; HEADER_BYTES as usize];
                        mem.read_bytes(t.nic_off, &mut hb);
                        let hdr = Header::parse(&hb, MAX_MTU_BYTES).expect("the NIC staged a valid header");
                        self.leaving = Some(Leaving { off: t.nic_off, hdr });
                    }
                    if t.flags & tx_flags::LAST != 0 && t.flags & tx_flags::ABORT == 0 {
                        if let Some(l) = self.leaving.take() {
                            self.check_leaving(c, &l);
                        }
                    }
                }
            }
        }
        self.seen = log.len();
    }

    fn check_leaving(&mut self, c: &Cluster, l: &Leaving) {
        if l.hdr.flags & FLAG_ANSWERED == 0 {
            return;
        }
        let mem = c.nic_mem(self.node);
        let mut ctrl = vec![0u8; usize::from(l.hdr.ctrl_len)];
        mem.read_bytes(l.off + HEADER_BYTES, &mut ctrl);
        let word = |i: usize| ctrl.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let (tag, slot) = (word(0), word(4));
        let live = slot.filter(|&s| s < SLOTS).and_then(|s| self.live[s as usize]).map(|g| &self.gens[g]);
        let g = live.filter(|g| Some(g.tag) == tag).unwrap_or_else(|| {
            panic!("an answer left for tag {tag:?} of entry {slot:?}, not that entry's live export")
        });
        assert_eq!(ctrl, g.reply, "an answer's reply is not its entry's");
        assert_eq!(l.hdr.payload_len as usize, g.bytes.len(), "an answer's length is not its entry's");
        let mut staged = vec![0u8; g.bytes.len()];
        mem.read_bytes(l.off + l.hdr.prefix_bytes(), &mut staged);
        assert!(staged == g.bytes, "an answer of entry {} left with bytes it does not export", g.slot);
        self.answers += 1;
    }

    /// Run `c` for `us` µs of model time, scanning after every tick.
    pub fn run_for(&mut self, c: &mut Cluster, us: u64) {
        c.run_until(us * US, |c| {
            self.scan(c);
            false
        });
    }

    /// Run `c` until it is quiet (at most [`LIMIT_US`]), scanning after every tick; then
    /// check the answers the requester's host `node` received.
    pub fn settle(&mut self, c: &mut Cluster, node: usize) {
        c.run_until(LIMIT_US * US, |c| {
            self.scan(c);
            c.is_quiet()
        });
        self.check_delivered(c, node);
    }

    /// Check the answers the requester's host `node` received: each a generation's reply,
    /// and its bytes when it came with a payload.
    pub fn check_delivered(&self, c: &Cluster, node: usize) {
        for d in c.host(node).delivered.iter().filter(|d| d.flags & rx_flags::ANSWER != 0) {
            let tag = d.ctrl.get(0..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let g = tag
                .and_then(|t| self.gens.get((t as usize).wrapping_sub(1)))
                .unwrap_or_else(|| panic!("node {node} received an answer no export made: {d:?}"));
            assert_eq!(d.ctrl, g.reply, "node {node}: an answer's reply changed");
            if d.flags & rx_flags::IPT != 0 && d.flags & rx_flags::DMA_REFUSED == 0 {
                assert!(d.payload == g.bytes, "node {node}: an answer's bytes are not its export's");
            }
        }
    }
}

/// Host-memory ranges, `[start, end)` as DMA addresses.
pub type Ranges = Vec<(u64, u64)>;

/// Arm the IPT entries `arms[n]` (frame length modulo twice the `mtu`, segment count) on
/// node `n`'s host, node 1 first. Returns each node's armed tokens and the host-memory
/// ranges it offered for DMA writes: its receive frames and the armed entries' frames.
pub fn offer_writes(c: &mut Cluster, mtu: u32, arms: [&[(u16, u8)]; 2]) -> ([Vec<u64>; 2], [Ranges; 2]) {
    let mut writes: [Ranges; 2] = [Vec::new(), Vec::new()];
    for (n, w) in writes.iter_mut().enumerate() {
        for i in 0..RECV_RING_ENTRIES {
            let slot = Slot::new(c.nic_mem(n), Ring::Recv, i);
            for k in 0..slot.nseg().min(MAX_SEGMENTS) {
                let seg = slot.segment(k);
                w.push(range(seg.addr, seg.len));
            }
        }
    }
    let mut tokens = [Vec::new(), Vec::new()];
    for n in [1, 0] {
        for &(len, frames) in arms[n].iter().take(8) {
            let len = 1 + len as u32 % (2 * mtu);
            if let Some((token, addr)) = c.host_mut(n).arm(len, frames as u32) {
                tokens[n].push(token.0);
                writes[n].push(range(addr, len));
            }
        }
    }
    (tokens, writes)
}

/// Every DMA write of node `n` lies inside a range of `writes` it offered.
pub fn check_host_writes(c: &Cluster, n: usize, writes: &[(u64, u64)]) {
    for t in c.transfer_log(n).iter().filter(|t| t.kind == TransferKind::HostWrite) {
        assert!(
            inside(writes, t.host_addr, t.len),
            "node {n}: host write {:#x}+{} outside every receive frame and armed IPT entry",
            t.host_addr,
            t.len
        );
    }
}
