// SPDX-License-Identifier: GPL-2.0-only
//! Tests of the software engines: link out and in, delayed frames, deferred reads, held packets.

use super::*;
use crate::link::backend::InProcSwitch;
use crate::link::FaultConfig;

fn engines(link: Link) -> (SoftEngines, Arc<Mapping>) {
    let nic = Arc::new(Mapping::create_memfd("eng-test", 64 * 1024).unwrap());
    let eng = SoftEngines::new(
        nic.clone(),
        Arc::new(DmaSpace::new()),
        link,
        Arc::new(Notifier::default()),
        Arc::new(Wakers::new().unwrap()),
        Arc::new(EngineStats::default()),
        Duration::ZERO,
    );
    (eng, nic)
}

/// A packet (32-byte header from node 1 to node 2, then `len - 32` bytes) for the link.
fn packet(len: usize, seed: u8) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
    p[4..6].copy_from_slice(&1u16.to_le_bytes());
    p[6..8].copy_from_slice(&2u16.to_le_bytes());
    p
}

/// A host cannot claim another node's id: the receiving NIC writes the sending NIC's link
/// address into the header it hands its firmware, and counts the packet.
#[test]
fn link_in_stamps_the_sending_nics_id_over_a_claimed_one() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let (mut b, nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
    let honest = packet(200, 4);
    let mut forged = honest.clone();
    forged[4..6].copy_from_slice(&7u16.to_le_bytes());
    for p in [&honest, &forged] {
        a.send_packet(p, false).unwrap();
        b.link_rx_post(2048, 1024);
        let st = b.link_rx_status();
        assert_eq!((st.complete, st.crc_ok, st.bytes), (true, true, 200));
        let mut got = [0u8; 200];
        assert!(nic.read(2048, &mut got[..RX_PREFIX_BYTES]));
        assert_eq!(got[4..6], 1u16.to_le_bytes(), "the header names the NIC that sent it");
        assert_eq!(got[6..RX_PREFIX_BYTES], honest[6..RX_PREFIX_BYTES]);
    }
    assert_eq!(b.stats.src_stamped.load(Ordering::Relaxed), 1, "only the forged packet was restamped");
}

#[test]
fn link_out_sends_the_pulses_from_staging_in_order_even_when_apart() {
    let sw = InProcSwitch::new();
    let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE));
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let p = packet(3000, 3);
    // Three pulses: two contiguous, then one elsewhere in NIC memory.
    assert!(nic.write(1000, &p[..1200]));
    assert!(nic.write(9000, &p[1200..]));
    a.link_tx_start(1000, 700, tx_flags::FIRST);
    a.link_tx_start(1700, 500, 0);
    a.link_tx_start(9000, 1800, tx_flags::LAST);
    let mut out = vec![0u8; 4096];
    let rx = b.poll_packet(&mut out).expect("packet");
    assert_eq!((rx.len, rx.src, rx.crc_ok), (3000, 1, true));
    assert_eq!(&out[..3000], &p[..]);
    // A pulse outside NIC memory aborts the packet: the receiver sees a bad CRC.
    a.link_tx_start(1000, 1200, tx_flags::FIRST);
    a.link_tx_start(64 * 1024 - 10, 100, tx_flags::LAST);
    let rx = b.poll_packet(&mut out).expect("aborted packet");
    assert!(!rx.crc_ok);
}

#[test]
fn delayed_frames_leave_when_due_with_no_receive_buffer_posted() {
    let sw = InProcSwitch::new();
    // 20 ms: far longer than the few µs between sending and the first check, even on a
    // loaded machine (at 200 µs a descheduled test thread saw the frame already gone).
    let wire = FaultConfig { delay_ns: 20_000_000, ..FaultConfig::NONE };
    let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), wire));
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let p = packet(2000, 5);
    assert!(nic.write(0, &p));
    let t0 = Instant::now();
    a.link_tx_start(0, 2000, tx_flags::FIRST | tx_flags::LAST);
    let mut out = vec![0u8; 4096];
    assert!(b.poll_packet(&mut out).is_none(), "the wire delay was skipped");
    // Only the checks the firmware makes while it posts no receive buffer (its
    // receive queue full): the delay line still drains.
    assert!(a.link_rx_pending(), "a frame on the delay line is pending work");
    let rx = loop {
        a.link_rx_pending();
        if let Some(rx) = b.poll_packet(&mut out) {
            break rx;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "the delayed frame never left");
    };
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!((rx.len, rx.crc_ok), (2000, true));
    assert_eq!(&out[..2000], &p[..]);
    assert!(!a.link_rx_pending());
}

#[test]
fn link_in_reports_pending_input_only_while_a_packet_waits() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let (mut b, _nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
    b.link_rx_post(2048, 1024);
    assert!(!b.link_rx_pending(), "nothing sent yet");
    assert!(!b.link_rx_status().complete);
    a.send_packet(&packet(300, 1), false).unwrap();
    assert!(b.link_rx_pending(), "a frame is queued");
    let st = b.link_rx_status();
    assert_eq!((st.complete, st.crc_ok, st.bytes), (true, true, 300));
    assert!(!b.link_rx_pending(), "the only packet was taken");
    // A packet in fragments on a small-frame link: pending until every part is in.
    a.send_packet(&packet(70_000, 2), false).unwrap();
    assert!(b.link_rx_pending());
}

#[test]
fn link_in_writes_the_packet_into_the_posted_buffer() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let (mut b, nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
    let p = packet(500, 9);
    a.send_packet(&p, false).unwrap();
    a.send_packet(&p, false).unwrap();
    b.link_rx_post(2048, 1024);
    let st = b.link_rx_status();
    assert_eq!((st.complete, st.crc_ok, st.bytes), (true, true, 500));
    // Header and control message are in staging at once; the rest by the time the
    // link receives again.
    let mut got = vec![0u8; 500];
    assert!(nic.read(2048, &mut got[..RX_PREFIX_BYTES]));
    assert_eq!(got[..RX_PREFIX_BYTES], p[..RX_PREFIX_BYTES]);
    // A packet larger than the posted buffer is cut and marked bad.
    b.link_rx_post(4096, 100);
    let st = b.link_rx_status();
    assert_eq!((st.complete, st.crc_ok, st.bytes), (true, false, 100));
    assert!(nic.read(2048, &mut got));
    assert_eq!(got, p);
}

/// Host-bus reads into send staging are deferred until link out sends the bytes;
/// whatever else looks at those bytes, and however many reads wait, the packet and
/// NIC memory show exactly what the reads would have copied.
#[test]
fn deferred_host_reads_send_and_settle_the_bytes_they_read() {
    let sw = InProcSwitch::new();
    let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE));
    let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
    let host = Arc::new(Mapping::create_memfd("eng-host", 64 * 1024).unwrap());
    a.dma.register("host", 0x10_0000, host.clone(), 0, 64 * 1024).unwrap();
    let p = packet(9000, 11);
    assert!(host.write(0, &p));
    let mut out = vec![0u8; 16 * 1024];
    // Header from the firmware, payload read from the host in two transfers.
    assert!(nic.write(4096, &p[..32]));
    a.host_dma_start(HostDir::ToNic, 0x10_0000 + 32, 4096 + 32, 4000);
    a.host_dma_start(HostDir::ToNic, 0x10_0000 + 4032, 4096 + 4032, 4968);
    assert!(!a.host_dma_status().error);
    a.link_tx_start(4096, 9000, tx_flags::FIRST | tx_flags::LAST);
    let rx = b.poll_packet(&mut out).expect("packet");
    assert_eq!((rx.len, rx.crc_ok), (9000, true));
    assert_eq!(&out[..9000], &p[..]);
    // A second read over part of an unsent one: the packet carries the newer bytes.
    let q = packet(3000, 77);
    assert!(host.write(20_000, &q));
    a.host_dma_start(HostDir::ToNic, 0x10_0000, 8192, 3000);
    a.host_dma_start(HostDir::ToNic, 0x10_0000 + 20_000 + 1000, 8192 + 1000, 1000);
    let mut want = p[..3000].to_vec();
    want[1000..2000].copy_from_slice(&q[1000..2000]);
    // A host-bus write out of a range a read is still deferred in sees the read bytes.
    a.host_dma_start(HostDir::ToHost, 0x10_0000 + 60_000, 8192 + 1500, 100);
    let mut back = vec![0u8; 100];
    assert!(host.read(60_000, &mut back));
    assert_eq!(back, want[1500..1600]);
    a.link_tx_start(8192, 3000, tx_flags::FIRST | tx_flags::LAST);
    let rx = b.poll_packet(&mut out).expect("packet");
    assert_eq!((rx.len, rx.crc_ok), (3000, true));
    assert_eq!(&out[..3000], &want[..]);
    // More reads than are kept: the oldest settle into staging at once, the rest when
    // the processor resets; either way staging ends up with the bytes read.
    let n = DEFERRED_MAX as u32 + 4;
    for k in 0..n {
        a.host_dma_start(HostDir::ToNic, 0x10_0000 + k as u64 * 100, 30_000 + k * 1000, 500);
    }
    let staged = |k: u32| {
        let mut v = vec![0u8; 500];
        assert!(nic.read(30_000 + k as usize * 1000, &mut v));
        v
    };
    for k in 0..4 {
        assert_eq!(staged(k), p[k as usize * 100..k as usize * 100 + 500], "read {k} settled when pushed out");
    }
    assert_eq!(a.tx_deferred.len(), DEFERRED_MAX);
    a.reset();
    for k in 0..n {
        assert_eq!(staged(k), p[k as usize * 100..k as usize * 100 + 500], "read {k} settled by the reset");
    }
    assert!(a.tx_deferred.is_empty(), "nothing deferred after a reset");
}

#[test]
fn host_bus_writes_of_a_held_packet_deliver_the_same_bytes() {
    let sw = InProcSwitch::new();
    let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
    let (mut b, nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
    let host = Arc::new(Mapping::create_memfd("eng-host", 64 * 1024).unwrap());
    b.dma.register("host", 0x10_0000, host.clone(), 0, 64 * 1024).unwrap();
    let p = packet(9000, 5);
    let read_host = |off: usize, len: usize| {
        let mut v = vec![0u8; len];
        assert!(host.read(off, &mut v));
        v
    };
    // The payload from the held frame, in two pulses (the second ends the packet).
    a.send_packet(&p, false).unwrap();
    b.link_rx_post(0, 16 * 1024);
    assert!(b.link_rx_status().complete);
    b.host_dma_start(HostDir::ToHost, 0x10_0000, 200, 3000);
    b.host_dma_start(HostDir::ToHost, 0x10_0000 + 3000, 3200, 5800);
    assert!(!b.host_dma_status().error);
    assert_eq!(read_host(0, 8800), p[200..]);
    // A packet the firmware writes out only after the link received again: the bytes
    // were settled into staging meanwhile and come from there.
    let q = packet(6000, 9);
    a.send_packet(&q, false).unwrap();
    b.link_rx_post(16 * 1024, 16 * 1024);
    assert!(b.link_rx_status().complete);
    a.send_packet(&p, false).unwrap();
    b.link_rx_post(32 * 1024, 16 * 1024);
    assert!(b.link_rx_status().complete);
    b.host_dma_start(HostDir::ToHost, 0x10_0000 + 20_000, 16 * 1024 + 160, 5840);
    assert_eq!(read_host(20_000, 5840), q[160..]);
    let mut staged = vec![0u8; 6000];
    assert!(nic.read(16 * 1024, &mut staged));
    assert_eq!(staged, q);
    // A transfer reaching past the held packet's end comes from staging, after the
    // packet was settled there.
    b.host_dma_start(HostDir::ToHost, 0x10_0000 + 40_000, 32 * 1024 + 8500, 1000);
    assert_eq!(read_host(40_000, 500), p[8500..9000]);
    let mut staged = vec![0u8; 9000];
    assert!(nic.read(32 * 1024, &mut staged));
    assert_eq!(staged, p);
}
