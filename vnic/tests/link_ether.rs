// SPDX-License-Identifier: GPL-2.0-only
//! The raw-Ethernet link backend over a veth pair between two network namespaces made
//! for the test. It needs root and iproute2 (`needs: root, ip`: `cargo xtask test` runs
//! it where they are; plain `cargo test` lists it as ignored). The namespaces are always
//! removed, by a Drop guard, whatever happens.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
use trapeze_firmware::iface::wire::Header;
use trapeze_vnic::link::backend::{EtherBackend, LinkBackend};
use trapeze_vnic::link::{FaultConfig, Link, RxPacket};

const MTU: usize = 9000;
const WAIT: Duration = Duration::from_secs(5);

/// Run `ip ARGS`, with its stderr in the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Network namespaces to delete on drop (deleting one deletes its veth end too).
#[derive(Default)]
struct Namespaces(Vec<String>);

impl Namespaces {
    fn add(&mut self, name: &str) -> Result<(), String> {
        ip(&["netns", "add", name])?;
        self.0.push(name.to_string());
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// Open the backend from a thread that has entered namespace `ns`; the socket stays in
/// that namespace after the thread ends.
fn open_in(ns: &str, ifname: &str) -> std::io::Result<EtherBackend> {
    let (path, ifname) = (format!("/run/netns/{ns}"), ifname.to_string());
    std::thread::spawn(move || {
        let f = File::open(&path)?;
        move_into_link_name_space(f.as_fd(), Some(LinkNameSpaceType::Network))?;
        EtherBackend::open(&ifname)
    })
    .join()
    .expect("namespace thread panicked")
}

fn packet(src: u16, dst: u16, tag: u32, payload: usize) -> Vec<u8> {
    let h = Header { flags: 0, src, dst, ctrl_len: 8, payload_len: payload as u32, token: 0, seq: tag };
    let mut p = h.to_bytes().to_vec();
    p.extend_from_slice(&[0xC7; 8]);
    p.extend((0..payload).map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(tag) as u8 >> 1));
    p
}

fn recv_within(link: &mut Link, out: &mut [u8], wait: Duration) -> Option<RxPacket> {
    let until = Instant::now() + wait;
    loop {
        if let Some(p) = link.poll_packet(out) {
            return Some(p);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ts = Timespec { tv_sec: 0, tv_nsec: left.min(Duration::from_millis(50)).as_nanos() as i64 };
        let fd = link.readable_fd().expect("ether backend has an fd");
        let _ = poll(&mut [PollFd::from_borrowed_fd(fd, PollFlags::IN)], Some(&ts));
    }
}

#[test]
#[ignore = "needs: root, ip — network namespaces, a veth pair and raw sockets"]
fn ether_link_over_veth_between_namespaces() {
    let pid = std::process::id();
    let (ns_a, ns_b) = (format!("trapeze-link-{pid}-a"), format!("trapeze-link-{pid}-b"));
    let (if_a, if_b) = (format!("tzl{pid}a"), format!("tzl{pid}b"));
    let mut guard = Namespaces::default();
    guard.add(&ns_a).unwrap_or_else(|e| panic!("making a network namespace (root and iproute2 needed): {e}"));
    guard.add(&ns_b).unwrap();
    let mtu = MTU.to_string();
    ip(&["link", "add", &if_a, "netns", &ns_a, "type", "veth", "peer", "name", &if_b, "netns", &ns_b]).unwrap();
    for (ns, ifname) in [(&ns_a, &if_a), (&ns_b, &if_b)] {
        ip(&["-n", ns, "link", "set", ifname, "mtu", &mtu, "up"]).unwrap();
    }

    let mut a = open_in(&ns_a, &if_a).unwrap();
    let mut b = open_in(&ns_b, &if_b).unwrap();
    assert_eq!((a.mtu(), b.max_frame_bytes()), (MTU, MTU));
    assert_ne!(a.mac(), b.mac());
    // Each interface exists only in its own namespace.
    assert!(open_in(&ns_a, &if_b).unwrap_err().to_string().contains("no such interface"));
    a.add_peer(2, b.mac());
    b.add_peer(1, a.mac());
    assert!(a.describe().contains(&format!("mtu {MTU}")));
    let mut a = Link::new(1, Box::new(a), FaultConfig::NONE);
    let mut b = Link::new(2, Box::new(b), FaultConfig::NONE);
    let mut out = vec![0u8; 70_000];

    // The link may take a moment to pass traffic after coming up: retry a small packet.
    let hello = packet(1, 2, 0, 0);
    let mut up = false;
    for _ in 0..20 {
        a.send_packet(&hello, false).unwrap();
        if let Some(rx) = recv_within(&mut b, &mut out, Duration::from_millis(250)) {
            assert_eq!(rx, RxPacket { len: hello.len(), src: 1, crc_ok: true });
            up = true;
            break;
        }
    }
    assert!(up, "no frame crossed the veth pair: {:?}", b.stats());
    while b.poll_packet(&mut out).is_some() {}

    let mut tag = 1;
    for (src, dst) in [(1u16, 2u16), (2, 1)] {
        for payload in [0usize, 1, 4096, 8192, 65536] {
            tag += 1;
            let p = packet(src, dst, tag, payload);
            let (tx, rx) = if src == 1 { (&mut a, &mut b) } else { (&mut b, &mut a) };
            let before = tx.stats().frames_sent;
            tx.send_packet(&p, false).unwrap();
            let frames = tx.stats().frames_sent - before;
            assert_eq!(frames as usize, (p.len() + 4).div_ceil(MTU - 24), "{payload} B");
            let got = recv_within(rx, &mut out, WAIT).unwrap_or_else(|| panic!("{src}->{dst} {payload} B lost"));
            assert_eq!(got, RxPacket { len: p.len(), src, crc_ok: true }, "{payload} B");
            assert!(out[..got.len] == p[..], "{src}->{dst} {payload} B: bytes differ");
        }
        // Aborted: arrives, CRC bad.
        let p = packet(src, dst, 999, 300);
        let (tx, rx) = if src == 1 { (&mut a, &mut b) } else { (&mut b, &mut a) };
        tx.send_packet(&p, true).unwrap();
        let got = recv_within(rx, &mut out, WAIT).expect("aborted packet");
        assert_eq!(got, RxPacket { len: p.len(), src, crc_ok: false });
    }
    for l in [&a, &b] {
        let s = l.stats();
        assert_eq!((s.bad_frames, s.duplicate_frames, s.send_errors, s.recv_errors), (0, 0, 0, 0), "{s:?}");
        assert_eq!(s.crc_errors, 1, "{s:?}");
    }
    drop((a, b));
    drop(guard);
    assert!(!std::path::Path::new(&format!("/run/netns/{ns_a}")).exists());
}
