// SPDX-License-Identifier: GPL-2.0-only
//! Target `wire`: the Trapeze header and packet (`trapeze_iface::wire`).
//!
//! Oracles: parsing never panics; an accepted header re-encodes to the same words (every
//! field but the reserved ones) and parses back equal; an accepted packet's slices lie
//! where its header says and cover the input exactly.

use trapeze_iface::layout::MAX_MTU_BYTES;
use trapeze_iface::wire::{ctrl_wire_bytes, Header, Packet, HEADER_BYTES, HEADER_WORDS};

pub fn fuzz(data: &[u8]) {
    // The first four bytes choose the MTU the receiver checks against (any u32: the
    // parser must clamp it itself).
    let Some((mtu, bytes)) = data.split_first_chunk::<4>() else { return };
    let mtu = u32::from_le_bytes(*mtu);
    if let Ok(h) = Header::parse(bytes, mtu) {
        assert!(h.payload_len <= mtu.min(MAX_MTU_BYTES));
        let again = Header::parse(&h.to_bytes(), mtu).expect("a re-encoded header parses");
        assert_eq!(again, h);
        // The encoding keeps every non-reserved byte of the input (word 2's upper half
        // and word 7 are reserved).
        let enc = h.to_bytes();
        for (i, (a, b)) in enc.iter().zip(bytes).enumerate() {
            if !(10..12).contains(&i) && i < 28 {
                assert_eq!(a, b, "header byte {i} changed in the round trip");
            }
        }
        let mut words = [0u32; HEADER_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = u32::from_le_bytes(enc[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        }
        assert_eq!(Header::from_words(&words, mtu), Ok(h));
        assert_eq!(words, h.to_words());
    }
    if let Ok(p) = Packet::parse(bytes, mtu) {
        let h = p.header;
        assert_eq!(p.ctrl.len(), h.ctrl_len as usize);
        assert_eq!(p.payload.len(), h.payload_len as usize);
        assert_eq!(bytes.len(), (HEADER_BYTES + ctrl_wire_bytes(h.ctrl_len as u32)) as usize + p.payload.len());
        assert_eq!(p.ctrl, &bytes[HEADER_BYTES as usize..][..h.ctrl_len as usize]);
    }
}
