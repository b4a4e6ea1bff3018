// SPDX-License-Identifier: GPL-2.0-only
//! The link under a cluster key: links with the same key talk over every send path; with
//! different keys, or a key on one end only, nothing is delivered and every packet is
//! counted in `mac_rejected`; a frame changed in flight (a flipped bit, a forged source,
//! a stripped tag, each with its CRC made good again) and an outsider's datagram from a
//! plain UDP socket are rejected, counted and never delivered.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::wire::SRC_OFFSET;
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::{InProcSwitch, UdpBackend};
use trapeze_vnic::link::frame::{FrameHeader, FLAG_MAC, HEADER_BYTES};
use trapeze_vnic::link::mac::{SEAL_BYTES, TAG_BYTES};
use trapeze_vnic::link::{FaultConfig, Link, TRAILER_BYTES};

const LOCALHOST: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
/// How long a receiver waits for a packet that should come (or, for one that must not,
/// long enough that it would have come).
const WAIT: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(300);

fn key(b: u8) -> ClusterKey {
    ClusterKey::from_bytes([b; 32])
}

/// A packet of `len` bytes from `src` to `dst` (Trapeze header fields the link reads).
fn packet(src: u16, dst: u16, len: usize, seed: u8) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    p[SRC_OFFSET..SRC_OFFSET + 2].copy_from_slice(&src.to_le_bytes());
    p[6..8].copy_from_slice(&dst.to_le_bytes());
    p[8..10].copy_from_slice(&0u16.to_le_bytes());
    p
}

/// The next packet `link` delivers within `wait`: (bytes, source, crc_ok).
fn recv(link: &mut Link, wait: Duration) -> Option<(Vec<u8>, u16, bool)> {
    let t0 = Instant::now();
    loop {
        if let Some(p) = link.poll_packet_with(|b, src, ok| (b.to_vec(), src, ok)) {
            return Some(p);
        }
        if t0.elapsed() > wait {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn keyed(mut l: Link, k: Option<&ClusterKey>) -> Link {
    l.set_key(k);
    l
}

/// Nodes 1 and 2 on UDP loopback, each knowing the other at its real address.
fn udp_pair(ka: Option<&ClusterKey>, kb: Option<&ClusterKey>) -> (Link, Link) {
    let mut a = UdpBackend::bind(LOCALHOST).unwrap();
    let mut b = UdpBackend::bind(LOCALHOST).unwrap();
    a.add_peer(2, b.local_addr());
    b.add_peer(1, a.local_addr());
    (keyed(Link::new(1, Box::new(a), FaultConfig::NONE), ka), keyed(Link::new(2, Box::new(b), FaultConfig::NONE), kb))
}

fn inproc_pair(ka: Option<&ClusterKey>, kb: Option<&ClusterKey>, faults: FaultConfig) -> (Link, Link) {
    let sw = InProcSwitch::new();
    (keyed(Link::new(1, Box::new(sw.port(1)), faults), ka), keyed(Link::new(2, Box::new(sw.port(2)), faults), kb))
}

#[test]
fn links_with_the_same_key_talk_on_every_path() {
    let k = key(7);
    // Over memory: one frame with a verdict; 70 KB in two frames with a CRC; through the
    // fault injector (duplicates on, so the general path) one and two frames.
    let dup = FaultConfig { duplicate_ppm: 1_000_000, ..FaultConfig::NONE };
    let mut pairs = [
        ("in-process", inproc_pair(Some(&k), Some(&k), FaultConfig::NONE)),
        ("in-process, duplicating", inproc_pair(Some(&k), Some(&k), dup)),
        ("udp", udp_pair(Some(&k), Some(&k))),
    ];
    for (what, (a, b)) in pairs.iter_mut() {
        for (i, len) in [32usize, 200, 8192 + 160, 70_000, 100_000].into_iter().enumerate() {
            let p = packet(1, 2, len, i as u8);
            a.send_packet(&p, false).unwrap();
            let got = recv(b, WAIT).unwrap_or_else(|| panic!("{what}: packet of {len} B not delivered"));
            assert!(got.0 == p, "{what}: packet of {len} B delivered changed");
            assert_eq!((got.1, got.2), (1, true), "{what}: {len} B");
        }
        // An aborted packet still authenticates and arrives with a bad CRC.
        a.send_packet(&packet(1, 2, 300, 9), true).unwrap();
        let got = recv(b, WAIT).unwrap_or_else(|| panic!("{what}: aborted packet not delivered"));
        assert_eq!((got.0.len(), got.2), (300, false), "{what}");
        assert!(recv(b, Duration::ZERO).is_none(), "{what}: a duplicate was delivered");
        let s = b.stats();
        assert_eq!((s.mac_rejected, s.packets_received, s.crc_errors), (0, 6, 1), "{what}: {s:?}");
        assert!(a.is_authenticated() && b.is_authenticated());
    }
}

#[test]
fn different_keys_or_a_key_on_one_end_only_deliver_nothing_and_count_it() {
    let (k1, k2) = (key(1), key(2));
    let cases = [(Some(&k1), Some(&k2)), (Some(&k1), None), (None, Some(&k1))];
    for (ka, kb) in cases {
        for link in ["in-process", "udp"] {
            let (mut a, mut b) = match link {
                "udp" => udp_pair(ka, kb),
                _ => inproc_pair(ka, kb, FaultConfig::NONE),
            };
            let sizes = [32usize, 8192, 100_000];
            for (i, len) in sizes.into_iter().enumerate() {
                a.send_packet(&packet(1, 2, len, i as u8), false).unwrap();
            }
            let what = format!("{link}, keys {:?} / {:?}", ka.is_some(), kb.is_some());
            assert_eq!(recv(&mut b, QUIET), None, "{what}: a packet got through");
            let s = b.stats();
            assert_eq!(s.mac_rejected, sizes.len() as u64, "{what}: {s:?}");
            let by: Vec<(u16, u64)> = s.mac_rejected_by.iter().collect();
            assert_eq!(by, [(1, sizes.len() as u64)], "{what}: counted by the source the packets claim");
            assert_eq!(s.packets_received, 0, "{what}");
        }
    }
}

/// A man in the middle on UDP: node 1 sends to it, node 2 takes it for node 1 (and 3).
struct Middle {
    a: Link,
    b: Link,
    b_addr: SocketAddr,
    sock: UdpSocket,
}

impl Middle {
    fn new(k: &ClusterKey) -> Middle {
        let sock = UdpSocket::bind(LOCALHOST).unwrap();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        let at = sock.local_addr().unwrap();
        let mut a = UdpBackend::bind(LOCALHOST).unwrap();
        let mut b = UdpBackend::bind(LOCALHOST).unwrap();
        a.add_peer(2, at);
        b.add_peer(1, at);
        b.add_peer(3, at);
        let b_addr = b.local_addr();
        let (a, b) = (Link::new(1, Box::new(a), FaultConfig::NONE), Link::new(2, Box::new(b), FaultConfig::NONE));
        Middle { a: keyed(a, Some(k)), b: keyed(b, Some(k)), b_addr, sock }
    }

    /// Node 1 sends `p`; the middle changes the datagram with `change` and passes it on.
    fn relay(&mut self, p: &[u8], change: impl FnOnce(&mut Vec<u8>)) {
        self.a.send_packet(p, false).unwrap();
        let mut d = vec![0u8; 70_000];
        let n = self.sock.recv(&mut d).expect("the middle receives node 1's datagram");
        d.truncate(n);
        change(&mut d);
        self.sock.send_to(&d, self.b_addr).unwrap();
    }
}

/// Make the frame's CRC trailer good again for its (changed) bytes.
fn fix_crc(d: &mut [u8]) {
    let n = d.len();
    let crc = crc32fast::hash(&d[HEADER_BYTES..n - TRAILER_BYTES]);
    d[n - TRAILER_BYTES..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn frames_changed_in_flight_are_rejected_counted_and_never_delivered() {
    let k = key(5);
    let mut m = Middle::new(&k);
    let p = packet(1, 2, 8192 + 160, 3);
    // Untouched: delivered (so the changes below are what gets them rejected).
    m.relay(&p, |_| {});
    assert_eq!(recv(&mut m.b, WAIT).map(|g| g.0 == p), Some(true));
    type Change = fn(&mut Vec<u8>);
    let changes: [(&str, Change); 5] = [
        ("a flipped payload bit", |d| {
            d[HEADER_BYTES + 4000] ^= 0x08;
            fix_crc(d);
        }),
        ("a flipped header bit", |d| {
            d[HEADER_BYTES + 12] ^= 0x01;
            fix_crc(d);
        }),
        ("a forged source (frame and stamped id)", |d| {
            d[4..6].copy_from_slice(&3u16.to_le_bytes());
            d[HEADER_BYTES + SRC_OFFSET..HEADER_BYTES + SRC_OFFSET + 2].copy_from_slice(&3u16.to_le_bytes());
            fix_crc(d);
        }),
        ("a flipped tag bit", |d| {
            let n = d.len();
            d[n - TRAILER_BYTES - 1] ^= 0x80;
            fix_crc(d);
        }),
        ("the stamp and tag stripped and the flag cleared", |d| {
            let (mut h, _) = FrameHeader::parse(d).unwrap();
            let n = d.len();
            d.drain(n - TRAILER_BYTES - SEAL_BYTES..n - TRAILER_BYTES);
            h.flags &= !FLAG_MAC;
            h.total_len -= SEAL_BYTES as u32;
            h.emit(d);
            fix_crc(d);
        }),
    ];
    for (i, (what, change)) in changes.into_iter().enumerate() {
        m.relay(&p, change);
        assert_eq!(recv(&mut m.b, QUIET), None, "{what}: delivered");
        assert_eq!(m.b.stats().mac_rejected, i as u64 + 1, "{what}: not counted");
    }
    let s = m.b.stats();
    assert_eq!((s.packets_received, s.bad_frames, s.crc_errors), (1, 0, 0), "{s:?}");
}

/// A well-formed frame as an outsider without the key would write it: header, packet,
/// `tag` (if any) and a good CRC.
/// Each gets its own packet id (one id twice is a duplicate, dropped before the MAC).
fn outsider_frame(id: u32, src: u16, dst: u16, p: &[u8], tag: Option<[u8; TAG_BYTES]>) -> Vec<u8> {
    let extra = tag.map_or(0, |_| TAG_BYTES);
    let total = p.len() + extra + TRAILER_BYTES;
    let mut d = vec![0u8; HEADER_BYTES + total];
    FrameHeader {
        flags: if tag.is_some() { FLAG_MAC } else { 0 },
        src,
        dst,
        packet_id: id,
        frag_index: 0,
        frag_count: 1,
        total_len: total as u32,
        frag_offset: 0,
    }
    .emit(&mut d);
    d[HEADER_BYTES..HEADER_BYTES + p.len()].copy_from_slice(p);
    if let Some(t) = tag {
        d[HEADER_BYTES + p.len()..HEADER_BYTES + p.len() + TAG_BYTES].copy_from_slice(&t);
    }
    fix_crc(&mut d);
    d
}

#[test]
fn an_outsiders_datagrams_are_rejected_counted_and_never_delivered() {
    let k = key(9);
    // The outsider holds node 1's address (it took it over, or spoofs it): only the MAC
    // stands between it and node 2.
    let outsider = UdpSocket::bind(LOCALHOST).unwrap();
    let mut b = UdpBackend::bind(LOCALHOST).unwrap();
    b.add_peer(1, outsider.local_addr().unwrap());
    let at = b.local_addr();
    let mut b = keyed(Link::new(2, Box::new(b), FaultConfig::NONE), Some(&k));
    let p = packet(1, 2, 4096, 1);
    let sent = [
        outsider_frame(1, 1, 2, &p, Some([0x42; TAG_BYTES])),
        outsider_frame(2, 1, 2, &p, Some([0; TAG_BYTES])),
        outsider_frame(3, 1, 2, &p, None),
        outsider_frame(4, 1, 2, &p[..32], None),
    ];
    for d in &sent {
        outsider.send_to(d, at).unwrap();
    }
    assert_eq!(recv(&mut b, QUIET), None, "an outsider's packet was delivered");
    assert_eq!(b.stats().mac_rejected, sent.len() as u64, "{:?}", b.stats());
    // From an address that is no node's, the backend drops it before the MAC.
    let stranger = UdpSocket::bind(LOCALHOST).unwrap();
    stranger.send_to(&sent[0], at).unwrap();
    assert_eq!(recv(&mut b, QUIET), None);
    let s = b.stats();
    assert_eq!((s.foreign_frames, s.mac_rejected, s.packets_received), (1, sent.len() as u64, 0), "{s:?}");
}
