// SPDX-License-Identifier: GPL-2.0-only
//! The wire packet: Trapeze header, control message, payload, link trailer.
//!
//! ```text
//! +0  magic u16 | version u8 | flags u8
//! +4  src node u16 | dst node u16
//! +8  ctrl_len u16 | reserved u16
//! +12 payload_len u32
//! +16 payload token u64 (0 = unsolicited)
//! +24 seq u32          per-sender packet sequence (diagnostics)
//! +28 reserved u32
//! +32 control message, ctrl_len bytes padded to a multiple of 4
//! ... payload, payload_len bytes
//! ... CRC-32 (IEEE) of everything before it, little-endian — the link trailer
//! ```
//! All fields little-endian. The trailer belongs to the link: the link-out engine appends
//! it and the link-in engine checks it, as Myrinet's link hardware did; the firmware sees
//! only "CRC good/bad" at the end of a packet. Because payload DMA starts before the
//! packet has fully arrived (cut-through), a receiver must not act on a packet until the
//! trailer checks: payload bytes may already be in the destination frame, but no message
//! announcing them is delivered and an IPT claim is released, not consumed.

use super::layout::{CTRL_MSG_BYTES, MAX_MTU_BYTES, RECV_STAGING_BYTES, SEND_STAGING_BYTES};

pub const MAGIC: u16 = 0x5A7E;
pub const VERSION: u8 = 1;
pub const HEADER_BYTES: u32 = 32;

pub const HEADER_WORDS: usize = 8;
/// Where the sender's node id (`u16`, little-endian) is in the header.
pub const SRC_OFFSET: usize = 4;
pub const TRAILER_BYTES: u32 = 4;

// Each staging buffer of the NIC holds at least one packet of the largest MTU.
const _: () = {
    assert!(SEND_STAGING_BYTES >= HEADER_BYTES + CTRL_MSG_BYTES + MAX_MTU_BYTES + 8);
    assert!(RECV_STAGING_BYTES >= HEADER_BYTES + CTRL_MSG_BYTES + MAX_MTU_BYTES + 8);
};

/// The packet carries a payload token (solicited payload).
pub const FLAG_TOKEN: u8 = 1 << 0;
/// A request the receiving NIC may answer from its answer table: the control message ends
/// with an [`super::answer::Descriptor`].
pub const FLAG_ANSWER: u8 = 1 << 1;
/// A NIC's answer to such a request (sent by the NIC, not by its host).
pub const FLAG_ANSWERED: u8 = 1 << 2;

/// Parse errors: the packet is dropped and counted, never acted upon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    BadMagic,
    BadVersion,
    CtrlTooLong,
    PayloadTooLong,
    /// The byte count does not match the lengths in the header.
    LengthMismatch,
}

/// The Trapeze header, parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub flags: u8,
    pub src: u16,
    pub dst: u16,
    pub ctrl_len: u16,
    pub payload_len: u32,
    pub token: u64,
    pub seq: u32,
}

/// Bytes the control message occupies on the wire (padded to words).
pub const fn ctrl_wire_bytes(ctrl_len: u32) -> u32 {
    (ctrl_len + 3) & !3
}

impl Header {
    /// Bytes from the start of the header to the first payload byte.
    pub const fn prefix_bytes(&self) -> u32 {
        HEADER_BYTES + ctrl_wire_bytes(self.ctrl_len as u32)
    }
    /// Bytes of the packet without the link trailer.
    pub const fn packet_bytes(&self) -> u32 {
        self.prefix_bytes() + self.payload_len
    }

    pub fn to_words(&self) -> [u32; HEADER_WORDS] {
        [
            MAGIC as u32 | (VERSION as u32) << 16 | (self.flags as u32) << 24,
            self.src as u32 | (self.dst as u32) << 16,
            self.ctrl_len as u32,
            self.payload_len,
            self.token as u32,
            (self.token >> 32) as u32,
            self.seq,
            0,
        ]
    }

    /// Parse and validate the header words against `mtu` (which is ≤ MAX_MTU_BYTES).
    pub fn from_words(w: &[u32; HEADER_WORDS], mtu: u32) -> Result<Self, WireError> {
        if w[0] as u16 != MAGIC {
            return Err(WireError::BadMagic);
        }
        if (w[0] >> 16) as u8 != VERSION {
            return Err(WireError::BadVersion);
        }
        let h = Header {
            flags: (w[0] >> 24) as u8,
            src: w[1] as u16,
            dst: (w[1] >> 16) as u16,
            ctrl_len: w[2] as u16,
            payload_len: w[3],
            token: w[4] as u64 | (w[5] as u64) << 32,
            seq: w[6],
        };
        if w[2] > CTRL_MSG_BYTES {
            return Err(WireError::CtrlTooLong);
        }
        if h.payload_len > mtu.min(MAX_MTU_BYTES) {
            return Err(WireError::PayloadTooLong);
        }
        Ok(h)
    }

    pub fn to_bytes(&self) -> [u8; HEADER_BYTES as usize] {
        let mut b = [0u8; HEADER_BYTES as usize];
        for (i, w) in self.to_words().iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Parse the header at the start of `bytes`.
    pub fn parse(bytes: &[u8], mtu: u32) -> Result<Self, WireError> {
        if bytes.len() < HEADER_BYTES as usize {
            return Err(WireError::Truncated);
        }
        let mut w = [0u32; HEADER_WORDS];
        for (i, word) in w.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[4 * i..4 * i + 4]);
            *word = u32::from_le_bytes(b);
        }
        Self::from_words(&w, mtu)
    }
}

/// A whole packet as it crosses the link, trailer excluded, checked against its header.
/// Used by link backends and tests that inspect packets; the firmware never holds a
/// whole packet as one slice.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    pub header: Header,
    pub ctrl: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    pub fn parse(bytes: &'a [u8], mtu: u32) -> Result<Self, WireError> {
        let header = Header::parse(bytes, mtu)?;
        if bytes.len() != header.packet_bytes() as usize {
            return Err(WireError::LengthMismatch);
        }
        let c0 = HEADER_BYTES as usize;
        let p0 = header.prefix_bytes() as usize;
        Ok(Packet { header, ctrl: &bytes[c0..c0 + header.ctrl_len as usize], payload: &bytes[p0..] })
    }
}

/// CRC-32 (IEEE 802.3, reflected, init and xorout all-ones): the link trailer.
/// Bitwise and table-free so it builds anywhere; link backends on a host may use a
/// faster implementation of the same function.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0xFFFF_FFFF, bytes) ^ 0xFFFF_FFFF
}

/// Incremental form of [`crc32`]: start from `0xFFFF_FFFF`, xor the result with it at the end.
pub fn crc32_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    crc
}
