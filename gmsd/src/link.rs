// SPDX-License-Identifier: GPL-2.0-only
//! Which medium a daemon's link runs on — UDP (`--listen IP:PORT`, peers `ID=IP:PORT`)
//! or raw Ethernet (`--link ether:IFNAME`, peers `ID=MAC`) — its peers' addresses, their
//! checks, and opening the vNIC backend for it.

use anyhow::{bail, Context};
use std::fmt;
use std::net::SocketAddr;
use trapeze_vnic::link::backend::{parse_ether_peer, parse_peer, EtherBackend, LinkBackend, MacAddr, UdpBackend};

/// This node's end of the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkAddr {
    /// A UDP socket bound to this address.
    Udp(SocketAddr),
    /// A raw-Ethernet (AF_PACKET) socket on this interface, in the daemon's network namespace.
    Ether(String),
}

impl fmt::Display for LinkAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkAddr::Udp(a) => write!(f, "udp:{a}"),
            LinkAddr::Ether(i) => write!(f, "ether:{i}"),
        }
    }
}

/// A peer's address on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAddr {
    Udp(SocketAddr),
    Mac(MacAddr),
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddr::Udp(a) => a.fmt(f),
            PeerAddr::Mac(m) => m.fmt(f),
        }
    }
}

/// Parse the `--peer` values for a link at `link`: `ID=IP:PORT` on UDP, `ID=MAC` on raw
/// Ethernet. A peer of the other kind, or a mix of both, is an error that says which link
/// takes which.
pub fn parse_peers<S: AsRef<str>>(link: &LinkAddr, peers: &[S]) -> Result<Vec<(u16, PeerAddr)>, String> {
    let mut out = Vec::new();
    let (mut udp, mut mac) = (None, None);
    for s in peers {
        let s = s.as_ref();
        let parsed = match (parse_peer(s), parse_ether_peer(s)) {
            (Ok((n, a)), _) => (n, PeerAddr::Udp(a)),
            (_, Ok((n, m))) => (n, PeerAddr::Mac(m)),
            (Err(e), Err(em)) => {
                // Say what this link expects.
                return Err(match link {
                    LinkAddr::Udp(_) => format!("--peer: {e}"),
                    LinkAddr::Ether(_) => format!("--peer: {em}"),
                });
            }
        };
        match parsed.1 {
            PeerAddr::Udp(_) => udp = udp.or(Some(s.to_string())),
            PeerAddr::Mac(_) => mac = mac.or(Some(s.to_string())),
        }
        out.push(parsed);
    }
    if let (Some(u), Some(m)) = (&udp, &mac) {
        return Err(format!(
            "--peer {u} is a UDP address and --peer {m} a MAC address: a daemon's link is either UDP \
             (--listen IP:PORT, peers ID=IP:PORT) or raw Ethernet (--link ether:IFNAME, peers ID=MAC), not both"
        ));
    }
    match (link, udp, mac) {
        (LinkAddr::Udp(a), _, Some(m)) => Err(format!(
            "--peer {m} is a MAC address, but the link is UDP (--listen {a}): raw-Ethernet peers need \
             --link ether:IFNAME; UDP peers are ID=IP:PORT"
        )),
        (LinkAddr::Ether(i), Some(u), _) => Err(format!(
            "--peer {u} is a UDP address, but the link is raw Ethernet (--link ether:{i}): give each peer as \
             ID=MAC, e.g. 1=02:00:00:00:00:01 (its interface's address)"
        )),
        _ => Ok(out),
    }
}

/// Check what needs no socket: no peer at this node's own UDP address or at port 0, no
/// multicast MAC, no two peers at one address.
pub fn check_peers(link: &LinkAddr, peers: &[(u16, PeerAddr)]) -> anyhow::Result<()> {
    if let LinkAddr::Udp(a) = link {
        if a.port() == 0 {
            bail!("--listen {a}: port 0");
        }
    }
    for (i, &(n, a)) in peers.iter().enumerate() {
        match (link, a) {
            (LinkAddr::Udp(l), PeerAddr::Udp(p)) => {
                if p == *l {
                    bail!("peer {n}={p}: that is this node's own --listen address");
                }
                if p.port() == 0 {
                    bail!("peer {n}={p}: port 0");
                }
            }
            (LinkAddr::Ether(_), PeerAddr::Mac(m)) => {
                if m.0[0] & 1 != 0 {
                    bail!("peer {n}={m}: a multicast or broadcast address, not one interface's");
                }
            }
            (l, p) => bail!("peer {n}={p}: not an address on the {l} link"),
        }
        if let Some(&(m, _)) = peers[..i].iter().find(|p| p.1 == a) {
            bail!("peers {m} and {n} have the same address {a}");
        }
    }
    Ok(())
}

/// Open the link's backend with every peer routed.
pub fn open(link: &LinkAddr, peers: &[(u16, PeerAddr)]) -> anyhow::Result<Box<dyn LinkBackend>> {
    match link {
        LinkAddr::Udp(addr) => {
            let mut b = UdpBackend::bind(*addr).with_context(|| format!("--listen {addr}"))?;
            for &(n, a) in peers {
                if let PeerAddr::Udp(a) = a {
                    b.add_peer(n, a);
                }
            }
            Ok(Box::new(b))
        }
        LinkAddr::Ether(ifname) => {
            let mut b = EtherBackend::open(ifname).map_err(|e| {
                // The backend's messages mostly name the interface already.
                let named = e.to_string().contains(ifname.as_str());
                anyhow::Error::new(e).context(if named {
                    "--link".to_string()
                } else {
                    format!("--link ether:{ifname}")
                })
            })?;
            for &(n, a) in peers {
                if let PeerAddr::Mac(m) = a {
                    if m == b.mac() {
                        bail!("peer {n}={m}: that is this node's own interface ({ifname}) address");
                    }
                    b.add_peer(n, m);
                }
            }
            Ok(Box::new(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp() -> LinkAddr {
        LinkAddr::Udp("127.0.0.1:7000".parse().unwrap())
    }

    fn eth() -> LinkAddr {
        LinkAddr::Ether("veth0".into())
    }

    #[test]
    fn peers_match_the_link() {
        let p = parse_peers(&udp(), &["1=127.0.0.1:7010"]).unwrap();
        assert_eq!(p, vec![(1, PeerAddr::Udp("127.0.0.1:7010".parse().unwrap()))]);
        let p = parse_peers(&eth(), &["2=02:00:00:00:00:0a"]).unwrap();
        assert_eq!(p, vec![(2, PeerAddr::Mac(MacAddr([2, 0, 0, 0, 0, 10])))]);
        assert_eq!(p[0].1.to_string(), "02:00:00:00:00:0a");
        let e = parse_peers(&udp(), &["1=02:00:00:00:00:01"]).unwrap_err();
        assert!(e.contains("is a MAC address, but the link is UDP") && e.contains("--link ether:IFNAME"), "{e}");
        let e = parse_peers(&eth(), &["1=127.0.0.1:7010"]).unwrap_err();
        assert!(e.contains("is a UDP address, but the link is raw Ethernet (--link ether:veth0)"), "{e}");
        let e = parse_peers(&eth(), &["1=02:00:00:00:00:01", "2=127.0.0.1:7010"]).unwrap_err();
        assert!(e.contains("--peer 2=127.0.0.1:7010 is a UDP address and --peer 1=02:00:00:00:00:01 a MAC"), "{e}");
        let e = parse_peers(&eth(), &["1=02:00:00:00:01"]).unwrap_err();
        assert!(e.contains("bad MAC address") && e.contains("six hex bytes"), "{e}");
        let e = parse_peers(&udp(), &["1=nowhere"]).unwrap_err();
        assert!(e.contains("not an IP:PORT socket address"), "{e}");
        let e = parse_peers(&eth(), &["x=02:00:00:00:00:01"]).unwrap_err();
        assert!(e.contains("node \"x\" is not a number"), "{e}");
    }

    #[test]
    fn bad_peer_addresses_are_refused() {
        let mac = |s: &str| PeerAddr::Mac(s.parse().unwrap());
        assert!(check_peers(&eth(), &[(1, mac("02:00:00:00:00:01")), (2, mac("02:00:00:00:00:02"))]).is_ok());
        let e = check_peers(&eth(), &[(1, mac("02:00:00:00:00:01")), (2, mac("02:00:00:00:00:01"))]).unwrap_err();
        assert!(e.to_string().contains("peers 1 and 2 have the same address 02:00:00:00:00:01"), "{e}");
        let e = check_peers(&eth(), &[(1, mac("ff:ff:ff:ff:ff:ff"))]).unwrap_err();
        assert!(e.to_string().contains("multicast or broadcast"), "{e}");
        let e = check_peers(&udp(), &[(1, mac("02:00:00:00:00:01"))]).unwrap_err();
        assert!(e.to_string().contains("not an address on the udp:127.0.0.1:7000 link"), "{e}");
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = open(&LinkAddr::Ether("tzgmsdnone0".into()), &[]).err().expect("no such interface");
        let e = format!("{e:#}");
        // Without CAP_NET_RAW the socket itself is refused first; both say what to do.
        assert!(
            e.starts_with("--link")
                && e.contains("ether:tzgmsdnone0")
                && (e.contains("no such interface") || e.contains("CAP_NET_RAW")),
            "{e}"
        );
    }
}
