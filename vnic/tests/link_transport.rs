// SPDX-License-Identifier: GPL-2.0-only
//! Whole Trapeze packets over the link: in-process switch and UDP on 127.0.0.1, clean and
//! with seeded faults. Every wait is bounded.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use trapeze_firmware::iface::wire::Header;
use trapeze_vnic::link::backend::{InProcPort, InProcSwitch, UdpBackend};
use trapeze_vnic::link::testing::{Hooks, Wrap};
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend, LinkStats, RxPacket, REASSEMBLY_TIMEOUT};

const WAIT: Duration = Duration::from_secs(5);
const PAYLOADS: [usize; 4] = [0, 4096, 8192, 65536];

/// A Trapeze packet from `src` to `dst`, tagged `tag` (in `seq` and in every payload
/// byte pattern) so a delivered packet can be matched to exactly one sent.
fn packet(src: u16, dst: u16, tag: u32, payload: usize) -> Vec<u8> {
    let ctrl = [0xC5u8; 12];
    let h = Header { flags: 0, src, dst, ctrl_len: ctrl.len() as u16, payload_len: payload as u32, token: 0, seq: tag };
    let mut p = h.to_bytes().to_vec();
    p.extend_from_slice(&ctrl);
    p.resize(h.prefix_bytes() as usize, 0);
    p.extend((0..payload).map(|i| (i as u32 ^ tag.wrapping_mul(0x9E37_79B9) >> 7) as u8));
    assert_eq!(p.len(), h.packet_bytes() as usize);
    p
}

fn tag_of(p: &[u8]) -> u32 {
    u32::from_le_bytes([p[24], p[25], p[26], p[27]])
}

/// Wait until `fd` polls readable or `until` passes.
fn wait_readable(fd: Option<BorrowedFd<'_>>, until: Instant) {
    let left = until.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
    let ts = Timespec { tv_sec: 0, tv_nsec: left.as_nanos() as i64 };
    match fd {
        Some(fd) => {
            let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
            let _ = poll(&mut fds, Some(&ts));
        }
        None => std::thread::sleep(left),
    }
}

/// The next packet on `link`, waiting on its fd for at most [`WAIT`].
fn recv(link: &mut Link, out: &mut [u8]) -> Option<RxPacket> {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(p) = link.poll_packet(out) {
            return Some(p);
        }
        if Instant::now() >= until {
            return None;
        }
        wait_readable(link.readable_fd(), until);
    }
}

fn exchange_all_sizes(links: &mut [Link]) {
    let mut out = vec![0u8; 70_000];
    let mut tag = 0;
    for s in 0..links.len() {
        for d in 0..links.len() {
            if s == d {
                continue;
            }
            let (src, dst) = (links[s].node(), links[d].node());
            for payload in PAYLOADS {
                tag += 1;
                let p = packet(src, dst, tag, payload);
                links[s].send_packet(&p, false).unwrap();
                let rx = recv(&mut links[d], &mut out)
                    .unwrap_or_else(|| panic!("{src}->{dst} {payload} B: nothing within {WAIT:?}"));
                assert_eq!(rx, RxPacket { len: p.len(), src, crc_ok: true }, "{src}->{dst} {payload} B");
                assert!(out[..rx.len] == p[..], "{src}->{dst} {payload} B: bytes differ");
            }
            // An aborted packet arrives with a bad CRC.
            tag += 1;
            let p = packet(src, dst, tag, 100);
            links[s].send_packet(&p, true).unwrap();
            let rx = recv(&mut links[d], &mut out).expect("aborted packet");
            assert_eq!(rx, RxPacket { len: p.len(), src, crc_ok: false });
        }
    }
    for l in links.iter_mut() {
        assert!(l.poll_packet(&mut out).is_none(), "stray packet");
        let s = l.stats();
        // Every node sent to and received from each peer the same packets.
        let n = s.packets_sent;
        assert_eq!(s.packets_sent, n, "{s:?}");
        assert_eq!(s.packets_received, n, "{s:?}");
        assert_eq!(s.crc_errors, n / (PAYLOADS.len() as u64 + 1), "{s:?}");
        assert_eq!(s.frames_received, s.frames_sent, "{s:?}");
        assert_eq!((s.bad_frames, s.duplicate_frames, s.send_errors, s.unroutable), (0, 0, 0, 0), "{s:?}");
    }
}

#[test]
fn inproc_three_nodes_all_sizes() {
    let sw = InProcSwitch::new();
    let mut links: Vec<Link> = (1..=3).map(|n| Link::new(n, Box::new(sw.port(n)), FaultConfig::NONE)).collect();
    exchange_all_sizes(&mut links);
    // 2 peers x (4 sizes + 1 abort) each.
    assert_eq!(links[0].stats().packets_sent, 10);
    // 64 KiB payload + header + ctrl + trailer needs 2 frames of 64 KiB.
    let s = links[0].stats();
    assert_eq!(s.frames_sent, 2 * (1 + 1 + 1 + 2 + 1));
    assert_eq!(sw.dropped_frames(), 0);
}

#[test]
fn udp_three_nodes_all_sizes() {
    let mut backends: Vec<UdpBackend> =
        (0..3).map(|_| UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap()).collect();
    let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.local_addr()).collect();
    for b in &mut backends {
        for (i, a) in addrs.iter().enumerate() {
            b.add_peer(i as u16 + 1, *a);
        }
    }
    let mut links: Vec<Link> = backends
        .into_iter()
        .enumerate()
        .map(|(i, b)| Link::new(i as u16 + 1, Box::new(b), FaultConfig::NONE))
        .collect();
    assert!(links[0].backend().describe().starts_with("udp 127.0.0.1:"));
    exchange_all_sizes(&mut links);
    // UDP frames are at most 65000 bytes: the 64 KiB packet still takes 2.
    assert_eq!(links[0].stats().frames_sent, 2 * 6);
}

#[test]
fn unroutable_short_and_truncated() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    a.send_packet(&[0u8; 31], false).unwrap();
    a.send_packet(&packet(1, 7, 1, 10), false).unwrap();
    assert_eq!(a.stats().unroutable, 2);
    assert_eq!(a.stats().frames_sent, 0);
    let big = vec![0u8; trapeze_vnic::link::MAX_PACKET_BYTES];
    let mut big = big;
    big[6] = 2;
    assert_eq!(a.send_packet(&big, false).unwrap_err().kind(), io::ErrorKind::InvalidInput);

    let p = packet(1, 2, 2, 500);
    a.send_packet(&p, false).unwrap();
    let mut small = [0u8; 100];
    let rx = recv(&mut b, &mut small).unwrap();
    assert_eq!(rx, RxPacket { len: 100, src: 1, crc_ok: false });
    assert_eq!(small[..], p[..100]);
    assert_eq!((b.stats().rx_truncated, b.stats().crc_errors), (1, 0));
    // A node may send to itself.
    let mut out = [0u8; 1000];
    a.send_packet(&packet(1, 1, 3, 5), false).unwrap();
    assert!(recv(&mut a, &mut out).unwrap().crc_ok);
}

/// Hooks that limit a switch port's frames to this many bytes so packets split into many
/// fragments, and present it as a plain medium, so packets keep their CRC.
struct SmallFrames(usize);

impl Hooks<InProcPort> for SmallFrames {
    fn sending(&mut self, _: u16, frame: &[u8]) {
        assert!(frame.len() <= self.0);
    }
    fn max_frame_bytes(&self, _: &InProcPort) -> usize {
        self.0
    }
    fn plain_medium(&self) -> bool {
        true
    }
    fn describe(&self, port: &InProcPort) -> String {
        format!("{} (frames <= {})", port.describe(), self.0)
    }
}

struct Outcome {
    sent: u64,
    ok: u64,
    bad: u64,
    tx: LinkStats,
    rx: LinkStats,
}

/// Send `n` tagged packets a -> b through `faults`, receive everything, and check that
/// every packet delivered with a good CRC is byte-identical to the one sent with its
/// tag, and is delivered at most once.
fn run_faults(mut a: Link, mut b: Link, n: u32, frames_per_packet: impl Fn(usize) -> u64) -> Outcome {
    let sizes = [0usize, 100, 4096, 8192, 20_000];
    let mut sent: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut delivered_ok: HashMap<u32, u32> = HashMap::new();
    let mut out = vec![0u8; 70_000];
    let (mut ok, mut bad, mut frames) = (0u64, 0u64, 0u64);
    let mut check = |rx: RxPacket, out: &[u8], ok: &mut u64, bad: &mut u64, sent: &HashMap<u32, Vec<u8>>| {
        if rx.crc_ok {
            let body = &out[..rx.len];
            let tag = tag_of(body);
            let orig = sent.get(&tag).unwrap_or_else(|| panic!("crc_ok packet with unknown tag {tag}"));
            assert!(body == &orig[..], "crc_ok packet differs from the one sent with tag {tag}");
            let c = delivered_ok.entry(tag).or_default();
            *c += 1;
            assert_eq!(*c, 1, "tag {tag} delivered twice");
            *ok += 1;
        } else {
            *bad += 1;
        }
    };
    for tag in 0..n {
        let p = packet(1, 2, tag, sizes[tag as usize % sizes.len()]);
        frames += frames_per_packet(p.len() + 4);
        a.send_packet(&p, false).unwrap();
        sent.insert(tag, p);
        while let Some(rx) = b.poll_packet(&mut out) {
            check(rx, &out, &mut ok, &mut bad, &sent);
        }
    }
    a.flush().unwrap();
    // Drain, then let unfinished packets time out.
    let until = Instant::now() + REASSEMBLY_TIMEOUT + Duration::from_millis(50);
    while Instant::now() < until {
        while let Some(rx) = b.poll_packet(&mut out) {
            check(rx, &out, &mut ok, &mut bad, &sent);
        }
        wait_readable(b.readable_fd(), until);
    }
    b.poll_timers().unwrap();
    assert!(b.poll_packet(&mut out).is_none());
    assert_eq!(b.partial_packets(), 0);
    let (tx, rx) = (a.stats(), b.stats());
    // Sender: every frame generated was dropped, or sent once, or twice if duplicated.
    assert_eq!(tx.frames_sent, frames - tx.injected_drops + tx.injected_duplicates, "{tx:?}");
    assert_eq!(tx.packets_sent, n as u64);
    assert_eq!(rx.frames_received, tx.frames_sent, "the in-process switch loses nothing");
    assert_eq!(rx.packets_received, ok + bad);
    assert_eq!(rx.crc_errors, bad);
    assert!(rx.packets_received <= n as u64);
    assert!(rx.bad_frames + rx.duplicate_frames <= rx.frames_received);
    Outcome { sent: n as u64, ok, bad, tx, rx }
}

fn inproc_pair(max_frame: usize, faults: FaultConfig) -> (Link, Link, impl Fn(usize) -> u64) {
    let sw = InProcSwitch::new();
    let a = Link::new(1, Box::new(Wrap::new(sw.port(1), SmallFrames(max_frame))), faults);
    let b = Link::new(2, Box::new(Wrap::new(sw.port(2), SmallFrames(max_frame))), FaultConfig::NONE);
    (a, b, move |total: usize| total.div_ceil(max_frame - 24) as u64)
}

#[test]
fn faults_all_kinds_never_deliver_corrupt_as_ok() {
    for seed in [1, 7, 1234] {
        let f: FaultConfig = format!("drop=0.2,dup=0.2,reorder=0.2,corrupt=0.2,seed={seed}").parse().unwrap();
        // Small frames: most packets span several, so faults hit reassembly.
        let (a, b, fpp) = inproc_pair(4096, f);
        let o = run_faults(a, b, 300, fpp);
        let t = o.tx;
        for (what, count) in [
            ("drops", t.injected_drops),
            ("dups", t.injected_duplicates),
            ("reorders", t.injected_reorders),
            ("corruptions", t.injected_corruptions),
        ] {
            assert!(count > 50, "seed {seed}: only {count} {what}: {t:?}");
        }
        assert!(o.ok > 20, "seed {seed}: too few packets made it: {} of {}", o.ok, o.sent);
        assert!(o.bad > 0, "seed {seed}: no corrupted packet was caught: {:?}", o.rx);
        assert!(o.rx.reassembly_timeouts > 0 && o.rx.duplicate_frames > 0, "{:?}", o.rx);
    }
}

#[test]
fn faults_are_deterministic_per_seed() {
    let f: FaultConfig = "drop=0.2,dup=0.2,reorder=0.2,corrupt=0.2,seed=99".parse().unwrap();
    let run = || {
        let (a, b, fpp) = inproc_pair(1500, f);
        let o = run_faults(a, b, 100, fpp);
        (o.tx, o.ok, o.bad)
    };
    assert_eq!(run(), run());
}

#[test]
fn duplicates_and_reorders_alone_lose_nothing() {
    for spec in ["dup=1", "reorder=1", "dup=0.5,reorder=0.5,seed=3"] {
        let (a, b, fpp) = inproc_pair(1500, spec.parse().unwrap());
        let o = run_faults(a, b, 200, fpp);
        assert_eq!((o.ok, o.bad), (200, 0), "{spec}: {:?}", o.rx);
        assert_eq!(o.rx.reassembly_timeouts, 0, "{spec}");
    }
}

#[test]
fn drops_alone_lose_whole_packets_only() {
    let (a, b, fpp) = inproc_pair(1500, "drop=0.05,seed=5".parse().unwrap());
    let o = run_faults(a, b, 200, fpp);
    assert_eq!(o.bad, 0);
    assert!(o.ok < 200 && o.ok > 100, "{}", o.ok);
    // Every lost multi-frame packet that got some frame through timed out.
    assert!(o.rx.reassembly_timeouts > 0);
    assert!(o.ok + o.rx.reassembly_timeouts <= 200);
}

/// A UDP datagram is taken only from the address configured for the node its frame names:
/// another process on the network that writes node 1 into its frames is dropped and
/// counted, node 1's own frames still arrive.
#[test]
fn udp_drops_frames_not_from_the_node_they_name() {
    let mut a = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut stranger = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    a.add_peer(2, b.local_addr());
    stranger.add_peer(2, b.local_addr());
    b.add_peer(1, a.local_addr());
    let mut a = Link::new(1, Box::new(a), FaultConfig::NONE);
    let mut stranger = Link::new(1, Box::new(stranger), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(b), FaultConfig::NONE);
    stranger.send_packet(&packet(1, 2, 9, 100), false).unwrap();
    a.send_packet(&packet(1, 2, 1, 100), false).unwrap();
    let mut out = vec![0u8; 1000];
    let until = Instant::now() + Duration::from_secs(5);
    let rx = loop {
        if let Some(rx) = b.poll_packet(&mut out) {
            break rx;
        }
        assert!(Instant::now() < until, "node 1's packet never came");
        wait_readable(b.readable_fd(), until);
    };
    assert!(rx.crc_ok && tag_of(&out[..rx.len]) == 1, "the first packet taken is node 1's own");
    assert!(b.poll_packet(&mut out).is_none(), "nothing else arrived");
    assert_eq!((b.stats().foreign_frames, b.stats().packets_received), (1, 1));
}

#[test]
fn faults_over_udp() {
    let mut a = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    a.add_peer(2, b.local_addr());
    b.add_peer(1, a.local_addr());
    let f = "drop=0.1,dup=0.1,reorder=0.1,corrupt=0.1,seed=11".parse().unwrap();
    let mut a = Link::new(1, Box::new(a), f);
    let mut b = Link::new(2, Box::new(b), FaultConfig::NONE);
    let mut out = vec![0u8; 70_000];
    let (mut ok, mut bad) = (0, 0);
    let size = |t: u32| [10, 8192, 65536][t as usize % 3];
    for tag in 0..100u32 {
        a.send_packet(&packet(1, 2, tag, size(tag)), false).unwrap();
        // Wait for this packet, boundedly: it may have been dropped.
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            match b.poll_packet(&mut out) {
                Some(rx) if rx.crc_ok => {
                    let t = tag_of(&out[..rx.len]);
                    assert!(t <= tag && out[..rx.len] == packet(1, 2, t, size(t))[..]);
                    ok += 1;
                    if t == tag {
                        break;
                    }
                }
                Some(_) => bad += 1,
                None => wait_readable(b.readable_fd(), until),
            }
        }
    }
    a.flush().unwrap();
    assert!(ok > 30 && bad > 0, "ok {ok} bad {bad} {:?}", b.stats());
    assert_eq!(b.stats().crc_errors, bad);
}
