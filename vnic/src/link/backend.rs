// SPDX-License-Identifier: GPL-2.0-only
//! What carries link frames between NICs: the [`LinkBackend`] trait and its three
//! implementations — an in-process crossbar ([`InProcSwitch`]), UDP ([`UdpBackend`]) and
//! raw Ethernet ([`EtherBackend`], the only one with unsafe code, in `ether.rs`).
//!
//! Backends move opaque frames to a node and know nothing of fragmentation, CRCs or
//! faults; [`super::Link`] does that on top of any of them.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::str::FromStr;

mod ether;
mod inproc;
mod udp;

pub use ether::{parse_ether_peer, EtherBackend, MacAddr, ETHERTYPE};
pub use inproc::{InProcPort, InProcSwitch, DEFAULT_QUEUE_BYTES, DEFAULT_QUEUE_FRAMES};
pub use udp::{parse_peer, UdpBackend, UDP_MAX_FRAME_BYTES};

/// Moves link frames to other nodes and hands over frames that arrived.
///
/// Object-safe; [`super::Link`] holds a `Box<dyn LinkBackend>`. Nothing blocks: sends
/// either go or fail, receives return `Ok(None)` when nothing is waiting.
pub trait LinkBackend: Send {
    /// Send one frame (at most [`max_frame_bytes`](Self::max_frame_bytes)) to node `dst`.
    /// A frame that the medium drops (full queue, full socket buffer) may still return
    /// `Ok`, as on a real link.
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()>;

    /// Copy the next received frame into `buf` and return its length, or `Ok(None)` if
    /// none is waiting. A frame longer than `buf` is cut to `buf.len()` (and will then fail
    /// to parse); give a buffer of at least `max_frame_bytes()`.
    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// Send one frame of `len` bytes that `fill` writes in place, so a backend that
    /// queues frames in buffers of its own can take the bytes without an intermediate
    /// copy. `align_at` is a hint: the frame's byte at that offset (where a packet's
    /// payload starts) is best placed at the start of a cache line, since the bulk copies
    /// into and out of the frame run markedly slower to a misaligned destination; a
    /// backend with buffers of its own places the frame so. The default ignores it, fills
    /// `scratch` (at least `len` bytes; the link's frame buffer) and calls
    /// [`send_frame`](Self::send_frame).
    fn send_frame_with(
        &mut self,
        dst: u16,
        len: usize,
        align_at: usize,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        let _ = align_at;
        let Some(buf) = scratch.get_mut(..len) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {len} bytes exceeds the {}-byte frame buffer", scratch.len()),
            ));
        };
        fill(buf);
        self.send_frame(dst, buf)
    }

    /// Lend the next received frame to `take` and return `Ok(true)`, or `Ok(false)` if
    /// none is waiting. The default copies it into `scratch` with
    /// [`try_recv_frame`](Self::try_recv_frame) (same truncation rule); a backend that
    /// holds whole frames in memory lends them in place.
    fn recv_frame_with(&mut self, scratch: &mut [u8], take: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        match self.try_recv_frame(scratch)? {
            Some(n) => {
                take(&scratch[..n]);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A descriptor that polls readable (poll(2) `POLLIN`) when frames may be waiting.
    /// Contract: after it polls readable, call `try_recv_frame` until it returns
    /// `Ok(None)`; only then is the next arrival guaranteed to make it readable again.
    fn readable_fd(&self) -> Option<BorrowedFd<'_>>;

    /// Largest frame (link header + fragment bytes) this backend carries.
    fn max_frame_bytes(&self) -> usize;

    /// Whether frames can be sent to `dst` (a route or a port exists).
    fn routes_to(&self, dst: u16) -> bool;

    /// The caller is about to sleep on [`readable_fd`](Self::readable_fd). Returns
    /// `false` if frames are already waiting (then it must not sleep). Backends whose
    /// senders signal only announced sleepers rely on this; kernel sockets need nothing.
    fn prepare_wait(&self) -> bool {
        true
    }

    /// The sleep announced by [`prepare_wait`](Self::prepare_wait) is over.
    fn end_wait(&self) {}

    /// The frame the last [`recv_frame_with`](Self::recv_frame_with) lent, if the backend
    /// keeps it readable (unchanged) until its next receive; `None` if it does not.
    fn last_frame(&self) -> Option<&[u8]> {
        None
    }

    /// Whether [`last_frame`](Self::last_frame) returns the frame last lent (the same
    /// bytes the receive callback saw). Fixed for a backend: a [`Link`](super::Link)
    /// asks once, when it is made.
    fn keeps_last_frame(&self) -> bool {
        false
    }

    /// Whether a receive might find a frame now. `false` only when none is surely
    /// waiting; backends that cannot tell say `true`. Cheap (no lock), or at most the one
    /// system call that receives the frame, kept for the next receive (UDP).
    fn frames_waiting(&mut self) -> bool {
        true
    }

    /// Whether each look for a frame ([`recv_frame_with`](Self::recv_frame_with) finding
    /// none waiting, [`frames_waiting`](Self::frames_waiting)) is a system call (UDP:
    /// a `recvfrom` that fails with `EAGAIN`). The link then does not look again in the
    /// receive right after one that delivered a packet (see [`super::Link::poll_packet`]):
    /// a request's reply is sent without a system call before it that would find nothing.
    /// Default `false`. Fixed for a backend: a [`Link`](super::Link) asks once, when it is
    /// made.
    fn looks_are_system_calls(&self) -> bool {
        false
    }

    /// Whether frames cross process memory only, handed from sender to receiver
    /// without a wire, a socket or a copy the medium could damage (the in-process
    /// switch). The link then writes a verdict instead of computing the CRC trailer, as
    /// Linux's loopback device skips checksums: what a CRC guards against cannot happen
    /// there, and on a real link the hardware computes it at no cost to the NIC's
    /// processor. Default `false`. Fixed for a backend: a [`Link`](super::Link) asks
    /// once, when it is made.
    fn is_memory_medium(&self) -> bool {
        false
    }

    /// Whether the medium checks every frame itself and delivers it whole and undamaged
    /// or not at all, though it may duplicate one (UDP: the datagram's checksum, computed
    /// by the sending kernel and verified by the receiving one). The link then sends a
    /// one-frame packet with no faults configured with a verdict instead of a CRC over it,
    /// and believes such a verdict when it receives one, as over a memory medium; what a
    /// CRC still guards against there is its own doing (a packet of several frames put
    /// together from the wrong fragments, frames an injector corrupts), and such packets
    /// keep their CRC. Unlike over a memory medium, a verdict packet's key is remembered,
    /// so a duplicated datagram is still caught. Default `false`. Fixed for a backend: a
    /// [`Link`](super::Link) asks once, when it is made.
    fn checksums_frames(&self) -> bool {
        false
    }

    /// Frames the medium dropped because they did not come from where the node they name
    /// is (a datagram from an address no peer has, or from another peer's). Default 0.
    fn foreign_frames(&self) -> u64 {
        0
    }

    /// One line for logs, e.g. `udp 127.0.0.1:7000 (2 peers)`.
    fn describe(&self) -> String;
}

/// A command-line value that did not parse; the message says what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

impl From<SpecError> for io::Error {
    fn from(e: SpecError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e.0)
    }
}

/// Which backend to open, as given on a command line: `udp:ADDR:PORT` (the local
/// bind address) or `ether:IFNAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    Udp(SocketAddr),
    Ether(String),
}

impl FromStr for BackendSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        if let Some(addr) = s.strip_prefix("udp:") {
            let addr = addr.parse::<SocketAddr>().map_err(|_| {
                SpecError(format!("bad link backend {s:?}: expected udp:IP:PORT, e.g. udp:127.0.0.1:7000"))
            })?;
            Ok(BackendSpec::Udp(addr))
        } else if let Some(ifname) = s.strip_prefix("ether:") {
            if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', '\0']) {
                return Err(SpecError(format!(
                    "bad link backend {s:?}: expected ether:IFNAME with an interface name \
                     of 1-15 characters, e.g. ether:eth0"
                )));
            }
            Ok(BackendSpec::Ether(ifname.to_string()))
        } else {
            Err(SpecError(format!("bad link backend {s:?}: expected udp:IP:PORT or ether:IFNAME")))
        }
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::Udp(a) => write!(f, "udp:{a}"),
            BackendSpec::Ether(i) => write!(f, "ether:{i}"),
        }
    }
}

impl BackendSpec {
    /// Open the backend and add `peers`, each `NODE=ADDR:PORT` (udp) or
    /// `NODE=MAC` (ether). Errors name the bad peer or the system call that failed.
    pub fn open<S: AsRef<str>>(&self, peers: &[S]) -> io::Result<Box<dyn LinkBackend>> {
        match self {
            BackendSpec::Udp(addr) => {
                let mut b = UdpBackend::bind(*addr)?;
                for p in peers {
                    let (node, a) = parse_peer(p.as_ref())?;
                    b.add_peer(node, a);
                }
                Ok(Box::new(b))
            }
            BackendSpec::Ether(ifname) => {
                let mut b = EtherBackend::open(ifname)?;
                for p in peers {
                    let (node, mac) = parse_ether_peer(p.as_ref())?;
                    b.add_peer(node, mac);
                }
                Ok(Box::new(b))
            }
        }
    }
}

/// `n` peers in words, for [`LinkBackend::describe`]: `1 peer`, `2 peers`.
pub(crate) fn peers_in_words(n: usize) -> String {
    format!("{n} peer{}", if n == 1 { "" } else { "s" })
}

/// Parse the `NODE` part of a `NODE=...` peer.
pub(crate) fn parse_node(s: &str, whole: &str, example: &str) -> Result<u16, SpecError> {
    s.trim().parse::<u16>().map_err(|_| {
        SpecError(format!("bad peer {whole:?}: node {s:?} is not a number 0-65535 (expected e.g. {example})"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_in_words_has_one_peer_and_many_peers() {
        assert_eq!([0, 1, 2].map(peers_in_words), ["0 peers", "1 peer", "2 peers"]);
    }

    #[test]
    fn specs() {
        assert_eq!(
            "udp:127.0.0.1:7000".parse::<BackendSpec>(),
            Ok(BackendSpec::Udp("127.0.0.1:7000".parse().unwrap()))
        );
        assert_eq!("ether:veth0".parse::<BackendSpec>(), Ok(BackendSpec::Ether("veth0".into())));
        assert_eq!("ether:veth0".parse::<BackendSpec>().unwrap().to_string(), "ether:veth0");
        let e = "udp:localhost".parse::<BackendSpec>().unwrap_err();
        assert!(e.0.contains("expected udp:IP:PORT"), "{e}");
        assert!("ether:".parse::<BackendSpec>().is_err());
        assert!("ether:a-very-long-interface".parse::<BackendSpec>().is_err());
        let e = "tcp:1.2.3.4:5".parse::<BackendSpec>().unwrap_err();
        assert!(e.0.contains("udp:IP:PORT or ether:IFNAME"), "{e}");
    }
}
