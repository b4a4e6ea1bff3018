// SPDX-License-Identifier: GPL-2.0-only
//! The wire packet (`iface::wire`): header encoding, validation, packet framing and the
//! CRC-32 link trailer.

mod common;

use proptest::prelude::*;
use trapeze_firmware::iface::layout::{CTRL_MSG_BYTES, MAX_MTU_BYTES};
use trapeze_firmware::iface::wire::{
    crc32, crc32_update, ctrl_wire_bytes, Header, Packet, WireError, HEADER_BYTES, HEADER_WORDS, MAGIC, VERSION,
};

fn mtu_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![1..=MAX_MTU_BYTES, Just(MAX_MTU_BYTES), any::<u32>()]
}

/// A header that validates against `mtu`.
fn header_for(mtu: u32) -> impl Strategy<Value = Header> {
    let max_payload = mtu.min(MAX_MTU_BYTES);
    (
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        0..=CTRL_MSG_BYTES as u16,
        prop_oneof![0..=max_payload, Just(max_payload)],
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(flags, src, dst, ctrl_len, payload_len, token, seq)| Header {
            flags,
            src,
            dst,
            ctrl_len,
            payload_len,
            token,
            seq,
        })
}

fn valid_header() -> impl Strategy<Value = (u32, Header)> {
    mtu_strategy().prop_flat_map(|mtu| (Just(mtu), header_for(mtu)))
}

/// Header words: arbitrary, or a valid header's with a few words replaced or bits flipped
/// (so that the later checks are reached too).
fn header_words() -> impl Strategy<Value = [u32; HEADER_WORDS]> {
    let edit = (0..HEADER_WORDS, any::<bool>(), prop_oneof![any::<u32>(), 0..=300u32, Just(1u32 << 16)]);
    prop_oneof![
        prop::array::uniform8(any::<u32>()),
        (valid_header(), prop::collection::vec(edit, 0..=3)).prop_map(|((_, h), edits)| {
            let mut w = h.to_words();
            for (i, replace, v) in edits {
                w[i] = if replace { v } else { w[i] ^ v };
            }
            w
        }),
    ]
}

/// A whole packet (trailer excluded) for a header small enough to build quickly.
fn packet() -> impl Strategy<Value = (Header, Vec<u8>)> {
    (valid_header(), 0..=2048u32).prop_flat_map(|((_, mut h), cap)| {
        h.payload_len = h.payload_len.min(cap);
        (
            Just(h),
            prop::collection::vec(any::<u8>(), h.ctrl_len as usize),
            prop::collection::vec(any::<u8>(), h.payload_len as usize),
        )
            .prop_map(|(h, ctrl, payload)| (h, build(&h, &ctrl, &payload)))
    })
}

fn build(h: &Header, ctrl: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut b = h.to_bytes().to_vec();
    b.extend_from_slice(ctrl);
    b.resize(h.prefix_bytes() as usize, 0);
    b.extend_from_slice(payload);
    b
}

proptest! {
    #![proptest_config(common::config(512))]

    #[test]
    fn header_round_trips((mtu, h) in valid_header()) {
        let w = h.to_words();
        prop_assert_eq!(Header::from_words(&w, mtu), Ok(h));
        let b = h.to_bytes();
        prop_assert_eq!(Header::parse(&b, mtu), Ok(h));
        // Documented layout: magic, version, flags in word 0; little-endian bytes.
        prop_assert_eq!(w[0] as u16, MAGIC);
        prop_assert_eq!((w[0] >> 16) as u8, VERSION);
        prop_assert_eq!((w[0] >> 24) as u8, h.flags);
        prop_assert_eq!(&b[0..2], &MAGIC.to_le_bytes()[..]);
        prop_assert_eq!(&b[16..24], &h.token.to_le_bytes()[..]);
        for (i, word) in w.iter().enumerate() {
            prop_assert_eq!(&b[4 * i..4 * i + 4], &word.to_le_bytes()[..]);
        }
        // Trailing bytes after the header do not matter to Header::parse.
        let mut longer = b.to_vec();
        longer.extend_from_slice(&[0xEE; 13]);
        prop_assert_eq!(Header::parse(&longer, mtu), Ok(h));
        prop_assert_eq!(h.prefix_bytes(), HEADER_BYTES + ctrl_wire_bytes(h.ctrl_len as u32));
        prop_assert_eq!(h.prefix_bytes() % 4, 0);
        prop_assert_eq!(h.packet_bytes(), h.prefix_bytes() + h.payload_len);
    }

    /// Arbitrary words never panic, and the answer follows the validation order:
    /// magic, version, control length, payload length.
    #[test]
    fn from_words_classifies_any_input(w in header_words(), mtu in mtu_strategy()) {
        let got = Header::from_words(&w, mtu);
        let want = if w[0] as u16 != MAGIC {
            Err(WireError::BadMagic)
        } else if (w[0] >> 16) as u8 != VERSION {
            Err(WireError::BadVersion)
        } else if w[2] > CTRL_MSG_BYTES {
            Err(WireError::CtrlTooLong)
        } else if w[3] > mtu.min(MAX_MTU_BYTES) {
            Err(WireError::PayloadTooLong)
        } else {
            Ok(())
        };
        prop_assert_eq!(got.map(|_| ()), want);
        if let Ok(h) = got {
            prop_assert!(h.ctrl_len as u32 <= CTRL_MSG_BYTES);
            prop_assert!(h.payload_len <= mtu && h.payload_len <= MAX_MTU_BYTES);
            prop_assert_eq!(h.token, w[4] as u64 | (w[5] as u64) << 32);
        }
    }

    /// Mostly-valid headers with one field broken get exactly that field's error.
    #[test]
    fn broken_fields_get_their_error(
        (mtu, h) in valid_header(),
        which in 0..4usize,
        bad in any::<u32>(),
    ) {
        let mut w = h.to_words();
        let want = match which {
            0 => {
                let m = if bad as u16 == MAGIC { MAGIC ^ 1 } else { bad as u16 };
                w[0] = (w[0] & !0xFFFF) | m as u32;
                WireError::BadMagic
            }
            1 => {
                let v = if bad as u8 == VERSION { VERSION ^ 0x80 } else { bad as u8 };
                w[0] = (w[0] & !0x00FF_0000) | (v as u32) << 16;
                WireError::BadVersion
            }
            2 => {
                w[2] = CTRL_MSG_BYTES + 1 + bad % (u32::MAX - CTRL_MSG_BYTES);
                WireError::CtrlTooLong
            }
            _ => {
                let limit = mtu.min(MAX_MTU_BYTES);
                w[3] = limit + 1 + bad % (u32::MAX - limit);
                WireError::PayloadTooLong
            }
        };
        prop_assert_eq!(Header::from_words(&w, mtu), Err(want));
        let mut b = [0u8; HEADER_BYTES as usize];
        for (i, word) in w.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
        prop_assert_eq!(Header::parse(&b, mtu), Err(want));
    }

    #[test]
    fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200), mtu in mtu_strategy()) {
        let h = Header::parse(&bytes, mtu);
        if bytes.len() < HEADER_BYTES as usize {
            prop_assert_eq!(h, Err(WireError::Truncated));
        } else {
            let mut w = [0u32; HEADER_WORDS];
            for (i, word) in w.iter_mut().enumerate() {
                *word = u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
            }
            prop_assert_eq!(h, Header::from_words(&w, mtu));
        }
        let _ = Packet::parse(&bytes, mtu);
    }

    #[test]
    fn truncated_headers_are_refused((mtu, h) in valid_header(), cut in 0..HEADER_BYTES as usize) {
        prop_assert_eq!(Header::parse(&h.to_bytes()[..cut], mtu), Err(WireError::Truncated));
    }

    #[test]
    fn packet_parses_and_rejects_length_mismatch(
        (h, bytes) in packet(),
        delta in prop_oneof![1..=8usize, 1..=300usize],
        extra in any::<u8>(),
    ) {
        let mtu = MAX_MTU_BYTES;
        let p = Packet::parse(&bytes, mtu).unwrap();
        prop_assert_eq!(p.header, h);
        prop_assert_eq!(p.ctrl, &bytes[HEADER_BYTES as usize..HEADER_BYTES as usize + h.ctrl_len as usize]);
        prop_assert_eq!(p.payload, &bytes[h.prefix_bytes() as usize..]);
        prop_assert_eq!(p.payload.len(), h.payload_len as usize);

        // Too long.
        let mut long = bytes.clone();
        long.extend(std::iter::repeat_n(extra, delta));
        prop_assert_eq!(Packet::parse(&long, mtu).err(), Some(WireError::LengthMismatch));
        // Too short, but still holding a header.
        let short_len = bytes.len().saturating_sub(delta).max(HEADER_BYTES as usize);
        if short_len < bytes.len() {
            prop_assert_eq!(Packet::parse(&bytes[..short_len], mtu).err(), Some(WireError::LengthMismatch));
        }
    }

    /// Splitting the input anywhere, into any number of pieces, gives the same CRC.
    #[test]
    fn crc32_is_incremental(
        data in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut crc = 0xFFFF_FFFF;
        let mut at = 0;
        for c in cuts.into_iter().chain([data.len()]) {
            crc = crc32_update(crc, &data[at..c]);
            at = c;
        }
        prop_assert_eq!(crc ^ 0xFFFF_FFFF, crc32(&data));
        prop_assert_eq!(crc32(&data), crc32_reference(&data));
    }

    /// CRC-32 detects every single-bit error.
    #[test]
    fn one_flipped_bit_changes_the_crc((_, bytes) in packet(), bit in any::<prop::sample::Index>()) {
        let bit = bit.index(bytes.len() * 8);
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        prop_assert_ne!(crc32(&flipped), crc32(&bytes));
    }
}

/// An independent CRC-32/IEEE: table-driven, from the reflected polynomial.
fn crc32_reference(data: &[u8]) -> u32 {
    let table: Vec<u32> =
        (0..256u32).map(|n| (0..8).fold(n, |c, _| if c & 1 == 1 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 })).collect();
    !data.iter().fold(!0u32, |c, &b| table[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8))
}

#[test]
fn crc32_check_values() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
    assert_eq!(crc32_update(0xFFFF_FFFF, b"") ^ 0xFFFF_FFFF, 0);
}
