// SPDX-License-Identifier: GPL-2.0-only
//! Cluster liveness for `gmsd`: a static peer list and heartbeats on a side UDP socket.
//!
//! Each daemon sends every peer a small datagram every `interval` and declares a peer
//! dead after `dead_after` without one (a peer never heard from is given
//! [`STARTUP_GRACE`] first). The heartbeat rides its own socket, not the GMS path it
//! judges: a NIC send ring full of 8 KiB putpages must not delay a heartbeat into a false
//! failure, and the `no_std` GMS core has no heartbeat operation to add one to. Each
//! heartbeat also carries the sender's memory use, so `stat` on any daemon shows the whole
//! cluster's. A heartbeat with a new incarnation (the peer restarted) is reported as a
//! rejoin.
//!
//! Wire (24 bytes, little-endian): `b"GMSH"`, `u16 node`, `u16 0`, `u64 incarnation`,
//! `u32 held pages`, `u32 budget pages`.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"GMSH";
const HEARTBEAT_BYTES: usize = 24;
/// A peer never heard from is declared dead only after this long (daemons start one by one).
pub const STARTUP_GRACE: Duration = Duration::from_secs(5);

/// The heartbeat address that goes with a link address: the same IP, the next port.
pub fn heartbeat_addr(link: SocketAddr) -> io::Result<SocketAddr> {
    let port = link
        .port()
        .checked_add(1)
        .filter(|_| link.port() != 0)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("link port of {link} leaves no heartbeat port (port + 1)"),
            )
        })?;
    Ok(SocketAddr::new(link.ip(), port))
}

/// What the liveness table reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Silent for too long.
    Dead(u16),
    /// Heard from again after being declared dead (or restarted with a new incarnation).
    Rejoined(u16),
}

/// One peer as last heard.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub alive: bool,
    pub last: Option<Instant>,
    pub incarnation: u64,
    pub held: u32,
    pub budget: u32,
}

/// The heartbeat socket and the peer table.
pub struct Liveness {
    socket: UdpSocket,
    me: u16,
    incarnation: u64,
    pub peers: BTreeMap<u16, Peer>,
    interval: Duration,
    dead_after: Duration,
    started: Instant,
    next_send: Instant,
    /// Heartbeats received that named an unknown node or did not parse.
    pub rejected: u64,
}

impl Liveness {
    /// Bind the heartbeat socket at `bind` for node `me` with `peers` (node → heartbeat address).
    pub fn bind(
        me: u16,
        bind: SocketAddr,
        peers: &[(u16, SocketAddr)],
        interval: Duration,
        dead_after: Duration,
    ) -> io::Result<Self> {
        let socket = UdpSocket::bind(bind)
            .map_err(|e| io::Error::new(e.kind(), format!("heartbeat: cannot bind {bind}: {e}")))?;
        socket.set_nonblocking(true)?;
        let now = Instant::now();
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let peers = peers
            .iter()
            .map(|&(n, addr)| {
                (
                    n,
                    Peer {
                        addr,
                        alive: true,
                        last: None,
                        incarnation: 0,
                        held: 0,
                        budget: 0,
                    },
                )
            })
            .collect();
        Ok(Liveness {
            socket,
            me,
            incarnation,
            peers,
            interval,
            dead_after,
            started: now,
            next_send: now,
            rejected: 0,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// The next time [`Self::poll`] has something to do.
    pub fn deadline(&self) -> Instant {
        self.next_send
    }

    /// Send heartbeats when due, take those that arrived, and report peers that died or
    /// came back. `held`/`budget`: this node's memory use, carried to the peers.
    pub fn poll(&mut self, now: Instant, held: u32, budget: u32, events: &mut Vec<Event>) {
        if now >= self.next_send {
            self.next_send = now + self.interval;
            let mut msg = [0u8; HEARTBEAT_BYTES];
            msg[..4].copy_from_slice(MAGIC);
            msg[4..6].copy_from_slice(&self.me.to_le_bytes());
            msg[8..16].copy_from_slice(&self.incarnation.to_le_bytes());
            msg[16..20].copy_from_slice(&held.to_le_bytes());
            msg[20..24].copy_from_slice(&budget.to_le_bytes());
            for p in self.peers.values() {
                // A peer that is down answers with ICMP; it shows up as an error on a
                // later receive, which is ignored below.
                let _ = self.socket.send_to(&msg, p.addr);
            }
        }
        let mut buf = [0u8; 64];
        loop {
            match self.socket.recv_from(&mut buf) {
                Ok((n, _)) => self.handle(now, &buf[..n], events),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    continue
                }
                Err(_) => break,
            }
        }
        let grace = self.started + STARTUP_GRACE.max(self.dead_after);
        for (&n, p) in self.peers.iter_mut() {
            let silent = match p.last {
                Some(t) => now.saturating_duration_since(t) > self.dead_after,
                None => now > grace,
            };
            if p.alive && silent {
                p.alive = false;
                events.push(Event::Dead(n));
            }
        }
    }

    fn handle(&mut self, now: Instant, msg: &[u8], events: &mut Vec<Event>) {
        if msg.len() != HEARTBEAT_BYTES || &msg[..4] != MAGIC {
            self.rejected += 1;
            return;
        }
        let field = |a: usize, b: usize| {
            msg[a..b]
                .iter()
                .rev()
                .fold(0u64, |x, &byte| (x << 8) | byte as u64)
        };
        let node = field(4, 6) as u16;
        let Some(p) = self.peers.get_mut(&node) else {
            self.rejected += 1;
            return;
        };
        let inc = field(8, 16);
        let restarted = p.incarnation != 0 && inc != p.incarnation;
        if !p.alive || restarted {
            events.push(Event::Rejoined(node));
        }
        p.alive = true;
        p.last = Some(now);
        p.incarnation = inc;
        p.held = field(16, 20) as u32;
        p.budget = field(20, 24) as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dead_after: Duration) -> (Liveness, Liveness) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        drop((a, b));
        let ms = Duration::from_millis(5);
        let la = Liveness::bind(0, aa, &[(1, ba)], ms, dead_after).unwrap();
        let lb = Liveness::bind(1, ba, &[(0, aa)], ms, dead_after).unwrap();
        (la, lb)
    }

    #[test]
    fn heartbeats_keep_peers_alive_and_silence_kills_them() {
        let (mut a, mut b) = pair(Duration::from_millis(100));
        let mut ev = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(300) {
            let now = Instant::now();
            a.poll(now, 3, 10, &mut ev);
            b.poll(now, 4, 20, &mut ev);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!((a.peers[&1].held, a.peers[&1].budget), (4, 20));
        // b goes silent: a declares it dead once, after the timeout.
        let t1 = Instant::now();
        while ev.is_empty() && t1.elapsed() < Duration::from_secs(2) {
            a.poll(Instant::now(), 3, 10, &mut ev);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ev, vec![Event::Dead(1)]);
        assert!(
            t1.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t1.elapsed()
        );
        // b speaks again: a rejoin.
        ev.clear();
        let t2 = Instant::now();
        while ev.is_empty() && t2.elapsed() < Duration::from_secs(2) {
            b.poll(Instant::now(), 4, 20, &mut Vec::new());
            a.poll(Instant::now(), 3, 10, &mut ev);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ev, vec![Event::Rejoined(1)]);
    }

    #[test]
    fn strangers_and_garbage_are_rejected() {
        let (mut a, _b) = pair(Duration::from_secs(10));
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = a.socket.local_addr().unwrap();
        s.send_to(b"hello", to).unwrap();
        let mut stranger = [0u8; HEARTBEAT_BYTES];
        stranger[..4].copy_from_slice(MAGIC);
        stranger[4] = 9;
        s.send_to(&stranger, to).unwrap();
        let mut ev = Vec::new();
        let t0 = Instant::now();
        while a.rejected < 2 && t0.elapsed() < Duration::from_secs(2) {
            a.poll(Instant::now(), 0, 0, &mut ev);
        }
        assert_eq!(a.rejected, 2);
        assert!(ev.is_empty());
    }

    #[test]
    fn heartbeat_port_follows_the_link_port() {
        assert_eq!(
            heartbeat_addr("127.0.0.1:7000".parse().unwrap()).unwrap(),
            "127.0.0.1:7001".parse().unwrap()
        );
        assert!(heartbeat_addr("127.0.0.1:65535".parse().unwrap()).is_err());
        assert!(heartbeat_addr("127.0.0.1:0".parse().unwrap()).is_err());
    }
}
