// SPDX-License-Identifier: GPL-2.0-only
//! Ring-slot views (`iface::entry::Slot`): field accessors against the documented
//! layout, index wrapping, and isolation of each slot's 256 bytes.

mod common;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};
use trapeze_firmware::iface::entry::{Ring, Segment, Slot};
use trapeze_firmware::iface::layout::{
    CTRL_MSG_BYTES, MAX_SEGMENTS, NIC_MEM_BYTES, RECV_RING_ENTRIES, RECV_RING_OFF, RING_ENTRY_BYTES, SEND_RING_ENTRIES,
    SEND_RING_OFF,
};
use trapeze_firmware::iface::mem::AtomicWords;

const SLOT_WORDS: usize = (RING_ENTRY_BYTES / 4) as usize;

#[derive(Clone, Debug)]
enum Op {
    State(u32),
    CtrlLen(u32),
    PayloadLen(u32),
    Peer(u32),
    Token(u64),
    Nseg(u32),
    Flags(u32),
    Seg(u32, Segment),
    Ctrl(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => any::<u32>().prop_map(Op::State),
        1 => any::<u32>().prop_map(Op::CtrlLen),
        1 => any::<u32>().prop_map(Op::PayloadLen),
        1 => any::<u32>().prop_map(Op::Peer),
        1 => any::<u64>().prop_map(Op::Token),
        1 => any::<u32>().prop_map(Op::Nseg),
        1 => any::<u32>().prop_map(Op::Flags),
        3 => (prop_oneof![0..MAX_SEGMENTS, any::<u32>()], any::<u64>(), any::<u32>())
            .prop_map(|(i, addr, len)| Op::Seg(i, Segment { addr, len })),
        2 => prop::collection::vec(any::<u8>(), 0..=200).prop_map(Op::Ctrl),
    ]
}

fn ring() -> impl Strategy<Value = Ring> {
    prop_oneof![Just(Ring::Send), Just(Ring::Recv)]
}

/// A word pattern that differs at every offset and from one test case to the next.
fn pattern(salt: u32, off: u32) -> u32 {
    (off ^ salt).wrapping_mul(0x9E37_79B1).rotate_left(13) ^ salt
}

fn filled(salt: u32) -> Vec<AtomicU32> {
    (0..NIC_MEM_BYTES / 4).map(|w| AtomicU32::new(pattern(salt, w * 4))).collect()
}

/// The slot image as the documented layout says the operations leave it.
struct Image([u32; SLOT_WORDS]);

impl Image {
    fn set(&mut self, off: u32, v: u32) {
        self.0[(off / 4) as usize] = v;
    }
    fn apply(&mut self, op: &Op) {
        match op {
            Op::State(v) => self.set(0x00, *v),
            Op::CtrlLen(v) => self.set(0x04, *v),
            Op::PayloadLen(v) => self.set(0x08, *v),
            Op::Peer(v) => self.set(0x0C, *v),
            Op::Token(v) => {
                self.set(0x10, *v as u32);
                self.set(0x14, (*v >> 32) as u32);
            }
            Op::Nseg(v) => self.set(0x18, *v),
            Op::Flags(v) => self.set(0x1C, *v),
            Op::Seg(i, s) => {
                let base = 0x20 + (i % MAX_SEGMENTS) * 12;
                self.set(base, s.addr as u32);
                self.set(base + 4, (s.addr >> 32) as u32);
                self.set(base + 8, s.len);
            }
            Op::Ctrl(msg) => {
                // Truncated at 128 bytes, the last word zero-padded.
                let msg = &msg[..msg.len().min(CTRL_MSG_BYTES as usize)];
                for (i, chunk) in msg.chunks(4).enumerate() {
                    let mut w = [0u8; 4];
                    w[..chunk.len()].copy_from_slice(chunk);
                    self.set(0x80 + 4 * i as u32, u32::from_le_bytes(w));
                }
            }
        }
    }
    fn word(&self, off: u32) -> u32 {
        self.0[(off / 4) as usize]
    }
    fn u64(&self, off: u32) -> u64 {
        self.word(off) as u64 | (self.word(off + 4) as u64) << 32
    }
}

proptest! {
    #![proptest_config(common::config(256))]

    #[test]
    fn slot_indices_wrap(ring in ring(), index in any::<u32>()) {
        let words = common::nic_memory();
        let mem = AtomicWords::new(&words);
        let n = ring.entries();
        let (base, entries) = match ring {
            Ring::Send => (SEND_RING_OFF, SEND_RING_ENTRIES),
            Ring::Recv => (RECV_RING_OFF, RECV_RING_ENTRIES),
        };
        prop_assert_eq!(n, entries);
        prop_assert_eq!(ring.base(), base);
        let s = Slot::new(&mem, ring, index);
        prop_assert_eq!(s.offset(), base + (index % n) * RING_ENTRY_BYTES);
        prop_assert_eq!(s.offset(), Slot::new(&mem, ring, index % n).offset());
        prop_assert_eq!(s.offset(), Slot::new(&mem, ring, index.wrapping_add(n)).offset());
        prop_assert_eq!(s.ctrl_offset(), s.offset() + 0x80);
    }

    /// Random accessor calls on one slot of a memory filled with a pattern: every getter
    /// returns what the documented layout holds, the slot's bytes are exactly the
    /// expected image, and no byte outside the slot changes (other slots, the other
    /// ring, the IPT, everything).
    #[test]
    fn slot_accessors_round_trip_and_stay_in_their_slot(
        ring in ring(),
        index in any::<u32>(),
        salt in any::<u32>(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let words = filled(salt);
        let mem = AtomicWords::new(&words);
        let slot = Slot::new(&mem, ring, index);
        let base = slot.offset();
        let mut img = Image([0; SLOT_WORDS]);
        for w in 0..SLOT_WORDS as u32 {
            img.set(4 * w, pattern(salt, base + 4 * w));
        }

        for op in &ops {
            match op {
                Op::State(v) => slot.set_state_release(*v),
                Op::CtrlLen(v) => slot.set_ctrl_len(*v),
                Op::PayloadLen(v) => slot.set_payload_len(*v),
                Op::Peer(v) => slot.set_peer(*v),
                Op::Token(v) => slot.set_token(*v),
                Op::Nseg(v) => slot.set_nseg(*v),
                Op::Flags(v) => slot.set_flags(*v),
                Op::Seg(i, s) => slot.set_segment(*i, *s),
                Op::Ctrl(msg) => slot.write_ctrl(msg),
            }
            img.apply(op);

            // A second view through a wrapped index sees the same slot.
            let other = Slot::new(&mem, ring, index.wrapping_add(ring.entries() * 3));
            for s in [&slot, &other] {
                prop_assert_eq!(s.state_acquire(), img.word(0x00));
                prop_assert_eq!(s.ctrl_len(), img.word(0x04));
                prop_assert_eq!(s.payload_len(), img.word(0x08));
                prop_assert_eq!(s.peer(), img.word(0x0C));
                prop_assert_eq!(s.token(), img.u64(0x10));
                prop_assert_eq!(s.nseg(), img.word(0x18));
                prop_assert_eq!(s.flags(), img.word(0x1C));
                for i in 0..MAX_SEGMENTS {
                    let want = Segment { addr: img.u64(0x20 + 12 * i), len: img.word(0x28 + 12 * i) };
                    prop_assert_eq!(s.segment(i), want);
                    prop_assert_eq!(s.segment(i + MAX_SEGMENTS), want, "segment indices wrap");
                }
            }
            if let Op::Ctrl(msg) = op {
                let n = msg.len().min(CTRL_MSG_BYTES as usize);
                let mut out = vec![0xA5u8; 200];
                slot.read_ctrl(&mut out);
                prop_assert_eq!(&out[..n], &msg[..n]);
                // Zero padding up to the word boundary.
                prop_assert!(out[n..(n + 3) & !3].iter().all(|&b| b == 0));
                // read_ctrl stops at 128 bytes too.
                prop_assert!(out[CTRL_MSG_BYTES as usize..].iter().all(|&b| b == 0xA5));
                // A short read takes a prefix.
                let mut short = vec![0u8; n / 2];
                slot.read_ctrl(&mut short);
                prop_assert_eq!(&short[..], &msg[..n / 2]);
            }
        }

        let mut ctrl = [0u8; CTRL_MSG_BYTES as usize];
        slot.read_ctrl(&mut ctrl);
        for (i, chunk) in ctrl.chunks(4).enumerate() {
            prop_assert_eq!(u32::from_le_bytes(chunk.try_into().unwrap()), img.word(0x80 + 4 * i as u32));
        }
        for (i, w) in words.iter().enumerate() {
            let off = 4 * i as u32;
            let got = w.load(Ordering::Relaxed);
            if (base..base + RING_ENTRY_BYTES).contains(&off) {
                prop_assert_eq!(got, img.word(off - base), "slot word at +{:#x}", off - base);
            } else {
                prop_assert_eq!(got, pattern(salt, off), "write outside the slot at {:#x}", off);
            }
        }
    }
}

#[test]
fn every_slot_is_disjoint_and_inside_its_ring() {
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    for ring in [Ring::Send, Ring::Recv] {
        let mut offs: Vec<u32> = (0..ring.entries()).map(|i| Slot::new(&mem, ring, i).offset()).collect();
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len() as u32, ring.entries());
        for w in offs.windows(2) {
            assert_eq!(w[1] - w[0], RING_ENTRY_BYTES);
        }
        assert_eq!(offs[0], ring.base());
        assert!(offs.last().unwrap() + RING_ENTRY_BYTES <= ring.base() + ring.entries() * RING_ENTRY_BYTES);
    }
    const { assert!(SEND_RING_OFF + SEND_RING_ENTRIES * RING_ENTRY_BYTES <= RECV_RING_OFF) };
}
