// SPDX-License-Identifier: GPL-2.0-only
//! The link's per-packet MAC: a BLAKE3 keyed hash, under a key derived from the cluster
//! key, over a packet and the link addresses it travels between.
//!
//! A link with a key ([`super::Link::set_key`]) appends [`TAG_BYTES`] of tag to every
//! packet, between the packet and its trailer (the frames carry [`super::frame::FLAG_MAC`]),
//! and checks the tag of every packet it receives before anything else sees it: a packet
//! without a tag or with a wrong one is dropped and counted in `LinkStats::mac_rejected`,
//! never delivered to the engines or the firmware. The tag covers the whole Trapeze packet
//! (its header with the source node id the NIC stamped, the control message and the
//! payload), its length, and the link frame's source and destination node, so a node
//! without the key can neither forge a packet, nor change a bit of one, nor pass one off
//! as another node's or send it to another node.
//!
//! What it does not protect: it does not hide anything (no encryption); it keeps no
//! state, so a recorded packet can be replayed to the same node later (NetRPC's one-shot
//! reply tokens and generations then decide, not the link); and a node without the key
//! can still make a node drop good packets (floods, or frames that claim a real packet's
//! id so the real one is taken for a duplicate). Every node holding the key is trusted
//! alike: a keyed node can still claim any source id.
//!
//! Why BLAKE3: its keyed mode is a MAC with no nonce to manage and a 32-byte key, from a
//! well-kept `no_std` crate that picks its SIMD at run time. 8 KiB tag time on the
//! project's machine (2 vCPU VM with AVX-512, AES-NI and PCLMULQDQ; best of 7 × 20,000,
//! 2026-11-24): BLAKE3 `keyed_hash` 1.61 µs (5.1 GB/s); AES-256-GMAC (RustCrypto
//! `aes-gcm` 0.10, empty plaintext, 8 KiB AAD) 3.9–5.7 µs (`ghash` alone 4.2–5.4 µs),
//! and it would need a nonce that never repeats under a key (`ring` 0.17's AES-256-GCM
//! with the 8 KiB as associated data: 9.4 µs, measured on a busy machine); SipHash-2-4
//! with a 128-bit output (the project's SipHash, streamed by `siphasher` 1.0) 3.1–3.5 µs,
//! SipHash-1-3 1.7 µs but with a 64- or 128-bit key. On the link each 8 KiB reply pays
//! about that twice (sender and receiver): `cargo xtask bench rpc` reports it as
//! `mac_cost` (BENCHMARKS.md).

use constant_time_eq::constant_time_eq_16;

use crate::key::ClusterKey;

/// Bytes of tag appended to each packet.
pub const TAG_BYTES: usize = 16;

/// The BLAKE3 `derive_key` context that turns a cluster key into the link's MAC key:
/// another use of the same cluster key gets an unrelated key.
const CONTEXT: &str = "trapeze-rs 2026-11-24 link packet MAC v1";

/// A link's MAC key.
#[derive(Clone)]
pub struct LinkMac {
    key: [u8; 32],
}

impl core::fmt::Debug for LinkMac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("LinkMac(..)")
    }
}

/// A tag being computed over a packet given in pieces.
pub struct Tagger(blake3::Hasher);

impl Tagger {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The tag of everything given, for a packet from `src` to `dst`.
    pub fn finish(mut self, src: u16, dst: u16) -> [u8; TAG_BYTES] {
        // After the packet: its length is part of BLAKE3's input framing already, and the
        // addresses are a fixed-size suffix, so no two (packet, src, dst) hash alike.
        let mut ad = [0u8; 4];
        ad[..2].copy_from_slice(&src.to_le_bytes());
        ad[2..].copy_from_slice(&dst.to_le_bytes());
        self.0.update(&ad);
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&self.0.finalize().as_bytes()[..TAG_BYTES]);
        tag
    }
}

impl LinkMac {
    pub fn new(cluster: &ClusterKey) -> LinkMac {
        LinkMac { key: blake3::derive_key(CONTEXT, cluster.bytes()) }
    }

    pub fn tagger(&self) -> Tagger {
        Tagger(blake3::Hasher::new_keyed(&self.key))
    }

    /// The tag of `packet` sent from `src` to `dst`.
    pub fn tag(&self, src: u16, dst: u16, packet: &[u8]) -> [u8; TAG_BYTES] {
        let mut t = self.tagger();
        t.update(packet);
        t.finish(src, dst)
    }

    /// Whether `tag` is `packet`'s tag from `src` to `dst` (compared in constant time).
    pub fn verify(&self, src: u16, dst: u16, packet: &[u8], tag: &[u8]) -> bool {
        let Ok(tag) = <&[u8; TAG_BYTES]>::try_from(tag) else {
            return false;
        };
        constant_time_eq_16(&self.tag(src, dst, packet), tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_bind_packet_addresses_and_key() {
        let m = LinkMac::new(&ClusterKey::from_bytes([1; 32]));
        let p = b"a packet of some bytes";
        let t = m.tag(1, 2, p);
        assert!(m.verify(1, 2, p, &t));
        assert!(!m.verify(2, 1, p, &t), "addresses swapped");
        assert!(!m.verify(3, 2, p, &t), "another source");
        assert!(!m.verify(1, 2, &p[..p.len() - 1], &t), "shortened");
        let mut q = *p;
        q[3] ^= 0x10;
        assert!(!m.verify(1, 2, &q, &t), "a flipped bit");
        assert!(!m.verify(1, 2, p, &t[..15]), "a short tag");
        let other = LinkMac::new(&ClusterKey::from_bytes([2; 32]));
        assert!(!other.verify(1, 2, p, &t), "another key");
        // Given in pieces, the same tag.
        let mut s = m.tagger();
        s.update(&p[..5]);
        s.update(&p[5..]);
        assert_eq!(s.finish(1, 2), t);
        // The MAC key is derived, not the cluster key itself.
        assert_ne!(m.key, [1; 32]);
    }
}
