// SPDX-License-Identifier: GPL-2.0-only
//! The link's per-packet MAC: POLYVAL then AES-256, under keys derived from the cluster
//! key, over a packet and the link addresses it travels between.
//!
//! A link with a key ([`super::Link::set_key`]) appends [`SEAL_BYTES`] to every packet,
//! between the packet and its trailer (the frames carry [`super::frame::FLAG_MAC`]): the
//! [`STAMP_BYTES`] stamp of [`super::replay`] (the link's epoch, new at each NIC start,
//! and the packet's sequence number), then [`TAG_BYTES`] of tag. It checks the tag of
//! every packet it receives before anything else sees it: a packet without a tag or with
//! a wrong one is dropped and counted in `LinkStats::mac_rejected`, never delivered to
//! the engines or the firmware. The tag covers the whole Trapeze packet (its header with
//! the source node id the NIC stamped, the control message and the payload), the stamp,
//! their length, the link frame's source and destination node, and the trailer's verdict
//! (whether the packet went out aborted), so a node without the key can neither forge a
//! packet, nor change a bit of one, nor pass one off as another node's or send it to
//! another node, nor restamp it, nor turn an aborted packet into a good one or a good one
//! into an aborted one: a tag that checks only with the other verdict is counted as
//! `trailer_forged` and the packet dropped. (The sender knows the verdict when it makes
//! the tag: it is computed after every byte of the packet was read, from the caller's
//! `abort` and whether every read succeeded; the native engine hands a packet to the
//! link only at its last link-out pulse, which carries the firmware's abort flag,
//! `engines.rs`.) Once the tag checks, the stamp
//! must be fresh ([`super::replay`]): a packet seen before or older than its source's
//! window is dropped (`replayed`), one from an older incarnation of its source too
//! (`replay_stale_epoch`).
//!
//! What it does not protect: it does not hide anything (no encryption). A receiver that
//! restarts has forgotten its windows, so packets recorded from a peer's current
//! incarnation can be replayed to it once each, until the peer's own packets move the new
//! window past them ([`super::replay`] says exactly); NetRPC's one-shot reply tokens and
//! generations then decide, not the link. The CRC
//! itself is not under the tag (only the verdict it gives): a changed CRC reads as
//! "aborted", which the tag refuses. The frame header (packet id, fragment geometry) is
//! not under the tag: a node without the key can still make a node drop good packets
//! (floods, or frames that claim a real packet's id so the real one is taken for a
//! duplicate). Every node holding the key is trusted alike: a keyed node can still claim
//! any source id, and stamp what it likes.
//!
//! The construction: `tag = AES-256(K_aes, POLYVAL(H, packet ‖ stamp ‖ 0-pad ‖ L))`, where
//! `L` is one block holding the length in bytes of packet and stamp, the source and
//! destination node ids and the verdict (1 for aborted), and `H` and `K_aes` are derived
//! from the cluster key (BLAKE3 `derive_key`, two contexts). POLYVAL (RFC 8452) is a
//! universal hash: two different inputs of up to ℓ blocks collide for at most ℓ of the
//! 2^128 keys `H`; `L` makes inputs of different lengths, addresses or verdicts
//! different. Encrypting the hash with a block cipher under an independent key makes it a
//! deterministic MAC (hash-then-PRF, as in Carter–Wegman–Shoup; AES-GCM-SIV derives its
//! tag from POLYVAL the same way, with a nonce mixed in): the tags show nothing of `H`,
//! and a forger who saw q tags wins with probability about q²·ℓ/2^128 — q = 2^40 packets
//! of the largest size (256 KiB, ℓ = 2^14 + 2) give about 2^-34. The stamp is not a
//! nonce the MAC depends on; it only makes each packet's tagged input different.
//!
//! Why this one: the MAC is on every packet, and each 8 KiB reply is hashed twice (sender
//! and receiver), so its speed is its cost. Per 8 KiB on the project's machine (AMD EPYC
//! with AVX-512, VPCLMULQDQ and AES-NI; best of 7 × 20,000, 2026-11-25): this MAC 0.41 µs
//! ([`super::polyval`]'s SIMD kernel; 1.40 µs on the `polyval` crate alone); BLAKE3
//! `keyed_hash` 1.61 µs (5.1 GB/s; the MAC until 2026-11-25); SipHash-2-4 with a 128-bit
//! output 3.1–3.5 µs; AES-256-GMAC (RustCrypto `aes-gcm`) 3.9–5.7 µs, and it would need a
//! nonce that never repeats under a key. A 160-byte control packet: 0.03 µs against
//! BLAKE3's 0.21 µs. `cargo xtask bench rpc` reports the cost on a call as `mac_cost`
//! (BENCHMARKS.md).

use aes::cipher::{BlockEncrypt, KeyInit};
use constant_time_eq::constant_time_eq_16;

use super::polyval;
use super::replay::STAMP_BYTES;
use crate::key::ClusterKey;

/// Bytes of tag appended to each packet.
pub const TAG_BYTES: usize = 16;

/// The BLAKE3 `derive_key` contexts that turn a cluster key into the link's MAC keys:
/// another use of the same cluster key gets unrelated keys.
/// (v3: the tag binds the stamp and the trailer's verdict; a v2 tag never checks under v3.)
const HASH_CONTEXT: &str = "trapeze-rs 2026-11-28 link packet MAC v3 POLYVAL key";
const CIPHER_CONTEXT: &str = "trapeze-rs 2026-11-28 link packet MAC v3 AES-256 key";

/// Bytes a keyed link adds to a packet before its trailer: the stamp, then the tag.
pub const SEAL_BYTES: usize = STAMP_BYTES + TAG_BYTES;

/// What checking a tag found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagCheck {
    /// The tag checks with the verdict the trailer gives.
    Good,
    /// The tag checks only with the other verdict: the trailer was changed on the way.
    OtherVerdict,
    /// The tag does not check.
    Bad,
}

/// A link's MAC keys.
#[derive(Clone)]
pub struct LinkMac {
    hash: polyval::Key,
    cipher: aes::Aes256,
}

impl core::fmt::Debug for LinkMac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("LinkMac(..)")
    }
}

/// A tag being computed over a packet given in pieces.
pub struct Tagger<'m> {
    hash: polyval::Hasher<'m>,
    cipher: &'m aes::Aes256,
    len: u64,
}

impl Tagger<'_> {
    pub fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        self.hash.update(bytes);
    }

    /// The tag of everything given, for a packet from `src` to `dst` that goes out
    /// aborted (its trailer says bad) if `aborted`.
    pub fn finish(self, src: u16, dst: u16, aborted: bool) -> [u8; TAG_BYTES] {
        let last = last_block(self.len, src, dst, aborted);
        encrypt(self.cipher, self.hash.finish(last))
    }

    /// Whether `tag` is the tag of everything given, from `src` to `dst`, with the
    /// trailer's verdict `aborted` or (then the trailer was changed) the other one. The
    /// packet is hashed once; only the last block and the cipher run twice, and only
    /// when the first comparison fails.
    pub fn check(self, src: u16, dst: u16, aborted: bool, tag: &[u8; TAG_BYTES]) -> TagCheck {
        let other = self.hash.clone();
        let (len, cipher) = (self.len, self.cipher);
        if constant_time_eq_16(&self.finish(src, dst, aborted), tag) {
            return TagCheck::Good;
        }
        let flipped = encrypt(cipher, other.finish(last_block(len, src, dst, !aborted)));
        if constant_time_eq_16(&flipped, tag) {
            TagCheck::OtherVerdict
        } else {
            TagCheck::Bad
        }
    }
}

/// The block `L` hashed last: the bytes' length, the addresses, the verdict.
fn last_block(len: u64, src: u16, dst: u16, aborted: bool) -> [u8; polyval::BLOCK] {
    let mut last = [0u8; polyval::BLOCK];
    last[..8].copy_from_slice(&len.to_le_bytes());
    last[8..10].copy_from_slice(&src.to_le_bytes());
    last[10..12].copy_from_slice(&dst.to_le_bytes());
    last[12] = u8::from(aborted);
    last
}

fn encrypt(cipher: &aes::Aes256, hash: [u8; polyval::BLOCK]) -> [u8; TAG_BYTES] {
    let mut block = aes::Block::from(hash);
    cipher.encrypt_block(&mut block);
    block.into()
}

impl LinkMac {
    pub fn new(cluster: &ClusterKey) -> LinkMac {
        LinkMac::with_hash(cluster, polyval::Key::new)
    }

    /// The MAC under `cluster`, its POLYVAL key made by `hash_key` (the SIMD kernel where
    /// the CPU has it, or always the portable code).
    fn with_hash(cluster: &ClusterKey, hash_key: fn([u8; polyval::BLOCK]) -> polyval::Key) -> LinkMac {
        let h = blake3::derive_key(HASH_CONTEXT, cluster.bytes());
        let k = blake3::derive_key(CIPHER_CONTEXT, cluster.bytes());
        let mut hk = [0u8; polyval::BLOCK];
        hk.copy_from_slice(&h[..polyval::BLOCK]);
        LinkMac { hash: hash_key(hk), cipher: aes::Aes256::new(&k.into()) }
    }

    pub fn tagger(&self) -> Tagger<'_> {
        Tagger { hash: self.hash.hasher(), cipher: &self.cipher, len: 0 }
    }

    /// The tag of `sealed` (a packet and its stamp) sent from `src` to `dst`, aborted or not.
    pub fn tag(&self, src: u16, dst: u16, sealed: &[u8], aborted: bool) -> [u8; TAG_BYTES] {
        let mut t = self.tagger();
        t.update(sealed);
        t.finish(src, dst, aborted)
    }

    /// Whether `tag` is the tag of `sealed` from `src` to `dst` with the verdict
    /// `aborted` (compared in constant time), or with the other verdict.
    pub fn check(&self, src: u16, dst: u16, sealed: &[u8], aborted: bool, tag: &[u8]) -> TagCheck {
        let Ok(tag) = <&[u8; TAG_BYTES]>::try_from(tag) else {
            return TagCheck::Bad;
        };
        let mut t = self.tagger();
        t.update(sealed);
        t.check(src, dst, aborted, tag)
    }

    /// Whether `tag` is the tag of `sealed` from `src` to `dst` with the verdict `aborted`.
    pub fn verify(&self, src: u16, dst: u16, sealed: &[u8], aborted: bool, tag: &[u8]) -> bool {
        self.check(src, dst, sealed, aborted, tag) == TagCheck::Good
    }
}

/// Claimed sources [`MacRejects`] counts one by one; rejections claiming any other are
/// summed in [`MacRejects::others`].
pub const MAC_REJECT_SOURCES: usize = 16;

/// Packets dropped because their MAC did not check, by the source node their frame header
/// *claims*: the header is not authenticated (that is what failed), so a count says
/// "packets claiming to be node N", not "node N sent". Counted alongside
/// `LinkStats::mac_rejected`, so a daemon can name the peer whose key differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MacRejects {
    by_src: [(u16, u64); MAC_REJECT_SOURCES],
    len: u8,
    /// Rejections claiming a source beyond the first [`MAC_REJECT_SOURCES`] seen.
    pub others: u64,
}

impl MacRejects {
    /// One more rejected packet claiming to come from `src`.
    pub fn record(&mut self, src: u16) {
        let len = usize::from(self.len);
        if let Some(e) = self.by_src[..len].iter_mut().find(|e| e.0 == src) {
            e.1 += 1;
        } else if let Some(e) = self.by_src.get_mut(len) {
            *e = (src, 1);
            self.len += 1;
        } else {
            self.others += 1;
        }
    }

    /// Rejected packets claiming to come from `src`.
    pub fn claiming(&self, src: u16) -> u64 {
        self.iter().find(|e| e.0 == src).map_or(0, |e| e.1)
    }

    /// (claimed source, rejected packets), in the order the sources were first seen.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.by_src[..usize::from(self.len)].iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_bind_packet_addresses_verdict_and_key() {
        let m = LinkMac::new(&ClusterKey::from_bytes([1; 32]));
        let p = b"a packet of some bytes";
        let t = m.tag(1, 2, p, false);
        assert!(m.verify(1, 2, p, false, &t));
        assert!(!m.verify(2, 1, p, false, &t), "addresses swapped");
        assert!(!m.verify(3, 2, p, false, &t), "another source");
        assert!(!m.verify(1, 2, &p[..p.len() - 1], false, &t), "shortened");
        let mut q = *p;
        q[3] ^= 0x10;
        assert!(!m.verify(1, 2, &q, false, &t), "a flipped bit");
        assert!(!m.verify(1, 2, p, false, &t[..15]), "a short tag");
        assert_eq!(m.check(1, 2, p, true, &t), TagCheck::OtherVerdict, "the verdict flipped");
        assert_eq!(m.check(1, 2, &q, true, &t), TagCheck::Bad);
        let aborted = m.tag(1, 2, p, true);
        assert_ne!(aborted, t);
        assert_eq!(m.check(1, 2, p, true, &aborted), TagCheck::Good);
        assert_eq!(m.check(1, 2, p, false, &aborted), TagCheck::OtherVerdict);
        let other = LinkMac::new(&ClusterKey::from_bytes([2; 32]));
        assert!(!other.verify(1, 2, p, false, &t), "another key");
        // Given in pieces, the same tag.
        let mut s = m.tagger();
        s.update(&p[..5]);
        s.update(&p[5..]);
        assert_eq!(s.finish(1, 2, false), t);
        // The portable hash gives the same tags.
        let portable = LinkMac::with_hash(&ClusterKey::from_bytes([1; 32]), polyval::Key::portable);
        assert_eq!(portable.tag(1, 2, p, false), t);
        let long = vec![0x5a; 9000];
        assert_eq!(portable.tag(7, 8, &long, true), m.tag(7, 8, &long, true));
    }

    #[test]
    fn rejections_are_counted_by_claimed_source() {
        let mut r = MacRejects::default();
        for src in [3, 3, 7] {
            r.record(src);
        }
        assert_eq!((r.claiming(3), r.claiming(7), r.claiming(1)), (2, 1, 0));
        for src in 100..100 + MAC_REJECT_SOURCES as u16 {
            r.record(src);
        }
        assert_eq!(r.iter().count(), MAC_REJECT_SOURCES);
        assert_eq!(r.others, 2, "sources past the table's capacity are summed, not lost");
        r.record(3);
        assert_eq!(r.claiming(3), 3, "a source already counted keeps counting");
    }
}
