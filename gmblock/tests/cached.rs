// SPDX-License-Identifier: GPL-2.0-only
//! A gmblock server's volume cached in a GMS cluster too small to hold it (write-back,
//! `gms::cached` over `gmblock::cached`): every block written reads back right, and after
//! a flush the server's file holds every byte; no dirty page was ever lost.

use gmblock::cached::CachedVolume;
use gmblock::client::Client;
use gmblock::proto::DataPath;
use gmblock::server::{Server, ServerConfig};
use gmblock::station::{Placement, StationConfig};
use gms::cached::{Config, Served};
use gms::prelude::*;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use trapeze_node::gms::Cluster;

const CLIENT: u16 = 100;
const SERVER: u16 = 1;
const BLOCKS: u64 = 256;

fn free_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn block_data(b: u64, round: u8) -> Vec<u8> {
    (0..4096u64).map(|i| ((b * 4096 + i).wrapping_mul(2654435761) >> 11) as u8 ^ round).collect()
}

fn write_back_under_pressure() {
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gmblock-cached-{}", std::process::id()));
    std::fs::File::create(&file).unwrap().set_len(BLOCKS * 4096).unwrap();
    let (addr, me) = (free_port(), free_port());
    let station = |node, listen, peer: (u16, SocketAddr)| StationConfig {
        node,
        listen,
        peers: vec![peer],
        region_bytes: 8 << 20,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    };
    let cfg = ServerConfig {
        station: station(SERVER, addr, (CLIENT, me)),
        export: file.clone(),
        read_only: false,
        path: DataPath::ViaRam,
        model: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let s = stop.clone();
    let server = std::thread::spawn(move || {
        let mut server = Server::open(cfg).expect("server opens");
        tx.send(()).unwrap();
        server.run(&s);
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("server up");
    let block = Client::connect(station(CLIENT, me, (SERVER, addr)), SERVER, 8).expect("client connects");

    // Three GMS nodes of 24 pages each: the two lenders hold 48 of the 256 blocks.
    let gms = Cluster::new(3, 24, GmsConfig::default()).expect("cluster");
    let cfg = Config { space: 77, clean_at: 32, ..Config::DEFAULT };
    let mut v = CachedVolume::new(gms, 0, block, cfg).expect("cached volume");
    let mut served = std::collections::HashMap::new();
    for round in 0..2u8 {
        for b in 0..BLOCKS {
            let r = v.write(b, &block_data(b, round)).expect("write");
            *served.entry(format!("{r:?}")).or_insert(0) += 1;
        }
    }
    assert!(served.contains_key(&format!("{:?}", Served::Dirty)), "some writes went back dirty: {served:?}");
    for b in (0..BLOCKS).step_by(7) {
        let (data, _) = v.read(b).expect("read");
        assert!(data == block_data(b, 1), "block {b} read back wrong before the flush");
    }
    v.flush().expect("flush");
    assert_eq!(v.dirty(), 0, "a flush leaves nothing dirty");
    let bytes = std::fs::read(&file).unwrap();
    for b in 0..BLOCKS {
        let at = (b * 4096) as usize;
        assert!(bytes[at..at + 4096] == block_data(b, 1)[..], "block {b} on the server's disk is wrong");
    }
    let st = v.stats();
    let kept: u64 = v.gms.ports.iter().map(|p| p.lru.stats.dirty_kept).sum();
    eprintln!("served {served:?}; stats {st:?}; dirty pages the LRU kept: {kept}");
    assert_eq!(st.lost, 0, "no dirty page was lost");
    assert!(st.cleaned > 0, "pressure cleaned dirty pages");
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let _ = std::fs::remove_file(&file);
}

#[test]
fn write_back_under_gms_pressure_reaches_the_disk() {
    trapeze_node::gms::on_big_stack(write_back_under_pressure).unwrap();
}
