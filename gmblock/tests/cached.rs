// SPDX-License-Identifier: GPL-2.0-only
//! A gmblock server's volume cached in a GMS cluster too small to hold it (write-back,
//! `gms::cached` over `gmblock::cached`), write-back and write-through: every block written
//! reads back right, and after a flush the server's file holds every byte; no dirty page
//! was lost — not when one lender died after the writes were acknowledged (each dirty page
//! has a copy on each lender), only when both did, and then their reads and the flush
//! fail.

use gmblock::cached::CachedVolume;
use gmblock::client::Client;
use gmblock::proto::DataPath;
use gmblock::server::ServerConfig;
use gms::cached::{Config, Stats};
use gms::prelude::*;
use std::collections::HashMap;
use support::{free_port, server_station, station, volume, Served};
use trapeze_node::gms::Cluster;

mod support;

const CLIENT: u16 = 100;
const SERVER: u16 = 1;
const BLOCKS: u64 = 256;

fn block_data(b: u64, round: u8) -> Vec<u8> {
    (0..4096u64).map(|i| ((b * 4096 + i).wrapping_mul(2654435761) >> 11) as u8 ^ round).collect()
}

/// A gmblockd thread serving a fresh file of `BLOCKS` blocks (removed with it), and a
/// client of it.
fn serve(name: &str) -> (Served, Client) {
    let file = volume(&format!("cached-{name}"), BLOCKS * 4096);
    let me = free_port();
    let cfg = ServerConfig {
        station: server_station(SERVER, vec![(CLIENT, me)]),
        export: file.clone(),
        read_only: false,
        path: DataPath::ViaRam,
        model: None,
    };
    let server = support::serve(cfg);
    let block =
        Client::connect(station(CLIENT, me, vec![(SERVER, server.addr)], 0), SERVER, 8).expect("client connects");
    (Served { file, server }, block)
}

/// Two rounds of writes over every block through a GMS of two 24-page lenders, reads
/// back before the flush, then the server's file after it.
fn round_trip(name: &str, writes: WritePolicy, clean_at: u16) -> (Stats, HashMap<String, u32>, u64) {
    let (mut srv, block) = serve(name);
    let gms = Cluster::new(3, 24, GmsConfig::default()).expect("cluster");
    let cfg = Config { space: 77, clean_at, writes, ..Config::DEFAULT };
    let mut v = CachedVolume::new(gms, 0, block, cfg).expect("cached volume");
    let mut served = HashMap::new();
    // Round 0 one write at a time, round 1 in batches of 64 in flight together.
    for b in 0..BLOCKS {
        let r = v.write(b, &block_data(b, 0)).expect("write");
        *served.entry(format!("{r:?}")).or_insert(0) += 1;
    }
    let data: Vec<Vec<u8>> = (0..BLOCKS).map(|b| block_data(b, 1)).collect();
    for batch in (0..BLOCKS).collect::<Vec<_>>().chunks(64) {
        let writes: Vec<(u64, &[u8])> = batch.iter().map(|&b| (b, &data[b as usize][..])).collect();
        for r in v.write_many(&writes).expect("writes") {
            *served.entry(format!("{r:?}")).or_insert(0) += 1;
        }
    }
    for b in (0..BLOCKS).step_by(7) {
        let (data, _) = v.read(b).expect("read");
        assert!(data == block_data(b, 1), "{name}: block {b} read back wrong before the flush");
    }
    v.flush().expect("flush");
    assert_eq!(v.dirty(), 0, "{name}: a flush leaves nothing dirty");
    let bytes = std::fs::read(&srv.file).unwrap();
    for b in 0..BLOCKS {
        let at = (b * 4096) as usize;
        assert!(bytes[at..at + 4096] == block_data(b, 1)[..], "{name}: block {b} on the server's disk is wrong");
    }
    let kept: u64 = v.gms.ports.iter().map(|p| p.lru.stats.dirty_kept).sum();
    let discarded: u64 = v.gms.ports.iter().map(|p| p.pages_discarded()).sum();
    eprintln!(
        "{name}: served {served:?}; {:?}; the LRU discarded {discarded} pages, kept dirty ones {kept} times",
        v.stats()
    );
    assert!(writes == WritePolicy::WriteThrough || discarded > 0, "{name}: the budget forced discards");
    assert_eq!(v.stats().lost, 0, "{name}: no dirty page was lost");
    srv.server.stop();
    (v.stats(), served, kept)
}

fn policies() {
    // Cleaning starts at 16 dirty pages: the lenders' 48 frames hold their two copies
    // each.
    let (st, served, _) = round_trip("back16", WritePolicy::WriteBack, 16);
    // One at a time every write fits; 64 in flight at once overrun the lenders' frames
    // now and then, and those go through the server.
    assert!(served.get("Dirty").is_some_and(|&n| n >= 256), "writes went back dirty: {served:?}");
    assert!(st.cleaned >= 256, "pressure and the flush cleaned every block: {st:?}");
    // Up to 240 dirty pages, five times what the lenders hold: puts are refused and those
    // writes go through the server; the LRU keeps every dirty page it would age out.
    let (st, served, kept) = round_trip("back240", WritePolicy::WriteBack, 240);
    assert!(st.fallbacks > 0 && served.contains_key("Through"), "{served:?} {st:?}");
    assert!(kept > 0, "the lenders, full of dirty pages, kept them when making room");
    let (st, served, _) = round_trip("through", WritePolicy::WriteThrough, 32);
    assert_eq!((served.get("Through"), st.writes_dirty, st.cleaned), (Some(&512), 0, 0));
}

/// A lender stops after write-back writes were acknowledged: every block reads back from
/// the other copies, and the flush writes every acknowledged byte to the server's file.
fn a_lender_dies() {
    let (srv, block) = serve("one-dies");
    let gms = Cluster::new(3, 24, GmsConfig::default()).expect("cluster");
    let cfg = Config { space: 79, clean_at: 200, ..Config::DEFAULT };
    let mut v = CachedVolume::new(gms, 0, block, cfg).expect("cached volume");
    let blocks: Vec<u64> = (0..20).map(|b| b * 11 % BLOCKS).collect();
    let data: Vec<Vec<u8>> = blocks.iter().map(|&b| block_data(b, 9)).collect();
    let writes: Vec<(u64, &[u8])> = blocks.iter().zip(&data).map(|(&b, d)| (b, &d[..])).collect();
    for r in v.write_many(&writes).expect("writes") {
        assert_eq!(r, gms::cached::Served::Dirty);
    }
    assert_eq!(v.dirty(), blocks.len(), "acknowledged, none written to the server yet");
    let before = std::fs::read(&srv.file).unwrap();
    assert!(before.iter().all(|&b| b == 0), "the server's file is untouched before the flush");
    // Each block's two copies are on the two lenders, one each; the lender holding more
    // first copies dies.
    let holds = |v: &CachedVolume, n: usize, b: u64, k: u8| {
        v.gms.ports[n].node.held(&gms::replica::replica(PageId::new(79, b), k)).is_some()
    };
    for &b in &blocks {
        let on = |n| (holds(&v, n, b, 0), holds(&v, n, b, 1));
        assert!(matches!((on(1), on(2)), ((true, false), (false, true)) | ((false, true), (true, false))), "block {b}");
    }
    let firsts = |n| blocks.iter().filter(|&&b| holds(&v, n, b, 0)).count();
    let dead = if firsts(1) >= firsts(2) { 1 } else { 2 };
    v.gms.kill(dead);
    for (&b, d) in blocks.iter().zip(&data).step_by(3) {
        let (got, served) = v.read(b).expect("a dirty block with a live copy reads");
        assert!(got == *d, "block {b} read back wrong after lender {dead} died ({served:?})");
    }
    v.flush().expect("the flush writes every acknowledged block");
    let bytes = std::fs::read(&srv.file).unwrap();
    for (&b, d) in blocks.iter().zip(&data) {
        let at = (b * 4096) as usize;
        assert!(bytes[at..at + 4096] == d[..], "block {b} on the server's disk is wrong");
    }
    let st = v.stats();
    eprintln!("one lender died: {st:?}");
    assert_eq!((st.lost, v.dirty(), st.cleaned), (0, 0, blocks.len() as u64), "{st:?}");
    assert!(st.from_spare > 0, "some first copies were on the dead lender: {st:?}");
    // With one lender left a write-back write cannot get its two copies: it goes through.
    let again = block_data(3, 10);
    assert_eq!(v.write(3, &again).expect("write"), gms::cached::Served::Through);
    assert_eq!(v.stats().short_copies, 1);
    v.flush().expect("flush");
    assert!(std::fs::read(&srv.file).unwrap()[3 * 4096..4 * 4096] == again[..]);
}

/// Write-back pages whose lenders all die: a read of one fails (lost or unreachable),
/// never returning the server's older block, and so does the flush.
fn lenders_die() {
    let (_srv, block) = serve("die");
    let gms = Cluster::new(3, 24, GmsConfig::default()).expect("cluster");
    let cfg = Config { space: 78, clean_at: 200, ..Config::DEFAULT };
    let mut v = CachedVolume::new(gms, 0, block, cfg).expect("cached volume");
    for b in 0..8 {
        assert_eq!(v.write(b, &block_data(b, 5)).expect("write"), gms::cached::Served::Dirty);
    }
    v.gms.kill(1);
    v.gms.kill(2);
    for b in 0..8 {
        let e = v.read(b).expect_err("a dirty block whose lender died is no read");
        let s = e.to_string();
        assert!(s.contains("gone") || s.contains("did not answer"), "block {b}: {s}");
    }
    assert!(v.flush().is_err(), "the flush reports the lost pages");
    // Each page was found lost (by the cleaning the deaths started, or by its read) and
    // every read after that counts again.
    let lost = v.stats().lost;
    assert!((8..=16).contains(&lost), "{:?}", v.stats());
    assert_eq!(v.lost(), 8);
}

#[test]
fn write_back_write_through_and_pressure_reach_the_disk() {
    trapeze_node::gms::on_big_stack(policies).unwrap();
}

#[test]
fn a_lender_that_dies_after_write_back_acks_loses_nothing() {
    trapeze_node::gms::on_big_stack(a_lender_dies).unwrap();
}

#[test]
fn dirty_pages_of_dead_lenders_are_lost_never_read_stale() {
    trapeze_node::gms::on_big_stack(lenders_die).unwrap();
}
