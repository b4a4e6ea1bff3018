// SPDX-License-Identifier: GPL-2.0-only
//! End to end through the timing model (`trapeze_firmware::sim`): NICs running the real
//! firmware against modelled DMA engines that move real bytes, with minimal hosts on
//! either side. Every test asserts exact outcomes: the bytes that reached host memory,
//! the flags and lengths in the receive ring, send completion statuses and the
//! firmware's counters.

use std::collections::BTreeMap;
use trapeze_firmware::iface::entry::{rx_flags, Ring, Segment, Slot, TxStatus};
use trapeze_firmware::iface::ipt::{self, CancelState, IptEntry, PayloadToken};
use trapeze_firmware::iface::layout::{notify, Counter, IPT_ENTRIES, IPT_ENTRY_BYTES, IPT_OFF, RECV_RING_ENTRIES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_firmware::iface::regs::tx_flags;
use trapeze_firmware::sim::{
    Cluster, Delivered, Faults, NodeConfig, OutMsg, Params, Rng, TransferKind, HOST_DMA_BASE, US,
};

/// Model-time budget for any one phase of a test (100 ms).
const LIMIT_PS: u64 = 100_000 * US;
/// Host memory of the default cluster.
const HOST_MEM: usize = 2 << 20;

fn cluster(n: usize, cfg: NodeConfig) -> Cluster {
    Cluster::new(Params::alpha500(), n, cfg, Faults::default())
}

/// `len` bytes of seeded random data.
fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A control message that names message `id` (4 bytes) followed by `extra` random bytes.
fn tagged_ctrl(id: u32, extra: usize) -> Vec<u8> {
    let mut c = id.to_le_bytes().to_vec();
    c.extend(data(0xC7 ^ u64::from(id) << 8, extra));
    c
}

fn id_of(d: &Delivered) -> u32 {
    u32::from_le_bytes(d.ctrl[..4].try_into().expect("tagged control message"))
}

fn send(c: &mut Cluster, from: usize, msg: OutMsg) -> u64 {
    let now = c.now_ps();
    c.host_mut(from).post(now, msg)
}

/// Run until every host, NIC and the switch are idle, then a little longer (so nothing
/// that was about to happen is missed).
fn settle(c: &mut Cluster) {
    assert!(c.run_until(LIMIT_PS, |c| c.is_quiet()), "cluster did not go quiet in 100 ms");
    let t = c.now_ps();
    c.run_until(200 * US, |c| c.now_ps() > t + 100 * US);
    assert!(c.is_quiet());
}

fn counter(c: &Cluster, node: usize, k: Counter) -> u64 {
    c.firmware(node).counter(k)
}

/// All of `node`'s host memory.
fn snapshot(c: &Cluster, node: usize) -> Vec<u8> {
    c.host(node).read(HOST_DMA_BASE, HOST_MEM).expect("host memory").to_vec()
}

/// The frame the host attached to receive slot `i` (one MTU-sized segment).
fn slot_frame(c: &Cluster, node: usize, i: u32) -> Segment {
    let slot = Slot::new(c.nic_mem(node), Ring::Recv, i);
    assert_eq!(slot.nseg(), 1);
    slot.segment(0)
}

/// Assert `after` differs from `before` only inside `[addr, addr + new.len())`, where
/// it holds `new`.
fn assert_only_changed(before: &[u8], after: &[u8], addr: u64, new: &[u8]) {
    let lo = (addr - HOST_DMA_BASE) as usize;
    let hi = lo + new.len();
    assert_eq!(&after[lo..hi], new, "frame contents");
    if let Some(i) = (0..before.len()).find(|&i| (i < lo || i >= hi) && before[i] != after[i]) {
        panic!("host memory changed outside the frame at {:#x}", HOST_DMA_BASE + i as u64);
    }
}

#[test]
fn control_only_message_delivered_exactly() {
    let mut c = cluster(3, NodeConfig::default());
    let msgs: Vec<(usize, Vec<u8>)> =
        vec![(0, data(1, 37)), (2, data(2, 128)), (0, Vec::new()), (2, data(3, 1)), (0, data(4, 128))];
    for (from, ctrl) in &msgs {
        send(&mut c, *from, OutMsg { peer: 1, ctrl: ctrl.clone(), ..Default::default() });
    }
    settle(&mut c);

    let got = &c.host(1).delivered;
    assert_eq!(got.len(), msgs.len());
    // Per sender, in order; the interleaving of the two senders is the switch's business.
    for from in [0usize, 2] {
        let sent: Vec<&Vec<u8>> = msgs.iter().filter(|m| m.0 == from).map(|m| &m.1).collect();
        let recv: Vec<&Delivered> = got.iter().filter(|d| d.src == from as u16).collect();
        assert_eq!(recv.len(), sent.len());
        for (d, ctrl) in recv.iter().zip(sent) {
            assert_eq!(&d.ctrl, ctrl);
            assert_eq!(d.flags, 0);
            assert!(d.payload.is_empty());
            assert_eq!(d.token, PayloadToken::NONE);
        }
    }
    assert!(c.host(0).delivered.is_empty() && c.host(2).delivered.is_empty());
    for from in [0, 2] {
        let n = msgs.iter().filter(|m| m.0 == from).count();
        assert_eq!(c.host(from).sent.len(), n);
        assert!(c.host(from).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
        assert_eq!(counter(&c, from, Counter::TxPackets), n as u64);
        assert_eq!(counter(&c, from, Counter::TxBytes), 0);
        // Nothing to read from host memory for a control-only message.
        assert_eq!(counter(&c, from, Counter::HostDmaTransfers), 0);
    }
    assert_eq!(counter(&c, 1, Counter::RxPackets), msgs.len() as u64);
    assert_eq!(counter(&c, 1, Counter::RxBytes), 0);
    assert_eq!(counter(&c, 1, Counter::HostDmaTransfers), 0);
    assert_eq!(c.link_stats().packets, msgs.len() as u64);
}

#[test]
fn unsolicited_payloads_land_intact() {
    let mut c = cluster(2, NodeConfig::default());
    let sizes = [1usize, 4096, 8192, 3, 4095];
    let before = snapshot(&c, 1);
    for (k, &len) in sizes.iter().enumerate() {
        let msg = OutMsg {
            peer: 1,
            ctrl: tagged_ctrl(k as u32, 20),
            payload: data(100 + k as u64, len),
            ..Default::default()
        };
        send(&mut c, 0, msg);
    }
    settle(&mut c);

    let got = &c.host(1).delivered;
    assert_eq!(got.len(), sizes.len());
    let mut expect = before;
    for (k, (d, &len)) in got.iter().zip(&sizes).enumerate() {
        let payload = data(100 + k as u64, len);
        assert_eq!(id_of(d), k as u32);
        assert_eq!(d.ctrl, tagged_ctrl(k as u32, 20));
        assert_eq!((d.src, d.flags, d.token), (0, 0, PayloadToken::NONE));
        assert_eq!(d.payload, payload);
        // Receive slot k's frame holds the payload, and nothing past it was written.
        let frame = slot_frame(&c, 1, k as u32);
        let at = (frame.addr - HOST_DMA_BASE) as usize;
        expect[at..at + len].copy_from_slice(&payload);
    }
    assert!(snapshot(&c, 1) == expect, "host memory differs from the payloads in their frames");
    assert!(c.host(0).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
    assert_eq!(counter(&c, 1, Counter::RxPackets), sizes.len() as u64);
    assert_eq!(counter(&c, 1, Counter::RxBytes), sizes.iter().sum::<usize>() as u64);
    assert_eq!(counter(&c, 0, Counter::TxBytes), sizes.iter().sum::<usize>() as u64);
}

#[test]
fn payload_64k_from_scatter_gather_list() {
    let cfg = NodeConfig { mtu: 65536, ..NodeConfig::default() };
    // 32 receive frames of 64 KB per host: give the hosts room for send frames too.
    let mut c = Cluster::with_host_mem(Params::alpha500(), 2, cfg, Faults::default(), 8 << 20);
    let big = data(64, 65536);
    // 8 frames of 8 KB: exactly MAX_SEGMENTS.
    send(
        &mut c,
        0,
        OutMsg { peer: 1, ctrl: tagged_ctrl(0, 0), payload: big.clone(), frame_bytes: 8192, ..Default::default() },
    );
    settle(&mut c);
    assert_eq!(c.host(0).sent.len(), 1);
    assert_eq!(c.host(0).sent[0].status, Some(TxStatus::Sent));
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), 1);
    assert_eq!((id_of(&got[0]), got[0].flags), (0, 0));
    assert!(got[0].payload == big, "64 KB payload damaged");
    // The source side read each 8 KB frame with one transfer, in order.
    let reads: Vec<_> = c.transfer_log(0).iter().filter(|t| t.kind == TransferKind::HostRead).copied().collect();
    assert_eq!(reads.len(), 8);
    assert!(reads.iter().all(|t| t.len == 8192));
    assert!(reads.windows(2).all(|w| w[1].nic_off == w[0].nic_off + 8192));

    // 16 frames of 4 KB: more segments than a ring entry holds; refused, nothing sent.
    let packets = c.link_stats().packets;
    send(
        &mut c,
        0,
        OutMsg { peer: 1, ctrl: tagged_ctrl(1, 0), payload: big.clone(), frame_bytes: 4096, ..Default::default() },
    );
    // And a 64 KB payload from a single frame still goes.
    send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(2, 0), payload: big.clone(), ..Default::default() });
    settle(&mut c);
    let sent = &c.host(0).sent;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1].status, Some(TxStatus::Malformed));
    assert_eq!(sent[2].status, Some(TxStatus::Sent));
    assert_eq!(counter(&c, 0, Counter::TxMalformed), 1);
    assert_eq!(counter(&c, 0, Counter::TxPackets), 2);
    assert_eq!(c.link_stats().packets, packets + 1);
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), 2);
    assert_eq!(id_of(&got[1]), 2);
    assert!(got[1].payload == big);
}

/// IPT delivery: exactly into the armed frame, once; every kind of bad token is refused
/// before any byte reaches host memory, and refused tokens consume nothing.
#[test]
fn ipt_tokens_deliver_once_and_refuse_everything_else() {
    let mut c = cluster(2, NodeConfig::default());
    // Paint the receiving host's free memory: node 1 sends a 6 KB pattern; its send frame
    // is the first free host memory and keeps the pattern once freed after the send.
    let pattern = data(0xFA, 6144);
    send(&mut c, 1, OutMsg { peer: 0, payload: pattern.clone(), ..Default::default() });
    settle(&mut c);
    // Two 2000-byte frames (2048 apart): `frame` between `pad` and the rest of the pattern.
    let (pad_tok, pad) = c.host_mut(1).arm(2000, 1).expect("arm pad");
    let (tok, frame) = c.host_mut(1).arm(2000, 1).expect("arm frame");
    assert_eq!(frame, pad + 2048);
    assert_eq!(c.host(1).read(pad, 6144).unwrap(), &pattern[..], "memory not painted");
    let ipt = |c: &Cluster, t: PayloadToken| {
        let e = IptEntry::new(c.nic_mem(1), t.index()).unwrap();
        (e.is_armed(), e.done_len())
    };

    // 1. Tagged with the token: lands in exactly the frame's 2000 bytes.
    let before = snapshot(&c, 1);
    let payload = data(0x1, 2000);
    send(
        &mut c,
        0,
        OutMsg { peer: 1, ctrl: tagged_ctrl(1, 9), payload: payload.clone(), token: tok, ..Default::default() },
    );
    settle(&mut c);
    let d = c.host(1).delivered.last().unwrap().clone();
    assert_eq!(c.host(1).delivered.len(), 1);
    assert_eq!((id_of(&d), d.src, d.flags, d.token), (1, 0, rx_flags::IPT, tok));
    assert_eq!(d.ctrl, tagged_ctrl(1, 9));
    assert_eq!(d.payload, payload);
    let after = snapshot(&c, 1);
    assert_only_changed(&before, &after, frame, &payload);
    assert_eq!(counter(&c, 1, Counter::RxIptDelivered), 1);
    assert_eq!(counter(&c, 1, Counter::RxBadToken), 0);
    assert_eq!(ipt(&c, tok), (false, 2000), "entry not consumed");
    assert!(ipt(&c, pad_tok).0);

    // Each refused token below: control message delivered with BAD_TOKEN and payload
    // length 0, not one byte of host memory written, the bad-token counter bumped.
    let mut refusals = 0;
    let mut expect_refused = |c: &mut Cluster, id: u32, token: PayloadToken, len: usize| {
        let before = snapshot(c, 1);
        let n = c.host(1).delivered.len();
        send(
            c,
            0,
            OutMsg {
                peer: 1,
                ctrl: tagged_ctrl(id, 3),
                payload: data(u64::from(id), len),
                token,
                ..Default::default()
            },
        );
        settle(c);
        assert_eq!(c.host(1).delivered.len(), n + 1, "message {id}");
        let d = c.host(1).delivered.last().unwrap();
        assert_eq!((id_of(d), d.flags, d.token), (id, rx_flags::BAD_TOKEN, token), "message {id}");
        assert_eq!(d.ctrl, tagged_ctrl(id, 3));
        assert!(d.payload.is_empty());
        let slot = Slot::new(c.nic_mem(1), Ring::Recv, n as u32);
        assert_eq!((slot.payload_len(), slot.flags()), (0, rx_flags::BAD_TOKEN));
        assert!(snapshot(c, 1) == before, "message {id}: host memory written");
        refusals += 1;
        assert_eq!(counter(c, 1, Counter::RxBadToken), refusals, "message {id}");
        assert_eq!(counter(c, 1, Counter::RxIptDelivered), 1, "message {id}");
    };

    // 2. The same token replayed.
    expect_refused(&mut c, 2, tok, 2000);
    // 3. Forged: the armed pad entry with a random key; an index outside the table.
    let mut rng = Rng::new(77);
    let forged = PayloadToken::new(pad_tok.index(), rng.next_u64() | 1);
    assert_ne!(forged, pad_tok);
    expect_refused(&mut c, 3, forged, 2000);
    expect_refused(&mut c, 4, PayloadToken::new(IPT_ENTRIES as u16 + 5, pad_tok.key()), 16);
    assert!(ipt(&c, pad_tok).0, "a forgery disturbed the entry");
    // 4. Cancelled before anything arrived.
    let (ctok, _) = c.host_mut(1).arm(2000, 2).expect("arm");
    assert_eq!(c.host_mut(1).cancel(ctok), Some(CancelState::Cancelled));
    expect_refused(&mut c, 5, ctok, 2000);
    // 5. A frame smaller than the payload: refused, but the entry stays armed, so a
    //    payload that fits is then delivered with the same token.
    let (stok, small) = c.host_mut(1).arm(1000, 2).expect("arm");
    expect_refused(&mut c, 6, stok, 1001);
    assert!(ipt(&c, stok).0, "a refused token consumed the entry");
    let before = snapshot(&c, 1);
    let fits = data(7, 1000);
    send(
        &mut c,
        0,
        OutMsg { peer: 1, ctrl: tagged_ctrl(7, 0), payload: fits.clone(), token: stok, ..Default::default() },
    );
    settle(&mut c);
    let d = c.host(1).delivered.last().unwrap();
    assert_eq!((id_of(d), d.flags), (7, rx_flags::IPT));
    assert_eq!(d.payload, fits);
    assert_only_changed(&before, &snapshot(&c, 1), small, &fits);
    assert_eq!(counter(&c, 1, Counter::RxIptDelivered), 2);
    assert_eq!(counter(&c, 1, Counter::RxBadToken), 5);
    assert_eq!(counter(&c, 1, Counter::RxPackets), 7);
    assert!(c.host(0).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
}

/// Unsolicited payloads need a big enough, well-formed frame on the receive slot:
/// otherwise the control message arrives with NO_FRAME and the payload is dropped untouched.
#[test]
fn unsolicited_payload_without_room_is_flagged_no_frame() {
    let mut c = cluster(2, NodeConfig::default());
    let mem = c.nic_mem(1).clone();
    let f: Vec<Segment> = (0..4).map(|i| slot_frame(&c, 1, i)).collect();
    // Slot 0: no frame. Slot 1: 100 bytes. Slot 2: 100 bytes. Slot 3: 60 + 40 bytes,
    // two contiguous segments.
    Slot::new(&mem, Ring::Recv, 0).set_nseg(0);
    Slot::new(&mem, Ring::Recv, 1).set_segment(0, Segment { addr: f[1].addr, len: 100 });
    Slot::new(&mem, Ring::Recv, 2).set_segment(0, Segment { addr: f[2].addr, len: 100 });
    let s3 = Slot::new(&mem, Ring::Recv, 3);
    s3.set_segment(0, Segment { addr: f[3].addr, len: 60 });
    s3.set_segment(1, Segment { addr: f[3].addr + 60, len: 40 });
    s3.set_nseg(2);
    // Slot 4: room enough, but the segment runs past the top of the address space.
    Slot::new(&mem, Ring::Recv, 4).set_segment(0, Segment { addr: u64::MAX - 15, len: 64 });
    let sizes = [1usize, 101, 100, 100, 10];
    let before = snapshot(&c, 1);
    for (k, &len) in sizes.iter().enumerate() {
        let msg =
            OutMsg { peer: 1, ctrl: tagged_ctrl(k as u32, 0), payload: data(k as u64, len), ..Default::default() };
        send(&mut c, 0, msg);
    }
    settle(&mut c);
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), 5);
    let flags: Vec<u32> = got.iter().map(|d| d.flags).collect();
    assert_eq!(flags, [rx_flags::NO_FRAME, rx_flags::NO_FRAME, 0, 0, rx_flags::NO_FRAME]);
    assert!(got[0].payload.is_empty() && got[1].payload.is_empty() && got[4].payload.is_empty());
    for k in 0..2 {
        assert_eq!(Slot::new(&mem, Ring::Recv, k).payload_len(), 0);
    }
    assert_eq!(got[2].payload, data(2, 100));
    assert_eq!(got[3].payload, data(3, 100));
    let mut expect = before;
    for k in [2usize, 3] {
        let at = (f[k].addr - HOST_DMA_BASE) as usize;
        expect[at..at + 100].copy_from_slice(&data(k as u64, 100));
    }
    assert!(snapshot(&c, 1) == expect, "host memory written outside the delivered frames");
    // The two-segment frame was written in two transfers split at the segment boundary.
    let writes: Vec<(u64, u32)> =
        c.transfer_log(1).iter().filter(|t| t.kind == TransferKind::HostWrite).map(|t| (t.host_addr, t.len)).collect();
    assert_eq!(writes, [(f[2].addr, 100), (f[3].addr, 60), (f[3].addr + 60, 40)]);
    assert_eq!(counter(&c, 1, Counter::RxNoFrame), 3);
    assert_eq!(counter(&c, 1, Counter::RxPackets), 5);
    assert_eq!(counter(&c, 1, Counter::RxBytes), 200);
}

#[test]
fn refused_source_dma_fails_the_send_and_delivers_nothing() {
    // (a) The whole payload outside host memory: nothing reaches the link.
    let mut c = cluster(2, NodeConfig::default());
    let bad = OutMsg {
        peer: 1,
        ctrl: tagged_ctrl(0, 0),
        payload: vec![0; 4096],
        raw_segments: Some(vec![Segment { addr: 0x10, len: 4096 }]),
        ..Default::default()
    };
    send(&mut c, 0, bad);
    settle(&mut c);
    assert_eq!(c.host(0).sent.len(), 1);
    assert_eq!(c.host(0).sent[0].status, Some(TxStatus::DmaRefused));
    assert_eq!(counter(&c, 0, Counter::DmaRefused), 1);
    assert_eq!(counter(&c, 0, Counter::TxPackets), 0);
    assert!(c.transfer_log(0).iter().all(|t| t.kind != TransferKind::LinkTx));
    assert_eq!(c.link_stats().packets, 0);
    assert!(c.host(1).delivered.is_empty());
    // The NIC carries on.
    let ok = data(1, 3000);
    send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(1, 0), payload: ok.clone(), ..Default::default() });
    settle(&mut c);
    assert_eq!(c.host(1).delivered.len(), 1);
    assert_eq!((id_of(&c.host(1).delivered[0]), &c.host(1).delivered[0].payload), (1, &ok));
    assert_eq!(c.host(0).sent[1].status, Some(TxStatus::Sent));

    // (b) The first frame is good, the second is not: cut-through has already put part of
    //     the packet on the wire when the read is refused, so the packet is aborted and
    //     the receiver drops it on the trailer.
    let mut c = cluster(2, NodeConfig::default());
    let good = HOST_DMA_BASE + (1 << 20); // inside host memory, unallocated
    let bad = OutMsg {
        peer: 1,
        ctrl: tagged_ctrl(0, 0),
        payload: vec![0; 8192],
        raw_segments: Some(vec![Segment { addr: good, len: 4096 }, Segment { addr: 0x10, len: 4096 }]),
        ..Default::default()
    };
    send(&mut c, 0, bad);
    settle(&mut c);
    assert_eq!(c.host(0).sent[0].status, Some(TxStatus::DmaRefused));
    assert_eq!(counter(&c, 0, Counter::DmaRefused), 1);
    let link: Vec<_> = c.transfer_log(0).iter().filter(|t| t.kind == TransferKind::LinkTx).copied().collect();
    assert!(link.len() >= 2, "nothing went out before the refusal: {link:?}");
    assert_eq!(link[0].flags & tx_flags::FIRST, tx_flags::FIRST);
    assert_eq!(link.last().unwrap().flags, tx_flags::ABORT | tx_flags::LAST);
    assert!(link[..link.len() - 1].iter().all(|t| t.flags & tx_flags::LAST == 0));
    assert_eq!(c.link_stats().packets, 1);
    assert!(c.host(1).delivered.is_empty());
    assert_eq!(counter(&c, 1, Counter::RxDropCrc), 1);
    assert_eq!(counter(&c, 1, Counter::RxPackets), 0);
    let ok = data(2, 5000);
    send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(1, 0), payload: ok.clone(), ..Default::default() });
    settle(&mut c);
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), 1);
    assert_eq!((id_of(&got[0]), got[0].flags, &got[0].payload), (1, 0, &ok));

    // (c) The receiving side: a frame outside host memory on the receive slot. The
    //     message arrives with DMA_REFUSED and no payload; the next slot works.
    let mut c = cluster(2, NodeConfig::default());
    Slot::new(c.nic_mem(1), Ring::Recv, 0).set_segment(0, Segment { addr: 0x10, len: 8192 });
    let before = snapshot(&c, 1);
    for k in 0..2 {
        send(
            &mut c,
            0,
            OutMsg { peer: 1, ctrl: tagged_ctrl(k, 0), payload: data(u64::from(k), 3000), ..Default::default() },
        );
    }
    settle(&mut c);
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), 2);
    assert_eq!((id_of(&got[0]), got[0].flags), (0, rx_flags::DMA_REFUSED));
    assert!(got[0].payload.is_empty());
    assert_eq!(Slot::new(c.nic_mem(1), Ring::Recv, 0).payload_len(), 0);
    assert_eq!((id_of(&got[1]), got[1].flags, &got[1].payload), (1, 0, &data(1, 3000)));
    let mut expect = before;
    let at = (slot_frame(&c, 1, 1).addr - HOST_DMA_BASE) as usize;
    expect[at..at + 3000].copy_from_slice(&data(1, 3000));
    assert!(snapshot(&c, 1) == expect);
    assert_eq!(counter(&c, 1, Counter::DmaRefused), 1);
    assert_eq!(counter(&c, 1, Counter::RxBytes), 3000);
    assert!(c.host(0).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
}

#[test]
fn a_full_receive_ring_holds_packets_until_the_host_reads() {
    let mut c = cluster(2, NodeConfig::default());
    c.host_mut(1).set_reading(false);
    let total = RECV_RING_ENTRIES + 5;
    let payload = |k: u32| data(1000 + u64::from(k), 256 + k as usize * 7);
    for k in 0..total {
        send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(k, 0), payload: payload(k), ..Default::default() });
    }
    // Not quiet while a packet waits for the host: run a while (5 ms) instead.
    let t = c.now_ps();
    c.run_until(LIMIT_PS, |c| c.now_ps() > t + 5_000 * US);
    // The ring holds the first 32; the next waits in staging, the link holds the rest.
    assert!(c.host(1).delivered.is_empty());
    assert_eq!(counter(&c, 1, Counter::RxPackets), u64::from(RECV_RING_ENTRIES));
    assert_eq!(counter(&c, 1, Counter::RxRingWait), 1);
    assert_eq!(counter(&c, 1, Counter::RxDropCrc) + counter(&c, 1, Counter::RxDropMalformed), 0);
    // It waits on the host, not on an engine: the flashed image sleeps until a doorbell.
    assert!(!c.firmware(1).engines_busy(), "a packet waiting for a receive slot keeps the NIC spinning");

    // The host catches up: every message arrives, in order, none lost; later ones flow.
    c.host_mut(1).set_reading(true);
    let more = 40;
    for k in total..total + more {
        send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(k, 0), payload: payload(k), ..Default::default() });
    }
    settle(&mut c);
    let got = &c.host(1).delivered;
    let ids: Vec<u32> = got.iter().map(id_of).collect();
    assert_eq!(ids, (0..total + more).collect::<Vec<_>>());
    for d in got {
        assert_eq!((d.flags, &d.payload), (0, &payload(id_of(d))));
    }
    assert_eq!(counter(&c, 1, Counter::RxPackets), u64::from(total + more));
    assert_eq!(c.host(0).sent.len(), (total + more) as usize);
    assert!(c.host(0).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
}

#[derive(Clone, Debug)]
struct Expected {
    from: usize,
    ctrl: Vec<u8>,
    payload: Vec<u8>,
    token: PayloadToken,
}

/// Under heavy bit corruption (and some drops) every message that is delivered is
/// byte-identical to what was sent; what is missing is exactly what the switch damaged
/// or dropped; every damaged packet is caught by the trailer; and an IPT entry whose
/// packet was damaged stays armed for a retransmission.
#[test]
fn corrupted_packets_are_dropped_and_ipt_entries_survive() {
    let faults = Faults { drop_ppm: 30_000, corrupt_ppm: 300_000, seed: 0x5EED_0001 };
    let mut c = Cluster::new(Params::alpha500(), 3, NodeConfig::default(), faults);
    let mut rng = Rng::new(0xC0FFEE);
    let mut expected: BTreeMap<u32, Expected> = BTreeMap::new();
    for id in 0..200u32 {
        let from = if rng.next_u64().is_multiple_of(2) { 0 } else { 2 };
        // Many small messages (so headers get hit too), some up to the MTU.
        let len = match rng.next_u64() % 4 {
            0 => 0,
            1 => rng.next_u64() % 64,
            2 => rng.next_u64() % 1024,
            _ => rng.next_u64() % 8193,
        } as usize;
        let payload = data(0xD000 + u64::from(id), len);
        let token = if len > 0 && rng.next_u64().is_multiple_of(4) {
            let frames = 1 + (rng.next_u64() % 4) as u32;
            c.host_mut(1).arm(len as u32, frames).expect("arm").0
        } else {
            PayloadToken::NONE
        };
        let ctrl = tagged_ctrl(id, (rng.next_u64() % 100) as usize);
        let frame_bytes = if len > 0 { (len as u32).div_ceil(1 + (rng.next_u64() % 8) as u32) } else { 0 };
        let at = id as u64 * 20 * US;
        c.host_mut(from).post(
            at,
            OutMsg { peer: 1, ctrl: ctrl.clone(), payload: payload.clone(), token, frame_bytes, ..Default::default() },
        );
        expected.insert(id, Expected { from, ctrl, payload, token });
    }
    settle(&mut c);

    let check_delivered = |c: &Cluster| -> Vec<u32> {
        let mut ids: Vec<u32> = c.host(1).delivered.iter().map(id_of).collect();
        for d in &c.host(1).delivered {
            let e = &expected[&id_of(d)];
            assert_eq!(d.src as usize, e.from);
            assert_eq!(d.ctrl, e.ctrl, "message {} control damaged", id_of(d));
            assert!(d.payload == e.payload, "message {} payload damaged", id_of(d));
            assert_eq!(d.token, e.token);
            let flags = if e.token.is_none() || e.payload.is_empty() { 0 } else { rx_flags::IPT };
            assert_eq!(d.flags, flags, "message {}", id_of(d));
        }
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "a message was delivered twice");
        ids
    };
    let got = check_delivered(&c);
    let stats = c.link_stats();
    assert!(stats.corrupted > 20 && stats.dropped > 0, "faults not exercised: {stats:?}");
    assert_eq!(stats.packets, 200);
    assert_eq!(200 - got.len() as u64, stats.corrupted + stats.dropped);
    assert_eq!(counter(&c, 1, Counter::RxDropCrc), stats.corrupted);
    // A damaged packet is a CRC drop, whatever its damage made it look like.
    for k in [Counter::RxDropMalformed, Counter::RxBadToken, Counter::RxNoFrame] {
        assert_eq!(counter(&c, 1, k), 0, "{}", k.name());
    }
    assert_eq!(counter(&c, 1, Counter::RxPackets), got.len() as u64);
    for from in [0, 2] {
        assert!(c.host(from).sent.iter().all(|s| s.status == Some(TxStatus::Sent)));
    }

    // Retransmit the lost IPT messages with their original tokens until they get through.
    let mut lost: Vec<u32> = expected
        .iter()
        .filter(|(id, e)| !e.token.is_none() && !e.payload.is_empty() && got.binary_search(id).is_err())
        .map(|(id, _)| *id)
        .collect();
    assert!(!lost.is_empty(), "no IPT packet was damaged: pick another seed");
    let ipt_before = counter(&c, 1, Counter::RxIptDelivered);
    let n_lost = lost.len() as u64;
    for round in 0..20 {
        for id in &lost {
            let e = &expected[id];
            let entry = IptEntry::new(c.nic_mem(1), e.token.index()).unwrap();
            assert!(entry.is_armed(), "round {round}: IPT entry of lost message {id} disarmed");
            // ... and not left claimed by the lost packet (a claim would refuse the
            // retransmission as a duplicate in flight).
            let base = IPT_OFF + u32::from(e.token.index()) * IPT_ENTRY_BYTES;
            let claim = c.nic_mem(1).load_relaxed(base + ipt::CLAIM_SEQ);
            assert_ne!(claim, entry.arm_seq(), "round {round}: lost message {id} left its IPT entry claimed");
            let msg = OutMsg {
                peer: 1,
                ctrl: e.ctrl.clone(),
                payload: e.payload.clone(),
                token: e.token,
                ..Default::default()
            };
            send(&mut c, e.from, msg);
        }
        settle(&mut c);
        let got = check_delivered(&c);
        lost.retain(|id| got.binary_search(id).is_err());
        if lost.is_empty() {
            break;
        }
    }
    assert!(lost.is_empty(), "still lost after 20 rounds: {lost:?}");
    assert_eq!(counter(&c, 1, Counter::RxIptDelivered), ipt_before + n_lost);
    let stats = c.link_stats();
    assert_eq!(counter(&c, 1, Counter::RxDropCrc), stats.corrupted);
    assert_eq!(counter(&c, 1, Counter::RxBadToken), 0);
}

#[test]
fn one_interrupt_per_delivered_message() {
    let cfg = NodeConfig { notify: notify::IRQ_ON_RECV, ..NodeConfig::default() };
    let mut c = cluster(2, cfg);
    // Slot 5 without a frame: that message is delivered with NO_FRAME (still one IRQ).
    Slot::new(c.nic_mem(1), Ring::Recv, 5).set_nseg(0);
    let (tok, _) = c.host_mut(1).arm(3000, 3).unwrap();
    let mut n = 0u32;
    for k in 0..12u32 {
        let len = [0usize, 1, 700, 8192][k as usize % 4];
        let token = if k == 3 || k == 7 { tok } else { PayloadToken::NONE }; // 7: replay
        let msg = OutMsg {
            peer: 1,
            ctrl: tagged_ctrl(k, 0),
            payload: data(u64::from(k), len.min(if token.is_none() { 8192 } else { 3000 })),
            token,
            ..Default::default()
        };
        send(&mut c, 0, msg);
        n += 1;
    }
    settle(&mut c);
    let got = &c.host(1).delivered;
    assert_eq!(got.len(), n as usize);
    assert_eq!(got[3].flags, rx_flags::IPT);
    assert_eq!(got[5].flags, rx_flags::NO_FRAME);
    assert_eq!(got[7].flags, rx_flags::BAD_TOKEN);
    assert_eq!(counter(&c, 1, Counter::Interrupts), u64::from(n));
    assert_eq!(counter(&c, 0, Counter::Interrupts), 0, "no IRQ_ON_SEND_DONE configured");

    // Send completions interrupt only when asked to.
    let cfg = NodeConfig { notify: notify::IRQ_ON_SEND_DONE, ..NodeConfig::default() };
    let mut c = cluster(2, cfg);
    for k in 0..5u32 {
        send(&mut c, 0, OutMsg { peer: 1, ctrl: tagged_ctrl(k, 0), payload: data(9, 100), ..Default::default() });
    }
    settle(&mut c);
    assert_eq!(c.host(1).delivered.len(), 5);
    assert_eq!(counter(&c, 0, Counter::Interrupts), 5);
    assert_eq!(counter(&c, 1, Counter::Interrupts), 0);
}
