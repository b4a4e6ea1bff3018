// SPDX-License-Identifier: GPL-2.0-only
//! Replays under a cluster key: a recorded packet delivered again, one older than the
//! receive window, one from the sender's previous incarnation, and a trailer whose verdict
//! was flipped are refused and counted by name; packets reordered within the window get
//! through; truncated or garbage stamps are refused without a panic.

use trapeze_firmware::iface::wire::SRC_OFFSET;
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::frame::{FrameHeader, FLAG_MAC, FLAG_VERDICT, HEADER_BYTES, VERDICT_GOOD};
use trapeze_vnic::link::mac::SEAL_BYTES;
use trapeze_vnic::link::replay::WINDOW_PACKETS;
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend, LinkStats, TRAILER_BYTES};

fn key() -> ClusterKey {
    ClusterKey::from_bytes([3; 32])
}

/// A packet of `len` bytes from node 1 to node 2.
fn packet(len: usize, seed: u8) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
    p[SRC_OFFSET..SRC_OFFSET + 2].copy_from_slice(&1u16.to_le_bytes());
    p[6..8].copy_from_slice(&2u16.to_le_bytes());
    p[8..10].copy_from_slice(&0u16.to_le_bytes());
    p
}

/// Node 1's keyed link on `sw` (a new incarnation each time), with `faults`.
fn sender(sw: &InProcSwitch, faults: FaultConfig) -> Link {
    let mut a = Link::new(1, Box::new(sw.port(1)), faults);
    a.set_key(Some(&key()));
    a
}

/// What node 1 sends with `send`, taken raw off node 2's port (before node 2's link exists).
fn capture(sw: &InProcSwitch, send: impl FnOnce()) -> Vec<Vec<u8>> {
    let mut raw = sw.port(2);
    send();
    let mut buf = vec![0u8; 80_000];
    let mut out = Vec::new();
    while let Some(n) = raw.try_recv_frame(&mut buf).unwrap() {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Node 2's keyed link and a port to put frames in front of it.
fn receiver(sw: &InProcSwitch) -> (Link, impl LinkBackend) {
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    b.set_key(Some(&key()));
    (b, sw.port(9))
}

/// Every packet `b` delivers now: (length, crc_ok).
fn drain(b: &mut Link) -> Vec<(usize, bool)> {
    std::iter::from_fn(|| b.poll_packet_with(|body, _, ok| (body.len(), ok))).collect()
}

/// The frame with another packet id, as an attacker would send a replay the
/// reassembler does not take for a duplicate (the id is not under the tag).
fn with_id(f: &[u8], id: u32) -> Vec<u8> {
    let mut f = f.to_vec();
    let (mut h, _) = FrameHeader::parse(&f).unwrap();
    h.packet_id = id;
    h.emit(&mut f);
    f
}

fn refusals(s: &LinkStats) -> (u64, u64, u64, u64) {
    (s.replayed, s.replay_stale_epoch, s.trailer_forged, s.mac_rejected)
}

#[test]
fn a_packet_delivered_twice_is_refused_the_second_time_on_both_paths() {
    let sw = InProcSwitch::new();
    // One verdict frame; a packet of two CRC frames.
    let frames = capture(&sw, || {
        let mut a = sender(&sw, FaultConfig::NONE);
        a.send_packet(&packet(500, 1), false).unwrap();
        a.send_packet(&packet(70_000, 2), false).unwrap();
    });
    assert_eq!(frames.len(), 3);
    let (mut b, mut inj) = receiver(&sw);
    for f in &frames {
        inj.send_frame(2, f).unwrap();
    }
    assert_eq!(drain(&mut b), [(500, true), (70_000, true)]);
    // Again, under new packet ids so that only the stamps can tell.
    for f in &frames {
        inj.send_frame(2, &with_id(f, 7)).unwrap();
    }
    assert_eq!(drain(&mut b), []);
    let s = b.stats();
    assert_eq!(refusals(&s), (2, 0, 0, 0), "{s:?}");
    assert_eq!(s.replay_rejected_by.iter().collect::<Vec<_>>(), [(1, 2)]);
    assert_eq!(s.packets_received, 2);
}

#[test]
fn reordered_within_the_window_is_accepted_older_than_it_refused() {
    let sw = InProcSwitch::new();
    let n = WINDOW_PACKETS as usize + 10;
    let frames = capture(&sw, || {
        let mut a = sender(&sw, FaultConfig::NONE);
        for i in 0..n {
            a.send_packet(&packet(100, i as u8), false).unwrap();
        }
    });
    assert_eq!(frames.len(), n);
    let (mut b, mut inj) = receiver(&sw);
    // The first 20 backwards, then the rest but the 11th from last in order.
    for f in frames[..20].iter().rev() {
        inj.send_frame(2, f).unwrap();
    }
    let late = n - 11;
    for (i, f) in frames.iter().enumerate().skip(20) {
        if i != late {
            inj.send_frame(2, f).unwrap();
        }
    }
    assert_eq!(drain(&mut b).len(), n - 1, "{:?}", b.stats());
    // The held one is still inside the window; the first is now below it.
    inj.send_frame(2, &frames[late]).unwrap();
    assert_eq!(drain(&mut b).len(), 1, "reordered within the window: {:?}", b.stats());
    inj.send_frame(2, &with_id(&frames[0], 1)).unwrap();
    assert_eq!(drain(&mut b), []);
    assert_eq!(refusals(&b.stats()), (1, 0, 0, 0), "{:?}", b.stats());
}

#[test]
fn a_previous_incarnations_packet_is_refused_after_a_restart() {
    let sw = InProcSwitch::new();
    let old = capture(&sw, || sender(&sw, FaultConfig::NONE).send_packet(&packet(100, 1), false).unwrap());
    let (mut b, mut inj) = receiver(&sw);
    {
        // Node 1 restarts after the packet was recorded but before it arrives.
        let mut a = sender(&sw, FaultConfig::NONE);
        a.send_packet(&packet(100, 2), false).unwrap();
    }
    assert_eq!(drain(&mut b), [(100, true)]);
    inj.send_frame(2, &with_id(&old[0], 99)).unwrap();
    assert_eq!(drain(&mut b), []);
    assert_eq!(refusals(&b.stats()), (0, 1, 0, 0), "{:?}", b.stats());
}

#[test]
fn a_flipped_verdict_is_refused_as_a_forged_trailer() {
    let sw = InProcSwitch::new();
    // A verdict frame, and (faults configured, so CRC trailers) one-frame packets good and
    // aborted.
    let crc = FaultConfig { duplicate_ppm: 1, ..FaultConfig::NONE };
    let verdicts = capture(&sw, || {
        let mut a = sender(&sw, FaultConfig::NONE);
        a.send_packet(&packet(100, 1), false).unwrap();
        a.send_packet(&packet(100, 2), true).unwrap();
    });
    let crcs = capture(&sw, || {
        let mut a = sender(&sw, crc);
        a.send_packet(&packet(100, 3), false).unwrap();
        a.send_packet(&packet(100, 4), true).unwrap();
    });
    assert_eq!(FrameHeader::parse(&verdicts[0]).unwrap().0.flags, FLAG_VERDICT | FLAG_MAC);
    assert_eq!(FrameHeader::parse(&crcs[0]).unwrap().0.flags, FLAG_MAC);
    let (mut b, mut inj) = receiver(&sw);
    let set_trailer = |f: &[u8], t: [u8; 4]| {
        let mut f = f.to_vec();
        let n = f.len();
        f[n - TRAILER_BYTES..].copy_from_slice(&t);
        f
    };
    let crc_of = |f: &[u8]| crc32fast::hash(&f[HEADER_BYTES..f.len() - TRAILER_BYTES]);
    let forged = [
        set_trailer(&verdicts[0], *b"BAD!"),     // a good packet made aborted
        set_trailer(&verdicts[1], VERDICT_GOOD), // an aborted packet made good
        set_trailer(&crcs[0], (!crc_of(&crcs[0])).to_le_bytes()),
        set_trailer(&crcs[1], crc_of(&crcs[1]).to_le_bytes()),
    ];
    for f in &forged {
        inj.send_frame(2, f).unwrap();
    }
    assert_eq!(drain(&mut b), []);
    assert_eq!(refusals(&b.stats()), (0, 0, 4, 0), "{:?}", b.stats());
    // The packets as sent: the good ones good, the aborted ones aborted (the forgeries
    // took no sequence numbers).
    for f in verdicts.iter().chain(&crcs) {
        inj.send_frame(2, &with_id(f, 1000 + f.len() as u32 + f[HEADER_BYTES + 20] as u32)).unwrap();
    }
    let got = drain(&mut b);
    assert_eq!(got, [(100, true), (100, false), (100, true), (100, false)], "{:?}", b.stats());
}

#[test]
fn truncated_or_garbage_stamps_are_refused_without_a_panic() {
    let sw = InProcSwitch::new();
    let frames = capture(&sw, || sender(&sw, FaultConfig::NONE).send_packet(&packet(64, 1), false).unwrap());
    let (mut b, mut inj) = receiver(&sw);
    let whole = &frames[0];
    let body = whole.len() - HEADER_BYTES;
    // Packets cut to every length from the trailer alone up to just short of a seal, their
    // frames made consistent again.
    for keep in TRAILER_BYTES..SEAL_BYTES + TRAILER_BYTES + 2 {
        let mut f = whole[..HEADER_BYTES].to_vec();
        f.extend_from_slice(&whole[whole.len() - keep..]);
        let (mut h, _) = FrameHeader::parse(whole).unwrap();
        h.total_len = keep as u32;
        h.packet_id = keep as u32;
        h.emit(&mut f);
        inj.send_frame(2, &f).unwrap();
    }
    // Every stamp byte changed, alone, to 0 and to 0xff.
    let stamp_at = HEADER_BYTES + body - TRAILER_BYTES - SEAL_BYTES;
    let mut sent = 0;
    for i in 0..16 {
        for v in [0u8, 0xff] {
            let mut f = with_id(whole, 500 + sent);
            if f[stamp_at + i] == v {
                continue;
            }
            f[stamp_at + i] = v;
            inj.send_frame(2, &f).unwrap();
            sent += 1;
        }
    }
    assert_eq!(drain(&mut b), []);
    let s = b.stats();
    let cut = (SEAL_BYTES + 2) as u64;
    assert_eq!(refusals(&s), (0, 0, 0, cut + sent as u64), "{s:?}");
    // And the packet itself still gets through.
    inj.send_frame(2, whole).unwrap();
    assert_eq!(drain(&mut b), [(64, true)]);
}

#[test]
fn without_a_key_nothing_new_is_on_the_wire() {
    let sw = InProcSwitch::new();
    let frames = capture(&sw, || {
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        a.send_packet(&packet(100, 1), false).unwrap();
    });
    let (h, frag) = FrameHeader::parse(&frames[0]).unwrap();
    assert_eq!((h.flags, frag.len()), (FLAG_VERDICT, 100 + TRAILER_BYTES));
}
