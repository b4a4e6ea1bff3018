// SPDX-License-Identifier: GPL-2.0-only
//! The port's bookkeeping against a NIC the test plays itself (plain atomic words for NIC
//! memory): receive-slot swaps, the limbo, posting on a full ring, stuck IPT entries, and
//! groups of frames armed and sent as one payload.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};
use trapeze_host::endpoint::{Endpoint, EndpointConfig};
use trapeze_host::iface::entry::{rx_flags, state, Ring, Segment, Slot};
use trapeze_host::iface::ipt::{IptEntry, PayloadToken};
use trapeze_host::iface::layout::{ctrl, ctrl_word, NIC_MEM_BYTES, RECV_RING_ENTRIES, SEND_RING_ENTRIES};
use trapeze_host::iface::mem::{AtomicWords, NicMemory};
use trapeze_runtime::frames::Groups;
use trapeze_runtime::frames::Segments;
use trapeze_runtime::netrpc::prelude::{InPayload, ReplyTo, Transmit};
use trapeze_runtime::port::{Port, DISARM_SPINS, RPC_COOKIE};
use trapeze_runtime::storage::Heap;
use trapeze_runtime::FrameMem;

const BYTES: u32 = 64;
const BASE: u64 = 0x10_0000;

/// `n` frames of 64 bytes at DMA address `BASE + 64 i`, and groups of them: frame
/// `GROUP + g` names group `g` of the runtime's [`Groups`] table.
struct Frames(RefCell<Vec<[u8; BYTES as usize]>>, RefCell<Groups<u32, Heap>>);

const GROUP: u32 = 1000;

impl Frames {
    fn new(n: usize) -> Self {
        Frames(RefCell::new(vec![[0; BYTES as usize]; n]), RefCell::new(Groups::new(4, 0).unwrap()))
    }
    fn group(&self, frames: &[u32]) -> u32 {
        GROUP + self.1.borrow_mut().start(frames, BYTES).unwrap() as u32
    }
    fn live_groups(&self) -> usize {
        self.1.borrow().live()
    }
}

impl FrameMem for Frames {
    type Frame = u32;
    const FRAME_BYTES: u32 = BYTES;
    fn count(&self) -> usize {
        self.0.borrow().len()
    }
    fn nth(&self, i: usize) -> u32 {
        i as u32
    }
    fn dma(&self, f: u32) -> Option<u64> {
        ((f as usize) < self.count()).then_some(BASE + (f * BYTES) as u64)
    }
    fn copy(&self, from: u32, to: u32, len: u32) -> bool {
        let mut v = self.0.borrow_mut();
        let src = v[from as usize];
        v[to as usize][..len as usize].copy_from_slice(&src[..len as usize]);
        true
    }
    fn write(&self, f: u32, data: &[u8]) -> bool {
        self.0.borrow_mut()[f as usize][..data.len()].copy_from_slice(data);
        true
    }
    fn read(&self, f: u32, out: &mut [u8]) -> bool {
        out.copy_from_slice(&self.0.borrow()[f as usize][..out.len()]);
        true
    }
    fn segments(&self, f: u32, out: &mut Segments) -> Option<usize> {
        let groups = self.1.borrow();
        let Some(g) = f.checked_sub(GROUP).and_then(|g| groups.get(g as usize)) else {
            out[0] = Segment { addr: self.dma(f)?, len: BYTES };
            return Some(1);
        };
        for (o, &m) in out.iter_mut().zip(g.frames()) {
            *o = Segment { addr: self.dma(m)?, len: g.piece };
        }
        Some(g.frames().len())
    }
    fn sent(&mut self, f: u32) {
        if f >= GROUP {
            self.give_back(f);
        }
    }
    fn give_back(&mut self, f: u32) -> bool {
        match f.checked_sub(GROUP) {
            Some(g) => {
                self.1.borrow_mut().end(g as usize);
                false
            }
            None => true,
        }
    }
}

type TestPort<'m> = Port<AtomicWords<'m>, Frames, Heap>;

fn words() -> Vec<AtomicU32> {
    (0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect()
}

fn port(words: &[AtomicU32], frames: usize, spare: usize) -> TestPort<'_> {
    let frames = Frames::new(frames);
    let cfg = EndpointConfig { node_id: 1, ..EndpointConfig::default() };
    let ep = Endpoint::init(AtomicWords::new(words), &cfg, [3, 4], |i| TestPort::slot_segment(&frames, i));
    TestPort::new(ep, frames, spare).unwrap()
}

/// The NIC delivers a message with `len` payload bytes into receive slot `i`.
fn deliver(mem: &AtomicWords<'_>, i: u32, len: u32, flags: u32) {
    let slot = Slot::new(mem, Ring::Recv, i);
    slot.set_peer(2);
    slot.set_ctrl_len(4);
    slot.write_ctrl(&[1, 2, 3, 4]);
    slot.set_payload_len(len);
    slot.set_flags(flags);
    slot.set_state_release(state::READY);
}

/// The NIC finishes send slot `i` and moves its completion sequence.
fn complete(mem: &AtomicWords<'_>, i: u32) {
    Slot::new(mem, Ring::Send, i).set_state_release(state::DONE);
    let seq = ctrl_word(ctrl::FW_TX_SEQ);
    mem.store(seq, mem.load(seq, Ordering::Relaxed) + 1, Ordering::Release);
}

fn token_index(token: u64) -> u16 {
    PayloadToken(token).index()
}

fn transmit(payload: Option<(u32, u32)>) -> Transmit<u32> {
    Transmit { dst: 2, ctrl: [0; 128], ctrl_len: 8, payload, tag: 0, answerable: false }
}

#[test]
fn too_few_frames_are_refused_at_set_up() {
    let w = words();
    let frames = Frames::new(RECV_RING_ENTRIES as usize + 1);
    let ep = Endpoint::init(AtomicWords::new(&w), &EndpointConfig::default(), [1, 2], |_| None);
    assert!(matches!(
        TestPort::new(ep, frames, 2),
        Err(trapeze_runtime::port::SetupError::TooFewFrames { have: 33, need: 34 })
    ));
}

#[test]
fn an_unsolicited_payload_swaps_the_slot_frame_and_starves_cleanly() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 1, 1);
    let mem = AtomicWords::new(&w);
    let first = p.slot_frame(0);
    deliver(&mem, 0, 40, 0);
    let m = p.ep.poll_recv().unwrap();
    let fresh = match p.receive(&m) {
        InPayload::Buffer { frame, len: 40 } => {
            assert_eq!(frame, first, "the payload is handed up in the frame it landed in");
            p.slot_frame(0)
        }
        other => panic!("expected a buffer, got {other:?}"),
    };
    assert_ne!(fresh, first);
    // The slot was given back with the fresh frame attached.
    assert_eq!(Slot::new(&mem, Ring::Recv, 0).segment(0).addr, BASE + (fresh * BYTES) as u64);
    assert_eq!(p.available(), 0);
    // No frame left: the next payload is refused and counted; the slot keeps its frame.
    deliver(&mem, 1, 8, 0);
    let m = p.ep.poll_recv().unwrap();
    assert!(matches!(p.receive(&m), InPayload::Refused));
    assert_eq!(p.stats.starved, 1);
    // Too long for a frame, or refused by the NIC: refused, counted, nothing allocated.
    deliver(&mem, 2, BYTES + 1, 0);
    let m = p.ep.poll_recv().unwrap();
    assert!(matches!(p.receive(&m), InPayload::Refused));
    deliver(&mem, 3, 8, rx_flags::NO_FRAME);
    let m = p.ep.poll_recv().unwrap();
    assert!(matches!(p.receive(&m), InPayload::Refused));
    assert_eq!(p.stats.refused, 2);
    p.free(first);
    assert_eq!(p.available(), 1);
}

#[test]
fn a_retired_frame_waits_for_the_sends_posted_before_it() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 4, 4);
    let mem = AtomicWords::new(&w);
    let f = p.alloc().unwrap();
    assert!(p.write(f, b"page"));
    assert!(p.post(&transmit(Some((f, 4))), 1, |_| {}));
    p.retire(f);
    p.tag_limbo();
    // A send posted after the tag does not hold the frame back.
    let g = p.alloc().unwrap();
    assert!(p.post(&transmit(Some((g, 4))), 1, |_| {}));
    assert_eq!((p.in_limbo(), p.available()), (1, 2));
    assert!(!p.reap(|_, _| {}), "nothing completed yet");
    assert_eq!(p.in_limbo(), 1);
    complete(&mem, 0);
    let mut cookies = Vec::new();
    assert!(p.reap(|c, _| cookies.push(c)));
    assert_eq!(cookies, [RPC_COOKIE]);
    assert_eq!((p.in_limbo(), p.available()), (0, 3));
    // A frame in limbo is not freed twice by a release.
    p.retire(g);
    p.release(g);
    assert_eq!(p.available(), 3);
}

#[test]
fn a_full_send_ring_drops_the_transmit_after_the_bounded_tries() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 1, 1);
    for _ in 0..SEND_RING_ENTRIES {
        assert!(p.post(&transmit(None), 1, |_| panic!("the ring has room")));
    }
    let mut rounds = 0;
    assert!(!p.post(&transmit(None), 5, |_| rounds += 1));
    assert_eq!((rounds, p.stats.tx_dropped), (5, 1));
    // A payload frame that is not one of the port's is never handed to the NIC.
    assert!(!p.post(&transmit(Some((999, 4))), 1, |_| {}));
}

#[test]
fn a_solicited_frame_is_disarmed_on_release_and_a_stuck_one_is_leaked() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 2, 2);
    let mem = AtomicWords::new(&w);
    let Some(ReplyTo::Solicited { token, frame }) = p.solicit() else { panic!("no solicited frame") };
    assert_eq!((p.armed(), p.available()), (1, 1));
    p.release(frame);
    assert_eq!((p.armed(), p.available()), (0, 2));
    assert!(!IptEntry::new(&mem, token_index(token)).unwrap().is_armed());
    // The NIC claims the next entry and never finishes: the frame is leaked, not reused.
    let Some(ReplyTo::Solicited { token, frame }) = p.solicit() else { panic!("no solicited frame") };
    assert!(IptEntry::new(&mem, token_index(token)).unwrap().fw_claim(PayloadToken(token), 8).is_ok());
    p.release(frame);
    assert_eq!((p.armed(), p.available(), p.stats.leaked), (0, 1, 1), "after {DISARM_SPINS} attempts");
}

#[test]
fn a_group_is_armed_as_its_frames_and_given_back_on_release() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 3, 3);
    let mem = AtomicWords::new(&w);
    let fs: Vec<u32> = (0..3).map(|_| p.alloc().unwrap()).collect();
    let g = p.frames().group(&fs);
    let token = p.arm(g).unwrap();
    let entry = IptEntry::new(&mem, token.index()).unwrap();
    // One entry takes a payload as long as the three frames, and no longer.
    assert_eq!(entry.fw_claim(token, 3 * BYTES + 1).err(), Some(trapeze_host::iface::ipt::TokenError::TooSmall));
    let claim = entry.fw_claim(token, 3 * BYTES).unwrap();
    let addrs: Vec<u64> = claim.segs[..claim.nseg as usize].iter().map(|s| s.addr).collect();
    assert_eq!(addrs, fs.iter().map(|&f| BASE + (f * BYTES) as u64).collect::<Vec<_>>());
    entry.fw_complete(&claim, 3 * BYTES);
    // Released: the group ends; its frames are not freed with it (they are the caller's).
    p.release(g);
    assert_eq!((p.armed(), p.available(), p.frames().live_groups()), (0, 0, 0));
}

#[test]
fn a_gathered_payload_is_sent_as_its_frames_cut_to_its_length() {
    let w = words();
    let mut p = port(&w, RECV_RING_ENTRIES as usize + 3, 3);
    let mem = AtomicWords::new(&w);
    let fs: Vec<u32> = (0..3).map(|_| p.alloc().unwrap()).collect();
    let g = p.frames().group(&fs);
    assert!(p.post(&transmit(Some((g, 2 * BYTES + 10))), 1, |_| {}));
    let slot = Slot::new(&mem, Ring::Send, 0);
    let lens: Vec<u32> = (0..slot.nseg()).map(|i| slot.segment(i).len).collect();
    assert_eq!(lens, [BYTES, BYTES, 10]);
    assert_eq!(slot.segment(2).addr, BASE + (fs[2] * BYTES) as u64);
    assert_eq!(p.frames().live_groups(), 0, "posted: the group ended");
    // Longer than its frames: never handed to the NIC.
    let g = p.frames().group(&fs[..1]);
    assert!(!p.post(&transmit(Some((g, BYTES + 1))), 1, |_| {}));
    assert_eq!(p.frames().live_groups(), 0, "not posted: the group ended all the same");
}

#[test]
fn a_group_table_gives_out_and_ends_its_groups() {
    let mut t: Groups<u32, Heap> = Groups::new(2, 0).unwrap();
    assert_eq!(t.start(&[], 8), None, "a group names a frame at least");
    assert_eq!(t.start(&[0; 9], 8), None, "at most the NIC's scatter/gather pieces");
    let a = t.start(&[3, 4], 8).unwrap();
    let b = t.start(&[5], 16).unwrap();
    assert_eq!(t.start(&[6], 8), None, "full");
    assert_eq!((t.get(a).unwrap().frames(), t.get(b).unwrap().piece), (&[3, 4][..], 16));
    assert_eq!(t.live(), 2);
    assert_eq!(t.end(a).unwrap().frames(), &[3, 4]);
    assert!(t.get(a).is_none() && t.end(a).is_none(), "ended once");
    assert_eq!(t.start(&[7, 8, 9], 8), Some(a), "its slot is free again");
    assert_eq!((t.live(), t.capacity()), (2, 2));
}
