// SPDX-License-Identifier: GPL-2.0-only
//! Tests of the link: sends read once in order, lent frames, verdicts, the wire delay, the CRC.

use super::backend::{InProcSwitch, UdpBackend};
use super::testing::{Hooks, Wrap};
use super::*;

fn packet(len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
    p[6..8].copy_from_slice(&2u16.to_le_bytes());
    p
}

#[test]
fn send_from_asks_for_each_byte_once_in_order() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let p = packet(70_000); // two frames on the in-process switch
    let mut asked = Vec::new();
    a.send_packet_from(p.len(), false, &mut |off, buf| {
        asked.push((off, buf.len()));
        buf.copy_from_slice(&p[off..off + buf.len()]);
        true
    })
    .unwrap();
    // The route peek (destination and control-message length), then every byte
    // once, in order.
    assert_eq!(asked[0], (0, 12));
    let mut next = 0;
    for &(off, len) in &asked[1..] {
        assert_eq!(off, next);
        next += len;
    }
    assert_eq!(next, p.len());
    let mut out = vec![0u8; 80_000];
    let rx = b.poll_packet(&mut out).unwrap();
    assert_eq!((rx.len, rx.crc_ok), (p.len(), true));
    assert_eq!(&out[..p.len()], &p[..]);
    assert_eq!(a.stats().frames_sent, 2);
}

#[test]
fn whole_frame_packets_are_lent_once_and_duplicates_dropped() {
    let sw = InProcSwitch::new();
    let dup = FaultConfig { duplicate_ppm: 1_000_000, ..FaultConfig::NONE };
    let mut a = Link::new(1, Box::new(sw.port(1)), dup);
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let p = packet(9000);
    a.send_packet(&p, false).unwrap();
    a.send_packet(&p[..100], true).unwrap();
    let got = b.poll_packet_with(|body, src, ok| (body.to_vec(), src, ok));
    assert_eq!(got, Some((p.clone(), 1, true)));
    // The duplicate of the first is ignored; the aborted second comes with a bad CRC.
    let got = b.poll_packet_with(|body, _, ok| (body.len(), ok));
    assert_eq!(got, Some((100, false)));
    assert_eq!(b.poll_packet_with(|_, _, _| ()), None);
    let s = b.stats();
    assert_eq!((s.packets_received, s.duplicate_frames, s.crc_errors), (2, 2, 1));
}

/// Every frame a backend has queued, taken raw.
fn raw_frames(port: &mut dyn LinkBackend) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 80_000];
    let mut out = Vec::new();
    while let Some(n) = port.try_recv_frame(&mut buf).unwrap() {
        out.push(buf[..n].to_vec());
    }
    out
}

#[test]
fn checked_media_carry_a_verdict_believed_only_there() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let mut raw = sw.port(2);
    let p = packet(9000);
    a.send_packet(&p, false).unwrap();
    a.send_packet(&p[..100], true).unwrap();
    a.send_packet(&packet(70_000), false).unwrap(); // two frames: a real CRC
    let frames = raw_frames(&mut raw);
    assert_eq!(frames.len(), 4);
    let trailer = |f: &[u8]| {
        let (h, frag) = frame::FrameHeader::parse(f).unwrap();
        (h.flags, frag[frag.len() - TRAILER_BYTES..].to_vec())
    };
    assert_eq!(trailer(&frames[0]), (frame::FLAG_VERDICT, frame::VERDICT_GOOD.to_vec()));
    let (flags, t) = trailer(&frames[1]);
    assert_eq!(flags, frame::FLAG_VERDICT);
    assert_ne!(t, frame::VERDICT_GOOD.to_vec(), "an aborted packet's verdict is bad");
    assert_eq!(trailer(&frames[2]).0, 0);
    assert_eq!(trailer(&frames[3]).0, 0);

    // With faults configured the switch carries CRCs again.
    let dup = FaultConfig { duplicate_ppm: 1, ..FaultConfig::NONE };
    let mut c = Link::new(3, Box::new(sw.port(3)), dup);
    c.send_packet(&p, false).unwrap();
    let again = raw_frames(&mut raw);
    assert!(!again.is_empty());
    assert!(again.iter().all(|f| trailer(f).0 == 0));

    // Over the switch the good packet checks and the aborted one fails ...
    drop(raw);
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let mut injector = sw.port(9);
    for f in &frames[..2] {
        injector.send_frame(2, f).unwrap();
    }
    assert_eq!(b.poll_packet_with(|body, _, ok| (body.to_vec(), ok)), Some((p.clone(), true)));
    assert_eq!(b.poll_packet_with(|body, _, ok| (body.len(), ok)), Some((100, false)));
    assert_eq!(b.stats().crc_errors, 1);

    // ... and so do they over UDP, whose datagrams the kernels check; a duplicated
    // datagram is still caught (UDP may duplicate, unlike the switch) ...
    let mut udp = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = udp.local_addr();
    // The frame names node 1: it must come from node 1's address to be taken at all.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.add_peer(1, sock.local_addr().unwrap());
    let mut u = Link::new(2, Box::new(udp), FaultConfig::NONE);
    for f in [&frames[0], &frames[0], &frames[1]] {
        sock.send_to(f, addr).unwrap();
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < 2 || u.stats().frames_received < 3 {
        if let Some(r) = u.poll_packet_with(|body, _, ok| (body.len(), ok)) {
            got.push(r);
        }
        assert!(Instant::now() < deadline, "the UDP frames never arrived");
    }
    assert_eq!(got, [(9000, true), (100, false)]);
    let s = u.stats();
    assert_eq!((s.crc_errors, s.duplicate_frames), (1, 1));

    // ... while a medium that neither is memory nor checks its frames never believes one.
    drop(b);
    let mut plain = Link::new(2, Box::new(Wrap::new(sw.port(2), Unchecked)), FaultConfig::NONE);
    injector.send_frame(2, &frames[0]).unwrap();
    assert_eq!(plain.poll_packet_with(|body, _, ok| (body.len(), ok)), Some((9000, false)));
    assert_eq!(plain.stats().crc_errors, 1);
}

/// Hooks that make a switch port say it is neither a memory medium nor one that checks
/// frames (as raw Ethernet): what the link does over such a medium.
struct Unchecked;

impl Hooks<backend::InProcPort> for Unchecked {
    fn plain_medium(&self) -> bool {
        true
    }
    fn describe(&self, _: &backend::InProcPort) -> String {
        "unchecked".into()
    }
}

#[test]
fn udp_sends_one_frame_packets_with_a_verdict_and_others_with_a_crc() {
    let bind = || UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut ua = bind();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    ua.add_peer(2, sock.local_addr().unwrap());
    let mut a = Link::new(1, Box::new(ua), FaultConfig::NONE);
    a.send_packet(&packet(9000), false).unwrap();
    a.send_packet(&packet(70_000), false).unwrap(); // two frames: a real CRC
    let corrupt = FaultConfig { corrupt_ppm: 1, ..FaultConfig::NONE };
    let mut uc = bind();
    uc.add_peer(2, sock.local_addr().unwrap());
    let mut c = Link::new(3, Box::new(uc), corrupt);
    c.send_packet(&packet(9000), false).unwrap(); // faults configured: a CRC
    let mut buf = vec![0u8; 70_000];
    let flags: Vec<u8> = (0..4)
        .map(|_| {
            let n = sock.recv(&mut buf).unwrap();
            frame::FrameHeader::parse(&buf[..n]).unwrap().0.flags
        })
        .collect();
    assert_eq!(flags, [frame::FLAG_VERDICT, 0, 0, 0]);
}

#[test]
fn a_wire_delay_holds_packets_for_it_in_order_and_keeps_verdicts() {
    let sw = InProcSwitch::new();
    let delay = std::time::Duration::from_millis(2);
    let wire = FaultConfig { delay_ns: delay.as_nanos() as u64, ..FaultConfig::NONE };
    let mut a = Link::new(1, Box::new(sw.port(1)), wire);
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let (p, big) = (packet(9000), packet(70_000));
    let t0 = Instant::now();
    a.send_packet(&p, false).unwrap();
    a.send_packet(&big, false).unwrap();
    a.send_packet(&p[..100], true).unwrap();
    // The sender's next timer is the first frame's arrival.
    assert!(a.poll_deadline().is_some_and(|d| d >= t0 + delay));
    assert!(a.has_timers());
    let mut got = Vec::new();
    while got.len() < 3 {
        a.poll_timers().unwrap();
        if let Some(r) = b.poll_packet_with(|body, _, ok| (body.to_vec(), ok, Instant::now())) {
            got.push(r);
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "delayed packets never arrived");
    }
    assert!(got.iter().all(|g| g.2 >= t0 + delay), "a packet beat the wire delay");
    assert_eq!((&got[0].0, got[0].1), (&p, true));
    assert_eq!((&got[1].0, got[1].1), (&big, true));
    assert_eq!((got[2].0.len(), got[2].1), (100, false), "the aborted packet still fails");
    assert_eq!(a.stats().frames_sent, 4);
    assert!(a.poll_deadline().is_none() && !a.has_timers());

    // A delay is not a fault: one-frame packets still carry a verdict.
    let mut raw = sw.port(3);
    let mut c = Link::new(4, Box::new(sw.port(4)), wire);
    let mut p3 = p.clone();
    p3[6..8].copy_from_slice(&3u16.to_le_bytes());
    c.send_packet(&p3, false).unwrap();
    c.flush().unwrap();
    let frames = raw_frames(&mut raw);
    assert_eq!(frames.len(), 1);
    assert_eq!(frame::FrameHeader::parse(&frames[0]).unwrap().0.flags, frame::FLAG_VERDICT);
}

#[test]
fn crc_matches_the_firmware() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
    assert_eq!(crc32fast::hash(&data), trapeze_firmware::iface::wire::crc32(&data));
    assert_eq!(crc32fast::hash(b""), trapeze_firmware::iface::wire::crc32(b""));
}

#[test]
fn a_udp_look_receives_ahead_and_keeps_the_lent_frame() {
    let bind = || UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let (mut ua, mut ub) = (bind(), bind());
    ua.add_peer(2, ub.local_addr());
    ub.add_peer(1, ua.local_addr());
    let mut a = Link::new(1, Box::new(ua), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(ub), FaultConfig::NONE);
    let (p, mut q) = (packet(9000), packet(5000));
    q[40] ^= 0xFF;
    assert!(!b.rx_pending(), "nothing sent yet");
    assert!(b.prepare_wait());
    a.send_packet(&p, false).unwrap();
    a.send_packet(&q, false).unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while !b.rx_pending() {
        assert!(Instant::now() < deadline, "the first datagram never arrived");
    }
    // The look took the first datagram: the socket no longer shows it, so no sleeping.
    assert!(!b.prepare_wait());
    let held = b.poll_packet_held_with(|body, _, ok, held| (body.to_vec(), ok, held));
    assert_eq!(held, Some((p.clone(), true, true)));
    // A look for the next one leaves the lent frame as it was.
    while !b.rx_pending() {
        assert!(Instant::now() < deadline, "the second datagram never arrived");
    }
    assert_eq!(b.held_packet(), Some(&p[..]));
    assert_eq!(b.poll_packet_with(|body, _, ok| (body.to_vec(), ok)), Some((q, true)));
    assert!(!b.rx_pending());
    let s = b.stats();
    assert_eq!((s.packets_received, s.crc_errors, s.frames_received), (2, 0, 2));
}

/// Counts the receives asked of the backend it wraps.
struct CountReceives(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<B: LinkBackend> Hooks<B> for CountReceives {
    fn receiving(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn over_udp_an_inline_nics_receive_after_a_delivery_does_not_look_and_loses_nothing() {
    let bind = || UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let (mut ua, mut ub) = (bind(), bind());
    ua.add_peer(2, ub.local_addr());
    ub.add_peer(1, ua.local_addr());
    let looks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let looked = || looks.load(std::sync::atomic::Ordering::Relaxed);
    let mut a = Link::new(1, Box::new(ua), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(Wrap::new(ub, CountReceives(looks.clone()))), FaultConfig::NONE);
    // Three packets, the last of two frames (over 65,000 bytes), all in the socket first.
    let (p, q, r) = (packet(9000), packet(100), packet(70_000));
    let send_all = |a: &mut Link| {
        for x in [&p, &q, &r] {
            a.send_packet(x, false).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = vec![0u8; 80_000];
    let mut got = |b: &mut Link| b.poll_packet(&mut out).map(|rx| out[..rx.len].to_vec());
    // A caller that never asks rx_pending (a NIC on its own thread) looks in every receive.
    send_all(&mut a);
    for x in [&p, &q, &r] {
        assert_eq!(got(&mut b).as_ref(), Some(x));
    }
    assert_eq!(got(&mut b), None);
    // One that asks (an inline NIC) leaves the look after a delivery to rx_pending.
    assert!(!b.rx_pending(), "nothing sent yet");
    send_all(&mut a);
    assert_eq!(got(&mut b), Some(p));
    let n = looked();
    // Right after a delivery: no look, though a datagram waits; the next receive looks.
    assert_eq!(got(&mut b), None);
    assert_eq!(looked(), n, "the receive after a delivery asked the socket");
    assert_eq!(got(&mut b), Some(q));
    // A look through rx_pending is one: the receive after it takes what it found (the
    // first frame of r) and the second frame with it, in one call.
    assert!(b.rx_pending());
    assert_eq!(got(&mut b), Some(r));
    assert_eq!(got(&mut b), None);
    assert_eq!(got(&mut b), None);
    assert!(!b.rx_pending());
    let s = b.stats();
    assert_eq!((s.packets_received, s.crc_errors, s.frames_received), (6, 0, 8));
}

#[test]
fn the_control_blocks_link_counters_are_the_stats_fields_of_their_names() {
    let mut s = LinkStats::default();
    let fields = [
        &mut s.mac_rejected,
        &mut s.replayed,
        &mut s.replay_stale_epoch,
        &mut s.replay_table_full,
        &mut s.trailer_forged,
        &mut s.crc_errors,
        &mut s.bad_frames,
        &mut s.foreign_frames,
        &mut s.reassembly_timeouts,
        &mut s.rx_queue_drops,
    ];
    for (i, f) in fields.into_iter().enumerate() {
        *f = 100 + i as u64;
    }
    let json = serde_json::to_value(s).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for c in LinkCounter::ALL {
        assert_eq!(json[c.name()].as_u64(), Some(s.counter(c)), "{c:?} is the field {}", c.name());
        assert!(seen.insert(s.counter(c)), "{c:?} reads a field another counter reads too");
    }
}
