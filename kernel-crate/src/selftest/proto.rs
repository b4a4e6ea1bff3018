// SPDX-License-Identifier: GPL-2.0-only
//! The driver's own test message: a ping carrying a payload, answered by a pong carrying
//! the same payload back. Control message (little-endian words):
//!
//! ```text
//! +0  magic "TPZP"   +4 kind (1 ping, 2 pong)   +8 seq   +12 payload bytes
//! +16 CRC-32 of the payload (iface::wire::crc32)
//! ```
//!
//! The payload is [`pattern_byte`]`(seq, i)`, so the pinger checks every byte of the pong
//! against what it sent without keeping a copy.

use crate::tpz::iface::wire::crc32_update;

const MAGIC: u32 = u32::from_le_bytes(*b"TPZP");
/// Bytes of the control message.
pub(crate) const CTRL_BYTES: usize = 20;

/// Ping or pong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ping = 1,
    Pong = 2,
}

/// A parsed ping or pong control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Msg {
    pub(crate) kind: Kind,
    pub(crate) seq: u32,
    pub(crate) len: u32,
    pub(crate) crc: u32,
}

impl Msg {
    /// `None` unless `ctrl` is one of ours.
    pub(crate) fn parse(ctrl: &[u8]) -> Option<Self> {
        let w = |i: usize| -> Option<u32> {
            let b = ctrl.get(4 * i..4 * i + 4)?;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if w(0)? != MAGIC {
            return None;
        }
        let kind = match w(1)? {
            1 => Kind::Ping,
            2 => Kind::Pong,
            _ => return None,
        };
        Some(Msg { kind, seq: w(2)?, len: w(3)?, crc: w(4)? })
    }

    pub(crate) fn emit(&self) -> [u8; CTRL_BYTES] {
        let mut b = [0u8; CTRL_BYTES];
        for (i, v) in [MAGIC, self.kind as u32, self.seq, self.len, self.crc].iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// Byte `i` of ping `seq`'s payload (not periodic in 256, differs between pings).
pub(crate) fn pattern_byte(seq: u32, i: usize) -> u8 {
    let i = i as u32;
    (i ^ (i >> 8) ^ (i >> 16)).wrapping_mul(31).wrapping_add(seq.wrapping_mul(0x9E37_79B9) >> 24) as u8
}

/// Fill `out` with the bytes `off..off + out.len()` of ping `seq`'s payload.
pub(crate) fn pattern(seq: u32, off: usize, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        *b = pattern_byte(seq, off + k);
    }
}

/// CRC-32 of ping `seq`'s payload of `len` bytes.
pub(crate) fn pattern_crc(seq: u32, len: usize) -> u32 {
    let mut chunk = [0u8; 64];
    let mut crc = 0xFFFF_FFFF;
    let mut off = 0;
    while off < len {
        let n = (len - off).min(chunk.len());
        pattern(seq, off, &mut chunk[..n]);
        crc = crc32_update(crc, &chunk[..n]);
        off += n;
    }
    crc ^ 0xFFFF_FFFF
}
