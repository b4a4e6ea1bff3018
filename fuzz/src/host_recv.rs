// SPDX-License-Identifier: GPL-2.0-only
//! Target `host_recv`: the host endpoint (`trapeze_host::Endpoint`) reading receive
//! slots that a faulty or hostile NIC filled with any bytes.
//!
//! The host attaches frames of lengths the input picks to the receive slots and arms
//! some IPT entries; then the input overwrites the receive ring (every field, the
//! segments included) and the endpoint polls, releases (re-attaching new frames or not)
//! and polls again. Oracles: while polling, the endpoint reads NIC memory only inside the
//! receive ring; a message's control bytes stay within the control message; and a
//! payload it reports is never longer than the frame the host itself attached to that
//! slot (unsolicited) or armed for that token (IPT) — the NIC's copy of the segments, which
//! it may have rewritten, does not count.

use arbitrary::{Arbitrary, Unstructured};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use trapeze_host::endpoint::{Endpoint, EndpointConfig, RecvMsg};
use trapeze_host::iface::entry::Segment;
use trapeze_host::iface::layout::{
    CTRL_MSG_BYTES, CTRL_OFF, IPT_ENTRIES, NIC_MEM_BYTES, RECV_RING_ENTRIES, RECV_RING_OFF, RING_ENTRY_BYTES,
    STAGING_OFF,
};
use trapeze_host::iface::mem::NicMemory;

const RING_END: u32 = RECV_RING_OFF + RECV_RING_ENTRIES * RING_ENTRY_BYTES;

/// NIC memory as plain words, checking every load against the window of the moment.
struct Mem {
    words: Vec<Cell<u32>>,
    /// While set, loads must fall in `[start, end)`.
    window: Cell<Option<(u32, u32)>>,
}

impl Mem {
    fn check(&self, off: u32) {
        assert!(off.is_multiple_of(4) && off < NIC_MEM_BYTES, "access at {off:#x}, outside NIC memory or unaligned");
        if let Some((s, e)) = self.window.get() {
            assert!((s..e).contains(&off), "read at {off:#x} while receiving, outside the receive ring");
        }
    }
}

impl NicMemory for &Mem {
    fn load(&self, off: u32, _order: Ordering) -> u32 {
        self.check(off);
        self.words[(off / 4) as usize].get()
    }
    fn store(&self, off: u32, val: u32, _order: Ordering) {
        assert!(off.is_multiple_of(4) && off < NIC_MEM_BYTES, "store at {off:#x}");
        self.words[(off / 4) as usize].set(val)
    }
    fn len_bytes(&self) -> u32 {
        NIC_MEM_BYTES
    }
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// Overwrite ring words from `at` (a word index into the ring).
    Write { at: u16, words: Vec<u32> },
    /// Poll; if a message came, release it, attaching a fresh frame of `fresh` bytes if given.
    Poll { fresh: Option<u32> },
}

#[derive(Arbitrary, Debug)]
struct Script {
    frames: [u16; 4],
    arms: Vec<u16>,
    steps: Vec<Step>,
}

pub fn fuzz(data: &[u8]) {
    let Ok(s) = Script::arbitrary(&mut Unstructured::new(data)) else { return };
    MEM.with(|mem| run(&s, mem));
}

thread_local! {
    /// One NIC memory per thread, reused: only the part an endpoint uses is cleared.
    static MEM: Mem = Mem { words: (0..NIC_MEM_BYTES / 4).map(|_| Cell::new(0)).collect(), window: Cell::new(None) };
}

fn run(s: &Script, mem: &Mem) {
    for w in &mem.words[(CTRL_OFF / 4) as usize..(STAGING_OFF / 4) as usize] {
        w.set(0);
    }
    mem.window.set(None);
    // What the host itself gave for each slot and token (its own record, not the NIC's).
    let mut slot_frame: Vec<u32> = (0..RECV_RING_ENTRIES).map(|i| s.frames[i as usize % 4] as u32).collect();
    let mut ep: Endpoint<&Mem, u32> = Endpoint::init(mem, &EndpointConfig::default(), [3, 4], |i| {
        Some(Segment { addr: 0x1000_0000 + i as u64 * 0x1_0000, len: s.frames[i as usize % 4] as u32 })
    });
    let mut armed = vec![None; IPT_ENTRIES as usize];
    for (k, &len) in s.arms.iter().take(16).enumerate() {
        let segs = [Segment { addr: 0x2000_0000 + k as u64 * 0x1_0000, len: len as u32 }];
        if let Ok(t) = ep.arm(&segs) {
            armed[t.index() as usize] = Some(len as u32);
        }
    }
    let mut m = RecvMsg::EMPTY;
    for step in s.steps.iter().take(64) {
        match step {
            Step::Write { at, words } => {
                let ring_words = (RING_END - RECV_RING_OFF) / 4;
                for (k, w) in words.iter().enumerate() {
                    let i = (*at as u32 + k as u32) % ring_words;
                    mem.words[(RECV_RING_OFF / 4 + i) as usize].set(*w);
                }
            }
            Step::Poll { fresh } => {
                mem.window.set(Some((RECV_RING_OFF, RING_END)));
                let got = ep.poll_recv_into(&mut m);
                mem.window.set(None);
                if !got {
                    continue;
                }
                assert!(m.ctrl_len <= CTRL_MSG_BYTES && m.ctrl().len() == m.ctrl_len as usize);
                let slot = (m.slot % RECV_RING_ENTRIES) as usize;
                if m.payload_len > 0 {
                    let cap = if m.via_ipt() {
                        armed.get(m.token.index() as usize).copied().flatten()
                    } else {
                        Some(slot_frame[slot])
                    };
                    let cap = cap.unwrap_or_else(|| panic!("payload via a token this host never armed: {m:?}"));
                    assert!(m.payload_len <= cap, "payload of {} bytes reported for a frame of {cap}", m.payload_len);
                }
                match fresh {
                    Some(len) => {
                        ep.release_recv(Some(&[Segment { addr: 0x3000_0000, len: *len }]));
                        slot_frame[slot] = *len;
                    }
                    None => ep.release_recv(None),
                }
            }
        }
    }
}
