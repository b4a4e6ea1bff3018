// SPDX-License-Identifier: GPL-2.0-only
//! Link frames as UDP datagrams: one non-blocking bound socket, a route table from node
//! to socket address. A datagram is taken only from the address of the node its frame
//! header names (anyone else on the network could write any node id there).
//!
//! Received datagrams land in a buffer of the backend's own, which it lends in place and
//! keeps readable until its next receive ([`LinkBackend::keeps_last_frame`]): a packet's
//! payload then goes from there to the host once, not through a copy in NIC staging.
//!
//! A datagram carries the UDP checksum, which Linux always computes on send (this
//! backend never turns it off) and verifies on receive, dropping a damaged datagram: the
//! medium delivers a frame whole and undamaged or not at all
//! ([`LinkBackend::checksums_frames`]), so the link sends a one-frame packet with a
//! verdict instead of a CRC over it (see [`super::super::frame::FLAG_VERDICT`]).

use std::collections::HashMap;
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
    peers: HashMap<u16, SocketAddr>,
    /// Datagrams dropped: not from the address of the node their frame names.
    foreign: u64,
    /// Where datagrams are received: lent to the link, kept until the next receive.
    rx: Box<[u8]>,
    /// Bytes of the frame last lent (0 before the first).
    rx_len: usize,
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
        let rx = vec![0u8; UDP_MAX_FRAME_BYTES + 64].into_boxed_slice();
        Ok(UdpBackend { socket, local, peers: HashMap::new(), foreign: 0, rx, rx_len: 0 })
    }

    /// The bound address (with the real port if bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Route frames for `node` to `addr` (replacing any earlier route).
    pub fn add_peer(&mut self, node: u16, addr: SocketAddr) {
        self.peers.insert(node, addr);
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
        let Some(addr) = self.peers.get(&dst) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("udp link: no peer address for node {dst}")));
        };
        self.socket.send_to(frame, addr).map(|_| ())
    }

    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        recv_from_peer(&self.socket, &self.peers, &mut self.foreign, buf)
    }

    fn recv_frame_with(&mut self, _scratch: &mut [u8], take: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        // The frame last lent is given back now, whatever comes.
        self.rx_len = 0;
        match recv_from_peer(&self.socket, &self.peers, &mut self.foreign, &mut self.rx)? {
            Some(n) => {
                self.rx_len = n;
                take(&self.rx[..n]);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn last_frame(&self) -> Option<&[u8]> {
        (self.rx_len > 0).then(|| &self.rx[..self.rx_len])
    }

    fn keeps_last_frame(&self) -> bool {
        true
    }

    fn checksums_frames(&self) -> bool {
        true
    }

    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.socket.as_fd())
    }

    fn max_frame_bytes(&self) -> usize {
        UDP_MAX_FRAME_BYTES
    }

    fn routes_to(&self, dst: u16) -> bool {
        self.peers.contains_key(&dst)
    }

    fn foreign_frames(&self) -> u64 {
        self.foreign
    }

    fn describe(&self) -> String {
        format!("udp {} ({})", self.local, super::peers_in_words(self.peers.len()))
    }
}

/// The next datagram from the address of the node its frame header names, into `buf`
/// (its length), or `None` when none is waiting; others are counted in `foreign` and
/// dropped.
fn recv_from_peer(
    socket: &UdpSocket,
    peers: &HashMap<u16, SocketAddr>,
    foreign: &mut u64,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    loop {
        match socket.recv_from(buf) {
            Ok((n, from)) => {
                let src = FrameHeader::parse(&buf[..n.min(buf.len())]).ok().map(|(h, _)| h.src);
                if src.is_some_and(|s| peers.get(&s) == Some(&from)) {
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
