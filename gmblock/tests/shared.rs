// SPDX-License-Identifier: GPL-2.0-only
//! One volume shared by several clients (issue 35's shared volume, over the UDP link in
//! threads of one process): readers, each a station of its own, read the whole volume at
//! once while the server's disk has reads of all of them in flight, and every byte is
//! right; a writer's flushed data is what every reader reads next, one reading it while the
//! others' streams of requests run.

mod support;

use gmblock::client::Client;
use gmblock::proto::*;
use gmblock::server::ServerConfig;
use std::net::SocketAddr;
use support::{free_port, server_station, station, volume};

const SERVER: u16 = 1;
const WRITER: u16 = 2;
const READERS: [u16; 3] = [3, 4, 5];
const BYTES: u64 = 4 << 20;

fn pattern(seed: u8, at: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((at + i).wrapping_mul(2654435761) >> 7) as u8 ^ seed).collect()
}

fn client(node: u16, listen: SocketAddr, server: SocketAddr) -> Client {
    Client::connect(station(node, listen, vec![(SERVER, server)], 0), SERVER, 16).expect("client connects")
}

/// The whole volume through a stream of 256 KiB requests, compared with `seed`'s pattern.
fn read_all(c: &mut Client, seed: u8, who: u16) {
    const REQ: usize = 256 << 10;
    let mut next = (0..BYTES).step_by(REQ).map(|at| (at, vec![0u8; REQ]));
    let mut wrong = Vec::new();
    c.read_stream(
        || next.next(),
        |at, buf, outcome| {
            outcome.unwrap_or_else(|e| panic!("reader {who}: {REQ} bytes at {at}: {e:#}"));
            if buf != pattern(seed, at, REQ) {
                wrong.push(at);
            }
        },
    );
    assert!(wrong.is_empty(), "reader {who}: requests at {wrong:?} read back wrong (seed {seed})");
}

#[test]
fn readers_share_a_volume_and_see_the_writers_flushed_data() {
    let file = volume("shared", BYTES);
    let addrs: Vec<(u16, SocketAddr)> = std::iter::once(WRITER).chain(READERS).map(|n| (n, free_port())).collect();
    let mut srv = support::serve(ServerConfig {
        station: server_station(SERVER, addrs.clone()),
        export: file.clone(),
        read_only: false,
        path: DataPath::Direct,
        model: None,
    });
    let mut writer = client(WRITER, addrs[0].1, srv.addr);
    let mut readers: Vec<(u16, Client)> = addrs[1..].iter().map(|&(n, a)| (n, client(n, a, srv.addr))).collect();
    for seed in [0x5a, 0xc3] {
        for at in (0..BYTES).step_by(MAX_REQUEST_BYTES as usize) {
            writer.write(at, &pattern(seed, at, MAX_REQUEST_BYTES as usize)).unwrap();
        }
        writer.flush().unwrap();
        std::thread::scope(|s| {
            for (who, r) in readers.iter_mut() {
                let who = *who;
                s.spawn(move || read_all(r, seed, who));
            }
        });
    }
    let rep = srv.stop();
    assert_eq!(rep.stats.errors, 0, "{rep:?}");
    assert!(rep.stats.most_reads_in_flight > 1, "the disk had several reads in flight at once: {rep:?}");
    assert_eq!(rep.stats.bytes_read, 2 * READERS.len() as u64 * BYTES, "every reader read the volume twice");
    std::fs::remove_file(&file).unwrap();
}
