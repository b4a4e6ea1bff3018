// SPDX-License-Identifier: GPL-2.0-only
//! Link frames as raw Ethernet frames (AF_PACKET, SOCK_RAW, ethertype 0x88B5) on a named
//! interface, with a route table from node to MAC address.
//!
//! The only unsafe code of the link lives here, in the `sys` module below: a
//! `sockaddr_ll` for bind(2) and two interface ioctls (MTU, hardware address). Everything
//! is done through the socket, so it is right for the socket's network namespace (sysfs
//! may show another namespace's interfaces).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::str::FromStr;

use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use super::{parse_node, LinkBackend, SpecError};
use crate::link::frame;

/// IEEE 802 "local experimental ethertype 1".
pub const ETHERTYPE: u16 = 0x88B5;
const ETH_HEADER_BYTES: usize = 14;
/// Ethernet pads payloads shorter than this; such frames are trimmed on receipt.
const ETH_MIN_PAYLOAD_BYTES: usize = 46;

/// A 48-bit MAC address; parses and prints as `02:00:00:00:00:01`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl FromStr for MacAddr {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = || SpecError(format!("bad MAC address {s:?}: expected six hex bytes like 02:00:00:00:00:01"));
        let mut mac = [0u8; 6];
        let mut parts = s.trim().split(':');
        for b in &mut mac {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || p.len() > 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(mac))
    }
}

/// Parse an Ethernet peer `NODE=MAC`, e.g. `1=02:00:00:00:00:01`.
pub fn parse_ether_peer(s: &str) -> Result<(u16, MacAddr), SpecError> {
    const EXAMPLE: &str = "1=02:00:00:00:00:01";
    let Some((node, mac)) = s.split_once('=') else {
        return Err(SpecError(format!("bad peer {s:?}: expected NODE=MAC, e.g. {EXAMPLE}")));
    };
    let node = parse_node(node, s, EXAMPLE)?;
    let mac = mac.parse::<MacAddr>().map_err(|e| SpecError(format!("bad peer {s:?}: {e}")))?;
    Ok((node, mac))
}

/// A raw-Ethernet link backend bound to one interface.
#[derive(Debug)]
pub struct EtherBackend {
    fd: OwnedFd,
    ifname: String,
    mac: MacAddr,
    mtu: usize,
    peers: HashMap<u16, MacAddr>,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl EtherBackend {
    /// Open a packet socket on interface `ifname` (in the calling thread's network
    /// namespace), learn its MAC and MTU. Needs CAP_NET_RAW: without it the error is
    /// "raw Ethernet needs root or CAP_NET_RAW" (`PermissionDenied`).
    pub fn open(ifname: &str) -> io::Result<Self> {
        let ctx =
            |what: &str, e: Errno| io::Error::new(io::Error::from(e).kind(), format!("ether:{ifname}: {what}: {e}"));
        let fd = rustix::net::socket_with(
            AddressFamily::PACKET,
            SocketType::RAW,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            Some(sys::protocol()),
        )
        .map_err(|e| match e {
            Errno::PERM | Errno::ACCESS => {
                io::Error::new(io::ErrorKind::PermissionDenied, "raw Ethernet needs root or CAP_NET_RAW")
            }
            e => ctx("packet socket", e),
        })?;
        let ifindex = rustix::net::netdevice::name_to_index(&fd, ifname).map_err(|e| {
            if e == Errno::NODEV {
                io::Error::new(io::ErrorKind::NotFound, format!("ether:{ifname}: no such interface"))
            } else {
                ctx("interface index", e)
            }
        })?;
        let mtu = sys::mtu(fd.as_fd(), ifname).map_err(|e| ctx("SIOCGIFMTU", e))?;
        let (hatype, mac) = sys::hwaddr(fd.as_fd(), ifname).map_err(|e| ctx("SIOCGIFHWADDR", e))?;
        if hatype != sys::ARPHRD_ETHER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ether:{ifname}: not an Ethernet interface (hardware type {hatype})"),
            ));
        }
        if mtu < frame::HEADER_BYTES + 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ether:{ifname}: MTU {mtu} too small for link frames"),
            ));
        }
        sys::bind(fd.as_fd(), ifindex).map_err(|e| ctx("bind", e))?;
        let mut me = EtherBackend {
            fd,
            ifname: ifname.to_string(),
            mac: MacAddr(mac),
            mtu,
            peers: HashMap::new(),
            tx: vec![0; ETH_HEADER_BYTES + mtu],
            // Slack for VLAN tags or a peer with a larger MTU: such frames are cut and
            // then rejected by the frame parser instead of being misread.
            rx: vec![0; ETH_HEADER_BYTES + mtu + 64],
        };
        // Until bind, the socket took this ethertype from every interface: discard that.
        // Bounded, in case frames keep coming: any left over are filtered by MAC anyway.
        let mut scratch = [0u8; 64];
        for _ in 0..4096 {
            if rustix::net::recv(&me.fd, &mut scratch[..], RecvFlags::TRUNC).is_err() {
                break;
            }
        }
        me.tx[6..12].copy_from_slice(&me.mac.0);
        me.tx[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        Ok(me)
    }

    /// The interface's MAC address (peers route to it).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface MTU: the largest Ethernet payload, which is the largest link frame.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Route frames for `node` to `mac` (replacing any earlier route).
    pub fn add_peer(&mut self, node: u16, mac: MacAddr) {
        self.peers.insert(node, mac);
    }
}

impl LinkBackend for EtherBackend {
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()> {
        if frame.len() > self.mtu {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {} bytes exceeds MTU {} of {}", frame.len(), self.mtu, self.ifname),
            ));
        }
        let Some(mac) = self.peers.get(&dst) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("ether link: no MAC address for node {dst}")));
        };
        self.tx[0..6].copy_from_slice(&mac.0);
        let n = ETH_HEADER_BYTES + frame.len();
        self.tx[ETH_HEADER_BYTES..n].copy_from_slice(frame);
        loop {
            match rustix::net::send(&self.fd, &self.tx[..n], SendFlags::empty()) {
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            let n = match rustix::net::recv(&self.fd, &mut self.rx[..], RecvFlags::empty()) {
                Ok((n, _)) => n,
                Err(Errno::AGAIN) => return Ok(None),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let rx = &self.rx[..n];
            if n < ETH_HEADER_BYTES || rx[0..6] != self.mac.0 || rx[12..14] != ETHERTYPE.to_be_bytes() {
                continue; // not ours (e.g. broadcast or another host's frame)
            }
            let mut payload = &rx[ETH_HEADER_BYTES..];
            if payload.len() <= ETH_MIN_PAYLOAD_BYTES {
                payload = &payload[..frame::unpadded_len(payload)];
            }
            let m = payload.len().min(buf.len());
            buf[..m].copy_from_slice(&payload[..m]);
            return Ok(Some(m));
        }
    }

    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn max_frame_bytes(&self) -> usize {
        self.mtu
    }

    fn routes_to(&self, dst: u16) -> bool {
        self.peers.contains_key(&dst)
    }

    fn describe(&self) -> String {
        format!("ether {} {} mtu {} ({})", self.ifname, self.mac, self.mtu, super::peers_in_words(self.peers.len()))
    }
}

/// The unsafe part: kernel structures passed by pointer.
#[allow(unsafe_code)]
mod sys {
    use std::num::NonZeroU32;
    use std::os::fd::BorrowedFd;

    use rustix::io::Errno;
    use rustix::ioctl::{ioctl, Opcode, Updater};
    use rustix::net::addr::{SocketAddrArg, SocketAddrLen, SocketAddrOpaque};
    use rustix::net::{AddressFamily, Protocol};

    use super::ETHERTYPE;

    pub const ARPHRD_ETHER: u16 = 1;
    const SIOCGIFMTU: Opcode = 0x8921;
    const SIOCGIFHWADDR: Opcode = 0x8927;
    const IFNAMSIZ: usize = 16;

    /// The socket protocol: the ethertype in network byte order, as packet(7) wants.
    pub fn protocol() -> Protocol {
        // 0x88B5 byte-swapped is 0xB588: never zero.
        let raw = NonZeroU32::new(ETHERTYPE.to_be() as u32).unwrap_or(NonZeroU32::MIN);
        Protocol::from_raw(raw)
    }

    /// `struct sockaddr_ll` (packet(7)).
    #[repr(C)]
    struct SockaddrLl {
        family: u16,
        protocol: u16,
        ifindex: i32,
        hatype: u16,
        pkttype: u8,
        halen: u8,
        addr: [u8; 8],
    }

    // SAFETY: `with_sockaddr` passes a pointer to `self`, a `#[repr(C)]` struct laid out
    // as the kernel's `struct sockaddr_ll` (20 bytes, family first), with its exact size;
    // the pointer is valid for the duration of the call because `self` is borrowed.
    unsafe impl SocketAddrArg for SockaddrLl {
        unsafe fn with_sockaddr<R>(&self, f: impl FnOnce(*const SocketAddrOpaque, SocketAddrLen) -> R) -> R {
            f((self as *const Self).cast(), core::mem::size_of::<Self>() as SocketAddrLen)
        }
    }

    /// Bind the packet socket to interface `ifindex` and our ethertype.
    pub fn bind(fd: BorrowedFd<'_>, ifindex: u32) -> Result<(), Errno> {
        let sa = SockaddrLl {
            family: AddressFamily::PACKET.as_raw(),
            protocol: ETHERTYPE.to_be(),
            ifindex: i32::try_from(ifindex).map_err(|_| Errno::INVAL)?,
            hatype: 0,
            pkttype: 0,
            halen: 0,
            addr: [0; 8],
        };
        rustix::net::bind(fd, &sa)
    }

    /// `struct ifreq`: the name, then a union whose largest member is 24 bytes on 64-bit
    /// targets (smaller on 32-bit ones, so this is never too small).
    #[repr(C)]
    struct IfReq {
        name: [u8; IFNAMSIZ],
        data: [u8; 24],
    }

    fn ifreq(ifname: &str) -> Result<IfReq, Errno> {
        let mut r = IfReq { name: [0; IFNAMSIZ], data: [0; 24] };
        let b = ifname.as_bytes();
        if b.is_empty() || b.len() >= IFNAMSIZ || b.contains(&0) {
            return Err(Errno::NODEV);
        }
        r.name[..b.len()].copy_from_slice(b);
        Ok(r)
    }

    fn query<const OPCODE: Opcode>(fd: BorrowedFd<'_>, ifname: &str) -> Result<IfReq, Errno> {
        let mut r = ifreq(ifname)?;
        // SAFETY: SIOCGIFMTU and SIOCGIFHWADDR (the only OPCODEs used) read a
        // NUL-terminated name from and write their result into a `struct ifreq`, which
        // `IfReq` matches in layout and at least in size; `r` outlives the call.
        unsafe { ioctl(fd, Updater::<OPCODE, IfReq>::new(&mut r))? };
        Ok(r)
    }

    /// The interface MTU (`ifr_mtu`, an int at the start of the union).
    pub fn mtu(fd: BorrowedFd<'_>, ifname: &str) -> Result<usize, Errno> {
        let r = query::<SIOCGIFMTU>(fd, ifname)?;
        let mtu = i32::from_ne_bytes([r.data[0], r.data[1], r.data[2], r.data[3]]);
        usize::try_from(mtu).map_err(|_| Errno::INVAL)
    }

    /// The hardware type and address (`ifr_hwaddr`, a `struct sockaddr`).
    pub fn hwaddr(fd: BorrowedFd<'_>, ifname: &str) -> Result<(u16, [u8; 6]), Errno> {
        let r = query::<SIOCGIFHWADDR>(fd, ifname)?;
        let hatype = u16::from_ne_bytes([r.data[0], r.data[1]]);
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&r.data[2..8]);
        Ok((hatype, mac))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_and_peers() {
        let m: MacAddr = "02:00:00:00:00:0a".parse().unwrap();
        assert_eq!(m, MacAddr([2, 0, 0, 0, 0, 10]));
        assert_eq!(m.to_string(), "02:00:00:00:00:0a");
        for bad in ["", "02:00:00:00:00", "02:00:00:00:00:00:00", "02:00:00:00:00:0g", "002:0:0:0:0:0"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert_eq!(parse_ether_peer("1=02:00:00:00:00:01"), Ok((1, MacAddr([2, 0, 0, 0, 0, 1]))));
        let e = parse_ether_peer("1=zz").unwrap_err();
        assert!(e.0.contains("bad MAC address"), "{e}");
        let e = parse_ether_peer("02:00:00:00:00:01").unwrap_err();
        assert!(e.0.contains("expected NODE=MAC"), "{e}");
    }

    #[test]
    fn missing_interface_or_permission() {
        match EtherBackend::open("tzno-such-if0") {
            Ok(_) => panic!("opened a missing interface"),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                assert_eq!(e.to_string(), "raw Ethernet needs root or CAP_NET_RAW")
            }
            Err(e) => assert!(e.to_string().contains("no such interface"), "{e}"),
        }
    }
}
