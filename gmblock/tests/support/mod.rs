// SPDX-License-Identifier: GPL-2.0-only
//! What the in-process gmblock tests share: free UDP ports, volume files in the target
//! directory, stations on the UDP link, and servers run in threads of the test.

use gmblock::server::{Report, Server, ServerConfig};
use gmblock::station::{Placement, StationConfig};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

pub fn free_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A file of `bytes` in the target directory (a disk file system: O_DIRECT works there).
pub fn volume(name: &str, bytes: u64) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gmblock-{name}-{}", std::process::id()));
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

/// Station `node` listening on `listen` with `peers` (id, address), a region of
/// `region_bytes` in host RAM and calls that give up after 2 s.
pub fn station(node: u16, listen: SocketAddr, peers: Vec<(u16, SocketAddr)>, region_bytes: usize) -> StationConfig {
    StationConfig {
        node,
        listen,
        peers,
        region_bytes,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    }
}

/// A server's station: `node` on a free port with `peers` and an 8 MiB region.
pub fn server_station(node: u16, peers: Vec<(u16, SocketAddr)>) -> StationConfig {
    station(node, free_port(), peers, 8 << 20)
}

/// A server running in a thread of the test; stopped when dropped.
pub struct Running {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Report>>,
}

impl Running {
    /// Stop the server and take its report.
    pub fn stop(&mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().expect("running").join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A server thread that panicked has failed its test already.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server and its volume file, removed when done.
#[allow(dead_code)] // udp.rs keeps its files itself (some are shared by two servers)
pub struct Served {
    pub server: Running,
    pub file: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Open `cfg`'s server and run it in a thread; returns once it is serving.
pub fn serve(cfg: ServerConfig) -> Running {
    let addr = cfg.station.listen;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut server = Server::open(cfg).expect("server opens");
        tx.send(()).unwrap();
        server.run(&s);
        server.report()
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("server up");
    Running { addr, stop, thread: Some(thread) }
}
