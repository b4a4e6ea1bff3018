// SPDX-License-Identifier: GPL-2.0-only
//! Link frames and reassembly under arbitrary input: parse/emit round trips, no panics on
//! any bytes, and packets split into frames delivered in any order, with duplicates,
//! come out once and intact.

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use trapeze_vnic::link::frame::{unpadded_len, FrameError, FrameHeader, HEADER_BYTES};
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend};

fn header() -> impl Strategy<Value = FrameHeader> {
    (any::<u8>(), any::<u16>(), any::<u16>(), any::<u32>(), 1..=u16::MAX, any::<u32>()).prop_flat_map(
        |(flags, src, dst, packet_id, frag_count, total_len)| {
            (0..frag_count, 0..=total_len).prop_map(move |(frag_index, frag_offset)| FrameHeader {
                flags,
                src,
                dst,
                packet_id,
                frag_index,
                frag_count,
                total_len,
                frag_offset,
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn emit_parse_round_trip(h in header(), frag in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut f = vec![0u8; HEADER_BYTES];
        h.emit(&mut f);
        f.extend_from_slice(&frag);
        let fits = h.frag_offset as u64 + frag.len() as u64 <= h.total_len as u64;
        match FrameHeader::parse(&f) {
            Ok((p, body)) => {
                prop_assert!(fits);
                prop_assert_eq!(p, h);
                prop_assert_eq!(body, &frag[..]);
            }
            Err(e) => {
                prop_assert!(!fits);
                prop_assert_eq!(e, FrameError::BadLength);
            }
        }
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok((h, body)) = FrameHeader::parse(&bytes) {
            prop_assert!(h.frag_index < h.frag_count);
            prop_assert!(h.frag_offset as u64 + body.len() as u64 <= h.total_len as u64);
        }
        prop_assert!(unpadded_len(&bytes) <= bytes.len());
    }

    /// Valid headers, some misaddressed, some with a bit flipped: the link's receive path
    /// never panics and accounts for every frame.
    #[test]
    fn link_survives_garbage(
        frames in proptest::collection::vec((header(), proptest::collection::vec(any::<u8>(), 0..96), any::<u64>()), 1..24),
    ) {
        let tape = Tape::default();
        let mut link = Link::new(9, Box::new(tape.clone()), FaultConfig::NONE);
        for (mut h, body, flip) in frames {
            h.dst = if flip & 1 == 0 { 9 } else { h.dst };
            h.total_len %= 4096;
            let mut f = vec![0u8; HEADER_BYTES];
            h.emit(&mut f);
            f.extend_from_slice(&body);
            let bit = (flip >> 8) as usize % (f.len() * 8);
            if flip & 2 != 0 {
                f[bit / 8] ^= 1 << (bit % 8);
            }
            tape.inbox.lock().unwrap().push_back(f);
        }
        let mut out = vec![0u8; 8192];
        let mut delivered = 0;
        while let Some(rx) = link.poll_packet(&mut out) {
            prop_assert!(rx.len < 4096);
            delivered += 1;
        }
        let s = link.stats();
        prop_assert_eq!(s.packets_received, delivered);
        prop_assert!(s.bad_frames + s.duplicate_frames <= s.frames_received);
    }

    /// Any packet, any frame size, frames delivered in any order with some duplicated:
    /// exactly one intact copy comes out.
    #[test]
    fn fragments_reassemble_in_any_order(
        len in 32usize..20_000,
        max_frame in 40usize..3000,
        order_seed in any::<u64>(),
        dup_mask in any::<u64>(),
        abort in any::<bool>(),
    ) {
        let tx = Tape::with_max_frame(max_frame);
        let rx = Tape::default();
        let mut a = Link::new(1, Box::new(tx.clone()), FaultConfig::NONE);
        let mut b = Link::new(2, Box::new(rx.clone()), FaultConfig::NONE);
        let mut packet: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
        packet[6..8].copy_from_slice(&2u16.to_le_bytes());
        a.send_packet(&packet, abort).unwrap();
        let mut frames: Vec<Vec<u8>> = tx.sent.lock().unwrap().drain(..).collect();
        prop_assert_eq!(frames.len(), (len + 4).div_ceil(max_frame - HEADER_BYTES));
        prop_assert!(frames.iter().all(|f| f.len() <= max_frame));
        // Fisher-Yates with a simple LCG, then duplicate some.
        let mut s = order_seed | 1;
        for i in (1..frames.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            frames.swap(i, (s >> 33) as usize % (i + 1));
        }
        let dups: Vec<Vec<u8>> = frames.iter().enumerate().filter(|(i, _)| dup_mask >> (i % 64) & 1 == 1).map(|(_, f)| f.clone()).collect();
        let ndup = dups.len();
        rx.inbox.lock().unwrap().extend(frames.into_iter().chain(dups));
        let mut out = vec![0u8; 20_000];
        // One poll takes at most 1024 frames; tiny frames may need a few polls.
        let got = (0..8).find_map(|_| b.poll_packet(&mut out)).unwrap();
        prop_assert_eq!(got.len, len);
        prop_assert_eq!(got.src, 1);
        prop_assert_eq!(got.crc_ok, !abort);
        prop_assert_eq!(&out[..len], &packet[..]);
        prop_assert!(b.poll_packet(&mut out).is_none());
        prop_assert_eq!(b.stats().duplicate_frames, ndup as u64);
        prop_assert_eq!(b.stats().bad_frames, 0);
    }
}

/// A backend that records sent frames and hands out frames put in its inbox.
#[derive(Clone)]
struct Tape {
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    inbox: Arc<Mutex<VecDeque<Vec<u8>>>>,
    max_frame: usize,
}

impl Default for Tape {
    fn default() -> Self {
        Tape::with_max_frame(65536)
    }
}

impl Tape {
    fn with_max_frame(max_frame: usize) -> Self {
        Tape { sent: Default::default(), inbox: Default::default(), max_frame }
    }
}

impl LinkBackend for Tape {
    fn send_frame(&mut self, _dst: u16, frame: &[u8]) -> io::Result<()> {
        self.sent.lock().unwrap().push(frame.to_vec());
        Ok(())
    }
    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.inbox.lock().unwrap().pop_front().map(|f| {
            let n = f.len().min(buf.len());
            buf[..n].copy_from_slice(&f[..n]);
            n
        }))
    }
    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn max_frame_bytes(&self) -> usize {
        self.max_frame
    }
    fn routes_to(&self, _dst: u16) -> bool {
        true
    }
    fn describe(&self) -> String {
        "tape".into()
    }
}
