// SPDX-License-Identifier: GPL-2.0-only
//! Target `gms_bodies`: the GMS message bodies (`gms::ops`, the heartbeat).
//!
//! The first byte picks the body type, the rest is the body. Oracles: decoding never
//! panics; an accepted body re-encodes to exactly the input bytes (the layouts are
//! fixed and every field is kept), into a buffer of the advertised size and no
//! smaller.

use gms::heartbeat::Heartbeat;
use gms::net::wire::{Message, MAX_BODY};
use gms::ops::{
    DirAck, DirRemoveReq, DirUpdateReq, DiscardReq, DropReq, GetPagesReply, GetPagesReq, GetReply, GetReq, PutDone,
    PutReq,
};

fn check<M: Message + PartialEq + core::fmt::Debug>(body: &[u8], wire_bytes: usize) {
    let Ok(m) = M::decode(body) else { return };
    assert_eq!(body.len(), wire_bytes, "a body of the wrong length was accepted");
    let mut out = [0u8; MAX_BODY];
    let n = m.encode(&mut out).expect("an accepted body re-encodes");
    assert_eq!(&out[..n], body, "body changed in the round trip: {m:?}");
    assert_eq!(M::decode(&out[..n]).expect("re-encoded body decodes"), m);
    assert!(m.encode(&mut out[..n - 1]).is_err(), "encoded into a buffer too small");
}

pub fn fuzz(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 12 {
        0 => check::<GetReq>(body, GetReq::WIRE_BYTES),
        1 => check::<GetReply>(body, GetReply::WIRE_BYTES),
        2 => check::<PutReq>(body, PutReq::WIRE_BYTES),
        3 => check::<PutDone>(body, PutDone::WIRE_BYTES),
        4 => check::<DiscardReq>(body, DiscardReq::WIRE_BYTES),
        5 => check::<DirUpdateReq>(body, DirUpdateReq::WIRE_BYTES),
        6 => check::<DirRemoveReq>(body, DirRemoveReq::WIRE_BYTES),
        7 => check::<DropReq>(body, DropReq::WIRE_BYTES),
        8 => check::<DirAck>(body, DirAck::WIRE_BYTES),
        9 => check::<GetPagesReq>(body, GetPagesReq::WIRE_BYTES),
        10 => check::<GetPagesReply>(body, GetPagesReply::WIRE_BYTES),
        _ => {
            check::<Heartbeat>(body, Heartbeat::WIRE_BYTES);
            let src = u16::from_le_bytes([which, body.first().copied().unwrap_or(0)]);
            if let Ok(hb) = Heartbeat::from_message(src, body) {
                assert_eq!(hb.node, src);
            }
        }
    }
}
