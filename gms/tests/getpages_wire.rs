// SPDX-License-Identifier: GPL-2.0-only
//! `GETPAGES` on the wire: its bodies round-trip at their exact lengths, the decoders
//! refuse what a member must never act on (an empty or oversized mask, a bad status), and
//! the packed versions give every page's back.

use gms::net::wire::{Message, MAX_BODY};
use gms::ops::*;
use gms::page::{PageId, Version};

fn round_trip<M: Message + PartialEq + core::fmt::Debug>(m: M, len: usize) {
    let mut buf = [0u8; MAX_BODY];
    let n = m.encode(&mut buf).unwrap();
    assert_eq!(n, len);
    assert_eq!(M::decode(&buf[..n]).unwrap(), m);
}

/// `v` as versions (at most `GETPAGES_MAX`), on the stack: the crate has no heap.
fn versions(v: &[u64]) -> ([Version; GETPAGES_MAX], usize) {
    let mut a = [Version(0); GETPAGES_MAX];
    for (a, &x) in a.iter_mut().zip(v) {
        *a = Version(x);
    }
    (a, v.len())
}

fn vs(v: &[u64]) -> Versions {
    let (a, n) = versions(v);
    Versions::pack(&a[..n]).unwrap()
}

#[test]
fn getpages_bodies_round_trip_and_reject_bad_lengths() {
    let first = PageId::new(3, 0x1234_5678_9abc);
    let want = vs(&[7, 9, 7 + u64::from(u32::MAX), 8]);
    let mask = 1 | 1 << 3 | 1 << 9 | 1 << 63;
    round_trip(GetPagesReq { first, mask, want, view: 11 }, GetPagesReq::WIRE_BYTES);
    assert_eq!(GetPagesReq::WIRE_BYTES, 72);
    for status in [GetStatus::Hit, GetStatus::Miss] {
        let rep = GetPagesReply { status, first, mask, versions: want, server: 0xbeef };
        round_trip(rep, GetPagesReply::WIRE_BYTES);
    }
    assert_eq!(GetPagesReply::WIRE_BYTES, 67);
    // Eight pages, the most one asks for; a miss carries no versions.
    let eight = GetPagesReq { first, mask: 0xff00_0000_0000_0000, want: vs(&[1; 8]), view: 0 };
    round_trip(eight, GetPagesReq::WIRE_BYTES);
    let miss = GetPagesReply { status: GetStatus::Miss, first, mask: 1, versions: Versions::default(), server: 1 };
    round_trip(miss, GetPagesReply::WIRE_BYTES);
    // Every other length is refused, not only one byte off.
    let mut buf = [0u8; MAX_BODY];
    let n = eight.encode(&mut buf).unwrap();
    assert!((0..=MAX_BODY).filter(|&l| l != n).all(|l| GetPagesReq::decode(&buf[..l]).is_err()));
    let n = miss.encode(&mut buf).unwrap();
    assert!((0..=MAX_BODY).filter(|&l| l != n).all(|l| GetPagesReply::decode(&buf[..l]).is_err()));
}

/// The mask's offset in both bodies (after the first page).
const MASK_AT: usize = 16;

#[test]
fn getpages_decoders_reject_an_empty_or_oversized_mask() {
    let first = PageId::new(1, 2);
    let req = GetPagesReq { first, mask: 1, want: vs(&[1]), view: 0 };
    let rep = GetPagesReply { status: GetStatus::Hit, first, mask: 1, versions: vs(&[1]), server: 2 };
    let mut rq = [0u8; GetPagesReq::WIRE_BYTES];
    let mut rp = [0u8; GetPagesReply::WIRE_BYTES];
    req.encode(&mut rq).unwrap();
    rep.encode(&mut rp).unwrap();
    let ok: [u64; 4] = [1, 1 << 63, 0xff, 0x8000_0000_0000_007f];
    let bad: [u64; 4] = [0, 0x1ff, u64::MAX, 0x0101_0101_0101_0101 | 2];
    for (mask, good) in ok.iter().map(|m| (*m, true)).chain(bad.iter().map(|m| (*m, false))) {
        rq[MASK_AT..MASK_AT + 8].copy_from_slice(&mask.to_le_bytes());
        rp[1 + MASK_AT..1 + MASK_AT + 8].copy_from_slice(&mask.to_le_bytes());
        assert_eq!(GetPagesReq::decode(&rq).map(|r| r.mask).ok(), good.then_some(mask), "request mask {mask:#x}");
        assert_eq!(GetPagesReply::decode(&rp).map(|r| r.mask).ok(), good.then_some(mask), "reply mask {mask:#x}");
    }
    // Encoding does not check the mask: the decoder is the gate.
    let mut buf = [0u8; MAX_BODY];
    let n = GetPagesReq { mask: 0, ..req }.encode(&mut buf).unwrap();
    assert!(GetPagesReq::decode(&buf[..n]).is_err());
}

#[test]
fn getpages_reply_rejects_bad_status_codes() {
    let rep =
        GetPagesReply { status: GetStatus::Miss, first: PageId::new(0, 0), mask: 1, versions: vs(&[0]), server: 0 };
    let mut buf = [0u8; GetPagesReply::WIRE_BYTES];
    rep.encode(&mut buf).unwrap();
    for bad in [0u8, 6, 0x80, 255] {
        buf[0] = bad;
        assert!(GetPagesReply::decode(&buf).is_err(), "status {bad}");
    }
    let codes = [
        (1u8, GetStatus::Hit),
        (2, GetStatus::Miss),
        (3, GetStatus::Local),
        (4, GetStatus::Refused),
        (5, GetStatus::Rebuilding),
    ];
    for (code, status) in codes {
        buf[0] = code;
        assert_eq!(GetPagesReply::decode(&buf).unwrap().status, status);
    }
}

#[test]
fn versions_pack_bounds() {
    assert_eq!(Versions::pack(&[]), None, "no page");
    assert_eq!(Versions::pack(&[Version(1); GETPAGES_MAX + 1]), None, "more than GETPAGES_MAX");
    // More than GETPAGES_MAX, with the extra one far off: still refused.
    let mut nine = [Version(5); GETPAGES_MAX + 1];
    nine[GETPAGES_MAX] = Version(0);
    assert_eq!(Versions::pack(&nine), None);
    assert!(Versions::pack(&[Version(1); GETPAGES_MAX]).is_some());
    let span = u64::from(u32::MAX);
    assert!(Versions::pack(&[Version(10), Version(10 + span)]).is_some(), "exactly u32::MAX apart");
    assert_eq!(Versions::pack(&[Version(10), Version(11 + span)]), None, "one more");
    assert_eq!(Versions::pack(&[Version(11 + span), Version(3), Version(10)]), None, "the oldest anywhere");
    assert_eq!(Versions::pack(&[Version(0), Version(u64::MAX)]), None);
    let top = [Version(u64::MAX), Version(u64::MAX - 1)];
    let p = Versions::pack(&top).unwrap();
    assert_eq!((p.get(0), p.get(1)), (top[0], top[1]));
}

#[test]
fn versions_pack_then_get_gives_each_back_in_order() {
    let cases: [&[u64]; 5] = [
        &[42],
        &[3, 1, 2],
        &[9, 9, 9, 9, 9, 9, 9, 9],
        &[100, 7, 7 + u32::MAX as u64, 50, 8, 1000, 7, 64],
        &[u64::MAX - 5, u64::MAX, u64::MAX - 1],
    ];
    for c in cases {
        let (a, n) = versions(c);
        let v = &a[..n];
        let p = Versions::pack(v).unwrap();
        assert_eq!(p.base, *v.iter().min().unwrap(), "{c:?}: the base is the oldest");
        for (k, x) in v.iter().enumerate() {
            assert_eq!(p.get(k), *x, "{c:?}: version {k}");
        }
        // Past the pages given: the base (never a panic, even past GETPAGES_MAX).
        for k in c.len()..GETPAGES_MAX + 3 {
            assert_eq!(p.get(k), p.base);
        }
        // On the wire and back.
        let req = GetPagesReq { first: PageId::new(0, 0), mask: (1 << c.len()) - 1, want: p, view: 0 };
        let mut buf = [0u8; GetPagesReq::WIRE_BYTES];
        req.encode(&mut buf).unwrap();
        let back = GetPagesReq::decode(&buf).unwrap().want;
        assert!((0..c.len()).all(|k| back.get(k) == v[k]), "{c:?}");
    }
}
