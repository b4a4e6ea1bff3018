// SPDX-License-Identifier: GPL-2.0-only
//! Link frames as UDP datagrams: one non-blocking bound socket, a route table from node
//! to socket address. A datagram is taken only from the address of the node its frame
//! header names (anyone else on the network could write any node id there).
//!
//! Received datagrams land in a buffer of the backend's own, which it lends in place and
//! keeps readable until its next receive ([`LinkBackend::keeps_last_frame`]): a packet's
//! payload then goes from there to the host once, not through a copy in NIC staging.
//! Asked whether frames wait ([`LinkBackend::frames_waiting`]), it receives one ahead
//! into its other buffer, so a caller polling in a tight loop makes one system call per
//! look, and none more to take the datagram it found; a pass of the NIC's firmware runs
//! only when one came.
//!
//! A datagram carries the UDP checksum, which Linux always computes on send (this
//! backend never turns it off) and verifies on receive, dropping a damaged datagram: the
//! medium delivers a frame whole and undamaged or not at all
//! ([`LinkBackend::checksums_frames`]), so the link sends a one-frame packet with a
//! verdict instead of a CRC over it (see [`super::super::frame::FLAG_VERDICT`]).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

use super::super::frame::FrameHeader;
use super::{parse_node, LinkBackend, SpecError};

/// Largest frame sent as one datagram (below IPv4's 65507-byte UDP limit), so a packet
/// with a 64 KiB payload goes as two frames.
pub const UDP_MAX_FRAME_BYTES: usize = 65000;

/// Socket buffer size asked for (the kernel caps it at `net.core.[rw]mem_max`): enough
/// for a few dozen maximum-size frames in flight.
const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// A UDP link backend.
#[derive(Debug)]
pub struct UdpBackend {
    socket: UdpSocket,
    local: SocketAddr,
    /// Routes by node, few: a scan is cheaper than hashing (looked up on every send and
    /// every received datagram).
    peers: Vec<(u16, SocketAddr)>,
    /// Datagrams dropped: not from the address of the node their frame names.
    foreign: u64,
    /// Where datagrams are received: the one lent last, kept until the next receive,
    /// and the other, where a datagram received ahead waits.
    rx: [Box<[u8]>; 2],
    /// The buffer lent last and the length of its frame (0: none lent, or given back).
    lent: (usize, usize),
    /// A datagram received ahead by `frames_waiting`, in the buffer not lent: its length.
    ahead: Option<usize>,
}

impl UdpBackend {
    /// Bind to `addr` (port 0 picks a free port; see [`local_addr`](Self::local_addr)).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("udp link: cannot bind {addr}: {e}")))?;
        socket.set_nonblocking(true)?;
        // Best effort: a smaller buffer only means more drops under bursts.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&socket, SOCKET_BUFFER_BYTES);
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(&socket, SOCKET_BUFFER_BYTES);
        let local = socket.local_addr()?;
        // Slack past the largest frame, so an oversized datagram is seen as such (and
        // rejected by the link), not cut to fit.
        let buf = || vec![0u8; UDP_MAX_FRAME_BYTES + 64].into_boxed_slice();
        let rx = [buf(), buf()];
        Ok(UdpBackend { socket, local, peers: Vec::new(), foreign: 0, rx, lent: (0, 0), ahead: None })
    }

    /// The bound address (with the real port if bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Route frames for `node` to `addr` (replacing any earlier route).
    pub fn add_peer(&mut self, node: u16, addr: SocketAddr) {
        match self.peers.iter_mut().find(|(n, _)| *n == node) {
            Some(p) => p.1 = addr,
            None => self.peers.push((node, addr)),
        }
    }
}

impl LinkBackend for UdpBackend {
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()> {
        if frame.len() > UDP_MAX_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {} bytes exceeds {UDP_MAX_FRAME_BYTES}", frame.len()),
            ));
        }
        let Some(addr) = peer(&self.peers, dst) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("udp link: no peer address for node {dst}")));
        };
        self.socket.send_to(frame, addr).map(|_| ())
    }

    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if let Some(n) = self.ahead.take() {
            let k = n.min(buf.len());
            buf[..k].copy_from_slice(&self.rx[1 - self.lent.0][..k]);
            return Ok(Some(k));
        }
        recv_from_peer(&self.socket, &self.peers, &mut self.foreign, buf)
    }

    fn recv_frame_with(&mut self, _scratch: &mut [u8], take: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        // The frame last lent is given back now, whatever comes; the next one is in (or
        // goes to) the other buffer.
        let next = 1 - self.lent.0;
        self.lent.1 = 0;
        let n = match self.ahead.take() {
            Some(n) => n,
            None => match recv_from_peer(&self.socket, &self.peers, &mut self.foreign, &mut self.rx[next])? {
                Some(n) => n,
                None => return Ok(false),
            },
        };
        self.lent = (next, n);
        take(&self.rx[next][..n]);
        Ok(true)
    }

    fn last_frame(&self) -> Option<&[u8]> {
        let (i, n) = self.lent;
        (n > 0).then(|| &self.rx[i][..n])
    }

    fn keeps_last_frame(&self) -> bool {
        true
    }

    fn frames_waiting(&mut self) -> bool {
        if self.ahead.is_some() {
            return true;
        }
        // Into the buffer not lent: the frame lent last stays readable.
        let next = 1 - self.lent.0;
        match recv_from_peer(&self.socket, &self.peers, &mut self.foreign, &mut self.rx[next]) {
            Ok(Some(n)) => {
                self.ahead = Some(n);
                true
            }
            Ok(None) => false,
            // Let the receive see (and count) it.
            Err(_) => true,
        }
    }

    fn prepare_wait(&self) -> bool {
        // A datagram received ahead no longer makes the socket readable.
        self.ahead.is_none()
    }

    fn checksums_frames(&self) -> bool {
        true
    }

    fn looks_are_system_calls(&self) -> bool {
        true
    }

    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.socket.as_fd())
    }

    fn max_frame_bytes(&self) -> usize {
        UDP_MAX_FRAME_BYTES
    }

    fn routes_to(&self, dst: u16) -> bool {
        peer(&self.peers, dst).is_some()
    }

    fn foreign_frames(&self) -> u64 {
        self.foreign
    }

    fn describe(&self) -> String {
        format!("udp {} ({})", self.local, super::peers_in_words(self.peers.len()))
    }
}

/// The address of `node`, if it is a peer.
fn peer(peers: &[(u16, SocketAddr)], node: u16) -> Option<&SocketAddr> {
    peers.iter().find(|(n, _)| *n == node).map(|(_, a)| a)
}

/// The next datagram from the address of the node its frame header names, into `buf`
/// (its length), or `None` when none is waiting; others are counted in `foreign` and
/// dropped.
fn recv_from_peer(
    socket: &UdpSocket,
    peers: &[(u16, SocketAddr)],
    foreign: &mut u64,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    loop {
        match socket.recv_from(buf) {
            Ok((n, from)) => {
                let src = FrameHeader::parse(&buf[..n.min(buf.len())]).ok().map(|(h, _)| h.src);
                if src.is_some_and(|s| peer(peers, s) == Some(&from)) {
                    return Ok(Some(n));
                }
                *foreign += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // An ICMP error from an earlier send (a peer not listening) is reported
            // on a later receive; it says nothing about waiting frames.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Parse a UDP peer `NODE=IP:PORT`, e.g. `1=127.0.0.1:7001` or `2=[::1]:7002`.
pub fn parse_peer(s: &str) -> Result<(u16, SocketAddr), SpecError> {
    const EXAMPLE: &str = "1=127.0.0.1:7001";
    let Some((node, addr)) = s.split_once('=') else {
        return Err(SpecError(format!("bad peer {s:?}: expected NODE=IP:PORT, e.g. {EXAMPLE}")));
    };
    let node = parse_node(node, s, EXAMPLE)?;
    let addr = addr.trim().parse::<SocketAddr>().map_err(|_| {
        SpecError(format!("bad peer {s:?}: {addr:?} is not an IP:PORT socket address (expected e.g. {EXAMPLE})"))
    })?;
    Ok((node, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers() {
        assert_eq!(parse_peer("1=127.0.0.1:7001"), Ok((1, "127.0.0.1:7001".parse().unwrap())));
        assert_eq!(parse_peer(" 7 = [::1]:9 "), Ok((7, "[::1]:9".parse().unwrap())));
        let e = parse_peer("127.0.0.1:7001").unwrap_err();
        assert!(e.0.contains("expected NODE=IP:PORT"), "{e}");
        let e = parse_peer("x=127.0.0.1:7001").unwrap_err();
        assert!(e.0.contains("node \"x\" is not a number"), "{e}");
        let e = parse_peer("70000=127.0.0.1:7001").unwrap_err();
        assert!(e.0.contains("not a number 0-65535"), "{e}");
        let e = parse_peer("1=localhost:7001").unwrap_err();
        assert!(e.0.contains("not an IP:PORT"), "{e}");
    }
}
