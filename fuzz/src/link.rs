// SPDX-License-Identifier: GPL-2.0-only
//! Target `link`: link frames and their reassembly, through a whole `vnic` [`Link`] on a
//! scripted backend.
//!
//! The input is a script: raw frames (any bytes) arrive at node 2, and packets sent by a
//! real link at node 1 arrive there too, their frames in an order the input picks.
//! The input also picks whether both links are under a cluster key (a MAC on every
//! packet). Oracles: nothing panics; every packet delivered is shorter than the link's
//! limit; a packet node 1 sent is delivered exactly once (or, its fragments stalled past
//! the reassembly timeout on a loaded machine, counted as timed out), byte for byte, its CRC (or
//! verdict) good unless it was sent aborted — whatever raw frames came before it (raw
//! frames never claim to be from node 1, so they cannot legitimately interfere); under a
//! key, no raw frame is ever delivered, and a packet's frames delivered again under
//! another packet id (a replay the reassembler cannot take for a duplicate) never make a
//! second copy.
//!
//! A sent packet may also be **altered** on its way: up to four bytes xored at a place the
//! script picks — in its trailer (the CRC or verdict), in its tag or stamp (under a key:
//! the last [`SEAL_BYTES`] before the trailer), or anywhere in the packet. Under a key an
//! altered packet is never delivered: the link drops it and counts it by name
//! (`mac_rejected`, `trailer_forged`, `replayed`, `replay_stale_epoch`), or it timed out
//! in reassembly. Without a key, a packet with a CRC trailer that was not sent aborted is
//! never delivered as good once altered (a CRC catches every burst of up to 32 bits); a
//! verdict packet's bytes, and an aborted packet, have nothing to protect them there.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::frame::{FrameHeader, FLAG_VERDICT, HEADER_BYTES};
use trapeze_vnic::link::mac::SEAL_BYTES;
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend, LinkStats, RxPacket, TRAILER_BYTES};

const SENDER: u16 = 1;
const RECEIVER: u16 = 2;
/// Largest packet a script sends (keeps an iteration fast; fragmentation is what matters).
const MAX_SCRIPT_PACKET: usize = 3000;

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

/// A backend whose sent frames go to one queue and whose received frames come from another.
struct Scripted {
    out: Queue,
    inbox: Queue,
    max_frame: usize,
    memory: bool,
}

impl LinkBackend for Scripted {
    fn send_frame(&mut self, _dst: u16, frame: &[u8]) -> io::Result<()> {
        assert!(frame.len() <= self.max_frame, "link sent a frame over the backend's limit");
        self.out.lock().expect("queue").push_back(frame.to_vec());
        Ok(())
    }
    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(f) = self.inbox.lock().expect("queue").pop_front() else { return Ok(None) };
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Ok(Some(n))
    }
    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn max_frame_bytes(&self) -> usize {
        self.max_frame
    }
    fn routes_to(&self, dst: u16) -> bool {
        dst == RECEIVER
    }
    fn is_memory_medium(&self) -> bool {
        self.memory
    }
    fn describe(&self) -> String {
        "fuzz script".into()
    }
}

/// The next packet `rx` delivers, polling as long as frames wait in `inbox`.
fn poll(rx: &mut Link, inbox: &Queue, buf: &mut [u8]) -> Option<RxPacket> {
    loop {
        if let Some(p) = rx.poll_packet(buf) {
            return Some(p);
        }
        if inbox.lock().expect("queue").is_empty() {
            return None;
        }
    }
}

/// Where an alteration of a sent packet falls, counted in the bytes the link sends for
/// it (packet, then under a key stamp and tag, then trailer).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Region {
    Trailer,
    /// The seal (stamp and tag) under a key; the bytes before the trailer without one.
    Seal,
    Anywhere,
}

#[derive(Arbitrary, Debug)]
struct Alter {
    region: Region,
    at: u16,
    xor: [u8; 4],
}

/// What an alteration changed.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Altered {
    trailer: bool,
    /// Packet, stamp or tag bytes.
    sealed: bool,
}

/// Xor `a` into the sent bytes of a packet of `total` bytes (its frames), at the place it
/// picks; what changed.
fn alter(frames: &mut [Vec<u8>], total: usize, a: &Alter) -> Altered {
    let span = |len: usize| total - len.min(total);
    let start = match a.region {
        Region::Trailer => span(TRAILER_BYTES) + a.at as usize % TRAILER_BYTES,
        Region::Seal => span(TRAILER_BYTES + SEAL_BYTES) + a.at as usize % SEAL_BYTES,
        Region::Anywhere => a.at as usize % total.max(1),
    };
    let mut changed = Altered::default();
    for (k, x) in a.xor.iter().enumerate().filter(|(_, x)| **x != 0) {
        let p = start + k;
        for f in frames.iter_mut() {
            let Ok((h, frag)) = FrameHeader::parse(f) else { continue };
            let off = h.frag_offset as usize;
            if p >= off && p < off + frag.len() {
                f[HEADER_BYTES + p - off] ^= x;
                if p + TRAILER_BYTES >= total {
                    changed.trailer = true;
                } else {
                    changed.sealed = true;
                }
                break;
            }
        }
    }
    changed
}

/// Packets the link refused by name under a key (the counters an altered packet moves).
fn refused(s: &LinkStats) -> u64 {
    s.mac_rejected + s.trailer_forged + s.replayed + s.replay_stale_epoch
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A frame of any bytes (its source rewritten if it claims to be node 1).
    Raw(Vec<u8>),
    /// A packet sent by node 1, its frames delivered rotated by `rotate` and, if
    /// `reverse`, reversed; `dup` delivers one frame twice (not a one-frame packet over a
    /// memory medium: see the send step).
    Send { body: Vec<u8>, abort: bool, rotate: u8, reverse: bool, dup: Option<u8>, alter: Option<Alter> },
    /// The last sent packet's frames again, their packet id changed by `id_xor`.
    Replay { id_xor: u32 },
}

pub fn fuzz(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((memory, frame_sel, keyed)) = <(bool, u16, bool)>::arbitrary(&mut u) else { return };
    // Frames of 25..=2072 bytes: one byte of fragment at the least, several fragments
    // for most packets.
    let max_frame = HEADER_BYTES + 1 + (frame_sel as usize % 2048);
    let wire: Queue = Arc::default();
    let inbox: Queue = Arc::default();
    let mut tx = Link::new(
        SENDER,
        Box::new(Scripted { out: wire.clone(), inbox: Arc::default(), max_frame, memory }),
        FaultConfig::default(),
    );
    let mut rx = Link::new(
        RECEIVER,
        Box::new(Scripted { out: Arc::default(), inbox: inbox.clone(), max_frame, memory }),
        FaultConfig::default(),
    );
    if keyed {
        let key = ClusterKey::from_bytes([0x5a; 32]);
        tx.set_key(Some(&key));
        rx.set_key(Some(&key));
    }
    let mut buf = vec![0u8; MAX_SCRIPT_PACKET + 64];
    // The last packet node 1 sent: its frames as delivered, and how often it was delivered.
    let mut last: Option<(Vec<Vec<u8>>, usize)> = None;
    for _ in 0..32 {
        let Ok(step) = Step::arbitrary(&mut u) else { break };
        match step {
            Step::Raw(mut f) => {
                if let Ok((h, _)) = FrameHeader::parse(&f) {
                    if h.src == SENDER {
                        f[4] ^= 0x80; // another source
                    }
                }
                inbox.lock().expect("queue").push_back(f);
                while let Some(p) = poll(&mut rx, &inbox, &mut buf) {
                    assert!(p.len <= buf.len());
                    assert_ne!(p.src, SENDER, "a raw frame was delivered as node 1's");
                    assert!(!keyed, "a raw frame passed the MAC");
                }
            }
            Step::Send { mut body, abort, rotate, reverse, dup, alter: change } => {
                body.truncate(MAX_SCRIPT_PACKET);
                if body.len() < 32 {
                    body.resize(32, 0);
                }
                body[6..8].copy_from_slice(&RECEIVER.to_le_bytes());
                tx.send_packet(&body, abort).expect("a packet within the link's limits is sent");
                let mut frames: Vec<Vec<u8>> = wire.lock().expect("queue").drain(..).collect();
                assert!(!frames.is_empty(), "a routable packet produced no frame");
                let (head, _) = FrameHeader::parse(&frames[0]).expect("the link's own frame");
                let verdict = head.flags & FLAG_VERDICT != 0;
                let changed = change.map(|a| alter(&mut frames, head.total_len as usize, &a)).unwrap_or_default();
                let altered = changed != Altered::default();
                let n = frames.len();
                frames.rotate_left(rotate as usize % n);
                if reverse {
                    frames.reverse();
                }
                // Over a memory medium a whole verdict frame is not tracked for duplicates
                // (the medium copies nothing twice), so only duplicate elsewhere.
                if let Some(d) = dup.filter(|_| !memory || n > 1) {
                    let f = frames[d as usize % n].clone();
                    frames.insert((d as usize / 2) % (n + 1), f);
                }
                inbox.lock().expect("queue").extend(frames.iter().cloned());
                let (timeouts, refused_before) = (rx.stats().reassembly_timeouts, refused(&rx.stats()));
                let mut got = 0;
                // A poll takes at most 1024 frames: poll until the inbox is empty too
                // (a 3000-byte packet in 1-byte fragments is 3004 frames).
                while let Some(p) = poll(&mut rx, &inbox, &mut buf) {
                    if p.src != SENDER {
                        continue;
                    }
                    got += 1;
                    // An aborted packet whose trailer alone changed still reads aborted
                    // (its tag checks with that verdict): delivered as such, the firmware
                    // drops it for its CRC. Nothing else altered gets through a key.
                    let still_aborted = abort && !changed.sealed && !p.crc_ok;
                    assert!(!(keyed && altered && !still_aborted), "under a key, an altered packet was delivered");
                    if altered && !keyed {
                        let crc = !verdict && !abort;
                        assert!(!(crc && p.crc_ok), "an altered packet passed its CRC");
                        continue;
                    }
                    assert_eq!(&buf[..p.len], &body[..], "packet changed on the link");
                    assert_eq!(p.crc_ok, !abort, "trailer verdict wrong (aborted: {abort})");
                }
                // A packet of many fragments may stall past the reassembly timeout (100 ms)
                // on a loaded machine: then it is counted as timed out, not delivered.
                let timed_out = rx.stats().reassembly_timeouts > timeouts;
                if keyed && altered {
                    let counted = refused(&rx.stats()) - refused_before;
                    let ok = (got == 0 && (counted == 1 || timed_out)) || (got == 1 && counted == 0);
                    assert!(ok, "an altered packet delivered {got} times, refused {counted}: {:?}", rx.stats());
                    last = Some((frames, got));
                    continue;
                }
                assert!(got == 1 || (got == 0 && timed_out), "packet delivered {got} times");
                last = Some((frames, got));
            }
            Step::Replay { id_xor } => {
                let Some((frames, delivered)) = last.as_mut() else { continue };
                for f in frames.iter() {
                    let mut f = f.clone();
                    if let Ok((mut h, _)) = FrameHeader::parse(&f) {
                        // Not an id node 1 sends later in the script (ids count up by one
                        // per packet): a replay under it would make the real packet a
                        // duplicate, the frame header's documented limit (`link::mac`).
                        let id = h.packet_id ^ (id_xor | 1);
                        h.packet_id = if id.wrapping_sub(h.packet_id) <= 64 { id ^ 0x8000_0000 } else { id };
                        h.emit(&mut f);
                    }
                    inbox.lock().expect("queue").push_back(f);
                }
                while let Some(p) = poll(&mut rx, &inbox, &mut buf) {
                    if p.src == SENDER {
                        *delivered += 1;
                    }
                }
                assert!(!keyed || *delivered <= 1, "under a key, a replayed packet was delivered again");
            }
        }
    }
}
