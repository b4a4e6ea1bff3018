// SPDX-License-Identifier: GPL-2.0-only
//! The link frame: bytes to fields and back, no state, no unsafe.
//!
//! A frame is a 24-byte header followed by the fragment bytes; the fragment's length is
//! whatever follows the header (the backend delimits frames). [`FrameHeader::parse`]
//! checks lengths and the fragment's place in the packet and never panics, whatever the
//! input; the reassembler checks the rest (packet size limit, fragment geometry).
//!
//! Fragment geometry, as [`super::Link`] emits it and the reassembler enforces it: every
//! fragment but the last carries the same number of bytes `chunk`; fragment `i` starts at
//! `i * chunk`; the last one ends at `total_len`. So each frame alone tells the packet's
//! whole layout, and a complete set of indices covers every byte exactly once.

use core::fmt;

/// `0x7A4C`: the first two bytes of every link frame (little-endian).
pub const MAGIC: u16 = 0x7A4C;
pub const VERSION: u8 = 1;
/// Bytes of the frame header.
pub const HEADER_BYTES: usize = 24;
/// Flag of a one-frame packet sent with no faults configured over a memory medium
/// ([`LinkBackend::is_memory_medium`](super::LinkBackend::is_memory_medium)) or one that
/// checks its frames ([`LinkBackend::checksums_frames`](super::LinkBackend::checksums_frames),
/// UDP): its trailer is a verdict ([`VERDICT_GOOD`], or anything else for an aborted
/// packet) instead of a CRC. A receiver whose own backend is neither (raw Ethernet)
/// treats such a packet as failing its CRC.
pub const FLAG_VERDICT: u8 = 0x01;
/// Flag of every frame of a packet that carries a MAC tag (`super::mac`) between its
/// bytes and its trailer: sent by a link with a key. A link with a key drops packets
/// without it; a link without one drops packets with it (it cannot check the tag).
pub const FLAG_MAC: u8 = 0x02;
/// The trailer of a good packet sent with [`FLAG_VERDICT`].
pub const VERDICT_GOOD: [u8; 4] = *b"GOOD";

/// Byte ranges of the header fields.
mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const FLAGS: usize = 3;
    pub const SRC: Range<usize> = 4..6;
    pub const DST: Range<usize> = 6..8;
    pub const PACKET_ID: Range<usize> = 8..12;
    pub const FRAG_INDEX: Range<usize> = 12..14;
    pub const FRAG_COUNT: Range<usize> = 14..16;
    pub const TOTAL_LEN: Range<usize> = 16..20;
    pub const FRAG_OFFSET: Range<usize> = 20..24;
}

/// Why a frame was rejected. Such frames are counted (`bad_frames`) and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the header.
    Truncated,
    BadMagic,
    BadVersion,
    /// `frag_count` is 0 or `frag_index >= frag_count`.
    BadFragIndex,
    /// `frag_offset + fragment length > total_len`.
    BadLength,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameError::Truncated => "frame shorter than its header",
            FrameError::BadMagic => "bad frame magic",
            FrameError::BadVersion => "unsupported frame version",
            FrameError::BadFragIndex => "fragment index out of range",
            FrameError::BadLength => "fragment extends past the packet",
        })
    }
}

impl std::error::Error for FrameError {}

/// The link frame header, parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    /// [`FLAG_VERDICT`], [`FLAG_MAC`] or neither; other bits are reserved and carried as is.
    pub flags: u8,
    pub src: u16,
    pub dst: u16,
    /// Per-sender packet number; all fragments of a packet share it.
    pub packet_id: u32,
    pub frag_index: u16,
    pub frag_count: u16,
    /// Bytes of the whole packet including the 4-byte trailer.
    pub total_len: u32,
    /// Where this fragment's bytes start in the packet.
    pub frag_offset: u32,
}

/// A frame that is one whole [`FLAG_VERDICT`] packet, read straight off its bytes (the
/// fast path of reassembly over a memory medium): `(src, dst, flags, body)` when the magic
/// and version match, the verdict flag is set and it is fragment 0 of 1 at offset 0 with
/// the packet exactly this fragment. `None` for anything else, which then takes
/// [`FrameHeader::parse`] (it accepts every frame this does, with the same fields).
#[inline]
pub fn whole_verdict(frame: &[u8]) -> Option<(u16, u16, u8, &[u8])> {
    let (b, frag) = frame.split_at_checked(HEADER_BYTES)?;
    let whole = u16_at(b, field::MAGIC) == MAGIC
        && b[field::VERSION] == VERSION
        && b[field::FLAGS] & FLAG_VERDICT != 0
        && u16_at(b, field::FRAG_INDEX) == 0
        && u16_at(b, field::FRAG_COUNT) == 1
        && u32_at(b, field::FRAG_OFFSET) == 0
        && u32_at(b, field::TOTAL_LEN) as usize == frag.len();
    whole.then(|| (u16_at(b, field::SRC), u16_at(b, field::DST), b[field::FLAGS], frag))
}

fn u16_at(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_le_bytes(a)
}

fn u32_at(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}

impl FrameHeader {
    /// Write the header into the first [`HEADER_BYTES`] of `buf`.
    ///
    /// Panics if `buf` is shorter than [`HEADER_BYTES`] (a caller bug: the link sizes
    /// its frame buffer from the backend's frame limit, which is larger).
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_BYTES];
        b[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = self.flags;
        b[field::SRC].copy_from_slice(&self.src.to_le_bytes());
        b[field::DST].copy_from_slice(&self.dst.to_le_bytes());
        b[field::PACKET_ID].copy_from_slice(&self.packet_id.to_le_bytes());
        b[field::FRAG_INDEX].copy_from_slice(&self.frag_index.to_le_bytes());
        b[field::FRAG_COUNT].copy_from_slice(&self.frag_count.to_le_bytes());
        b[field::TOTAL_LEN].copy_from_slice(&self.total_len.to_le_bytes());
        b[field::FRAG_OFFSET].copy_from_slice(&self.frag_offset.to_le_bytes());
    }

    /// Parse a whole frame: the header and the fragment bytes after it.
    ///
    /// Never panics. Checks magic, version, `frag_index < frag_count` and that the
    /// fragment lies inside the packet.
    pub fn parse(frame: &[u8]) -> Result<(FrameHeader, &[u8]), FrameError> {
        if frame.len() < HEADER_BYTES {
            return Err(FrameError::Truncated);
        }
        let (b, frag) = frame.split_at(HEADER_BYTES);
        if u16_at(b, field::MAGIC) != MAGIC {
            return Err(FrameError::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(FrameError::BadVersion);
        }
        let h = FrameHeader {
            flags: b[field::FLAGS],
            src: u16_at(b, field::SRC),
            dst: u16_at(b, field::DST),
            packet_id: u32_at(b, field::PACKET_ID),
            frag_index: u16_at(b, field::FRAG_INDEX),
            frag_count: u16_at(b, field::FRAG_COUNT),
            total_len: u32_at(b, field::TOTAL_LEN),
            frag_offset: u32_at(b, field::FRAG_OFFSET),
        };
        if h.frag_index >= h.frag_count {
            return Err(FrameError::BadFragIndex);
        }
        if h.frag_offset as u64 + frag.len() as u64 > h.total_len as u64 {
            return Err(FrameError::BadLength);
        }
        Ok((h, frag))
    }

    /// Whether this is the packet's last fragment.
    pub fn is_last(&self) -> bool {
        self.frag_index as u32 + 1 == self.frag_count as u32
    }
}

/// The true length of a frame that a medium may have padded (Ethernet pads its payload
/// to 46 bytes): for a last fragment, header + `total_len - frag_offset` if `frame` holds
/// at least that much; otherwise `frame.len()`. Never panics.
pub fn unpadded_len(frame: &[u8]) -> usize {
    if frame.len() < HEADER_BYTES {
        return frame.len();
    }
    let b = &frame[..HEADER_BYTES];
    let index = u16_at(b, field::FRAG_INDEX);
    let count = u16_at(b, field::FRAG_COUNT);
    let total = u32_at(b, field::TOTAL_LEN) as u64;
    let offset = u32_at(b, field::FRAG_OFFSET) as u64;
    if index as u32 + 1 != count as u32 || offset > total {
        return frame.len();
    }
    let want = HEADER_BYTES as u64 + (total - offset);
    if want <= frame.len() as u64 {
        want as usize
    } else {
        frame.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 28] = [
        0x4C, 0x7A, 1, 0, // magic, version, flags
        3, 0, 5, 0, // src 3, dst 5
        0x78, 0x56, 0x34, 0x12, // packet id
        1, 0, 2, 0, // index 1 of 2
        10, 0, 0, 0, // total 10
        6, 0, 0, 0, // offset 6
        0xAA, 0xBB, 0xCC, 0xDD,
    ];

    #[test]
    fn whole_verdict_agrees_with_parse_and_takes_only_whole_verdict_frames() {
        let whole = FrameHeader {
            flags: FLAG_VERDICT,
            src: 3,
            dst: 5,
            packet_id: 9,
            frag_index: 0,
            frag_count: 1,
            total_len: 6,
            frag_offset: 0,
        };
        let frame = |h: FrameHeader| {
            let mut f = vec![0u8; HEADER_BYTES + 6];
            h.emit(&mut f);
            f[HEADER_BYTES..].copy_from_slice(b"abcdef");
            f
        };
        let f = frame(whole);
        let (h, body) = FrameHeader::parse(&f).unwrap();
        assert_eq!(whole_verdict(&f), Some((h.src, h.dst, h.flags, body)));
        // Anything else goes to the full parse: no verdict flag, a fragment of a longer
        // packet, a later fragment, a bad magic or version.
        assert_eq!(whole_verdict(&frame(FrameHeader { flags: 0, ..whole })), None);
        assert_eq!(whole_verdict(&frame(FrameHeader { frag_count: 2, total_len: 12, ..whole })), None);
        assert_eq!(
            whole_verdict(&frame(FrameHeader { frag_offset: 6, total_len: 12, frag_index: 1, frag_count: 2, ..whole })),
            None
        );
        let mut bad = f.clone();
        bad[0] ^= 1;
        assert_eq!(whole_verdict(&bad), None);
        bad = f.clone();
        bad[2] ^= 1;
        assert_eq!(whole_verdict(&bad), None);
        assert_eq!(whole_verdict(&f[..HEADER_BYTES - 1]), None);
    }

    #[test]
    fn parse_static_frame() {
        let (h, frag) = FrameHeader::parse(&FRAME).unwrap();
        assert_eq!(
            h,
            FrameHeader {
                flags: 0,
                src: 3,
                dst: 5,
                packet_id: 0x1234_5678,
                frag_index: 1,
                frag_count: 2,
                total_len: 10,
                frag_offset: 6,
            }
        );
        assert_eq!(frag, &[0xAA, 0xBB, 0xCC, 0xDD]);
        assert!(h.is_last());
        let mut out = [0u8; 28];
        h.emit(&mut out);
        out[24..].copy_from_slice(frag);
        assert_eq!(out, FRAME);
    }

    #[test]
    fn rejects() {
        assert_eq!(FrameHeader::parse(&FRAME[..23]), Err(FrameError::Truncated));
        let mut f = FRAME;
        f[0] ^= 1;
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadMagic));
        let mut f = FRAME;
        f[2] = 2;
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadVersion));
        let mut f = FRAME;
        f[12] = 2; // index 2 of 2
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadFragIndex));
        let mut f = FRAME;
        f[14] = 0; // count 0
        f[12] = 0;
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadFragIndex));
        let mut f = FRAME;
        f[20] = 7; // offset 7 + 4 > 10
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadLength));
        let mut f = FRAME;
        f[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(FrameHeader::parse(&f), Err(FrameError::BadLength));
    }

    #[test]
    fn unpadded() {
        let mut padded = FRAME.to_vec();
        padded.resize(46, 0);
        assert_eq!(unpadded_len(&padded), 28);
        assert_eq!(unpadded_len(&FRAME[..26]), 26);
        assert_eq!(unpadded_len(&FRAME[..3]), 3);
    }
}
