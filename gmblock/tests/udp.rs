// SPDX-License-Identifier: GPL-2.0-only
//! A gmblock server and clients over the UDP link, in threads of one process: data
//! written through each data path reads back intact (and is on the disk), the NIC's DMA
//! counters tell the paths apart, and every bad request gets its clear error while the
//! server keeps serving.

mod support;

use gmblock::client::Client;
use gmblock::proto::*;
use gmblock::server::{Report, ServerConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use support::{free_port, server_station, station, volume, Running};

const SERVER: u16 = 1;

/// Start a server on `export` for clients `clients` (id, address).
fn serve(export: &Path, path: DataPath, read_only: bool, clients: &[(u16, SocketAddr)]) -> Running {
    let station = server_station(SERVER, clients.to_vec());
    support::serve(ServerConfig { station, export: export.to_path_buf(), read_only, path, model: None })
}

fn client(node: u16, listen: SocketAddr, server: SocketAddr) -> Client {
    Client::connect(station(node, listen, vec![(SERVER, server)], 0), SERVER, 16).expect("client connects")
}

fn pattern(seed: u8, at: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((at + i).wrapping_mul(2654435761) >> 7) as u8 ^ seed).collect()
}

/// Requests of every chunk shape: one block, several 4 KiB pieces, odd tails, 1 MiB.
const SHAPES: [(u64, usize); 6] =
    [(0, 4096), (8192, 12288), (65536, 36864), (1 << 20, 1 << 20), (3 << 20, (1 << 20) - 4096), (5 << 20, 65536)];

fn round_trip(path: DataPath) -> Report {
    let file = volume(&format!("{path:?}"), 8 << 20);
    let me = free_port();
    let mut srv = serve(&file, path, false, &[(2, me)]);
    let mut c = client(2, me, srv.addr);
    assert_eq!((c.info.size, c.info.path, c.info.read_only), (8 << 20, path, false));
    for (k, &(at, len)) in SHAPES.iter().enumerate() {
        c.write(at, &pattern(k as u8, at, len)).unwrap();
    }
    c.flush().unwrap();
    for (k, &(at, len)) in SHAPES.iter().enumerate() {
        let mut got = vec![0u8; len];
        c.read(at, &mut got).unwrap();
        assert!(got == pattern(k as u8, at, len), "{path:?}: {len} bytes at {at} read back wrong");
    }
    // What the server acknowledged and flushed is in the file.
    let disk = std::fs::read(&file).unwrap();
    for (k, &(at, len)) in SHAPES.iter().enumerate() {
        assert!(disk[at as usize..at as usize + len] == pattern(k as u8, at, len), "{path:?}: not on disk at {at}");
    }
    // Trim: zeros after.
    c.trim(1 << 20, 65536).unwrap();
    let mut got = vec![1u8; 65536];
    c.read(1 << 20, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0), "{path:?}: trimmed range reads back zeros");
    let r = srv.stop();
    std::fs::remove_file(&file).unwrap();
    r
}

#[test]
fn the_direct_path_serves_verified_data_without_touching_host_ram() {
    let r = round_trip(DataPath::Direct);
    let moved: u64 = SHAPES.iter().map(|s| 2 * s.1 as u64).sum::<u64>() + 65536;
    assert_eq!(r.nic_bytes.host_ram, 0, "direct: the NIC moved no byte through host RAM ({r:?})");
    assert_eq!(r.nic_bytes.nic_local, moved, "every byte in and out went through NIC-local memory");
    assert_eq!(r.stats.errors, 0);
}

#[test]
fn the_via_ram_path_serves_verified_data_through_host_ram() {
    let r = round_trip(DataPath::ViaRam);
    let moved: u64 = SHAPES.iter().map(|s| 2 * s.1 as u64).sum::<u64>() + 65536;
    assert_eq!((r.nic_bytes.host_ram, r.nic_bytes.nic_local), (moved, 0), "via RAM: every byte crossed host RAM");
}

fn remote(e: Result<netrpc::prelude::Reply<u64>, netrpc::prelude::RpcError>) -> BlockError {
    match e {
        Err(netrpc::prelude::RpcError::Remote(c)) => BlockError::from_code(c).expect("a block error"),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[test]
fn bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let size = 1u64 << 20;
    let file = volume("bad", size);
    let (a, b) = (free_port(), free_port());
    let mut srv = serve(&file, DataPath::Direct, false, &[(2, a), (3, b)]);
    let mut c = client(2, a, srv.addr);
    let mut other = client(3, b, srv.addr);
    let r = |offset, len| Range { offset, len };
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(size, 4096))), BlockError::PastEnd);
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(size - 4096, 8192))), BlockError::PastEnd);
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(u64::MAX - 4095, 4096))), BlockError::PastEnd);
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(0, 128 << 10))), BlockError::TooLarge);
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(0, 36864))), BlockError::TooLarge, "nine 4 KiB pieces");
    assert_eq!(remote(c.raw_call::<ReadOp>(&r(512, 4096))), BlockError::Misaligned);
    assert_eq!(remote(c.raw_call::<WriteOp>(&r(0, 4096))), BlockError::BadPayload, "a write without data");
    assert_eq!(remote(c.raw_call::<TrimOp>(&r(0, 100))), BlockError::Misaligned);
    // The client checks before sending, with the same words.
    let e = c.read(size, &mut [0u8; 4096]).unwrap_err().to_string();
    assert!(e.contains("past the end of the volume"), "{e}");
    let e = c.write(4096, &[0u8; 100]).unwrap_err().to_string();
    assert!(e.contains("not a multiple of 4096"), "{e}");
    // Still serving both clients.
    other.write(0, &pattern(9, 0, 65536)).unwrap();
    let mut got = vec![0u8; 65536];
    c.read(0, &mut got).unwrap();
    assert!(got == pattern(9, 0, 65536));
    let rep = srv.stop();
    assert_eq!(rep.stats.errors, 8);
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn a_removed_or_shrunk_export_is_an_error_not_wrong_data() {
    let file = volume("gone", 1 << 20);
    let me = free_port();
    let mut srv = serve(&file, DataPath::ViaRam, false, &[(2, me)]);
    let mut c = client(2, me, srv.addr);
    c.write(0, &pattern(3, 0, 8192)).unwrap();
    // Shrunk under the server: a read past the new end is a short read, an I/O error.
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(64 << 10).unwrap();
    let e = c.read(512 << 10, &mut [0u8; 8192]).unwrap_err().to_string();
    assert!(e.contains("I/O error"), "{e}");
    let mut got = vec![0u8; 8192];
    c.read(0, &mut got).unwrap();
    assert!(got == pattern(3, 0, 8192), "what is still there reads back");
    std::fs::remove_file(&file).unwrap();
    let e = c.read(0, &mut got).unwrap_err().to_string();
    assert!(e.contains("exported file was removed"), "{e}");
    let e = c.flush().unwrap_err().to_string();
    assert!(e.contains("exported file was removed"), "{e}");
    let rep = srv.stop();
    assert!(rep.last_error.as_deref().is_some_and(|l| l.contains("shrank")), "{rep:?}");
}

#[test]
fn a_read_only_export_refuses_writes_and_trims() {
    let file = volume("ro", 1 << 20);
    let me = free_port();
    let mut srv = serve(&file, DataPath::Direct, true, &[(2, me)]);
    let mut c = client(2, me, srv.addr);
    assert!(c.info.read_only);
    let e = c.write(0, &[7u8; 4096]).unwrap_err().to_string();
    assert!(e.contains("read-only"), "{e}");
    let e = c.trim(0, 4096).unwrap_err().to_string();
    assert!(e.contains("read-only"), "{e}");
    c.read(0, &mut [0u8; 4096]).unwrap();
    srv.stop();
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn exports_the_server_cannot_serve_are_refused_at_start() {
    let shm = PathBuf::from(format!("/dev/shm/gmblock-test-{}", std::process::id()));
    std::fs::File::create(&shm).unwrap().set_len(1 << 20).unwrap();
    // tmpfs does O_DIRECT since Linux 6.6; before, the refusal says why.
    if let Err(e) = gmblock::disk::Disk::open(&shm, false) {
        assert!(e.to_string().contains("refuses O_DIRECT"), "{e}");
    }
    std::fs::remove_file(&shm).unwrap();
    let tiny = volume("tiny", 100);
    let e = gmblock::disk::Disk::open(&tiny, false).err().expect("too small").to_string();
    assert!(e.contains("smaller than one 4096-byte block"), "{e}");
    std::fs::remove_file(&tiny).unwrap();
    let e = gmblock::disk::Disk::open(Path::new("/proc/self"), true).err().expect("a directory").to_string();
    assert!(e.contains("neither a regular file nor a block device"), "{e}");
}
