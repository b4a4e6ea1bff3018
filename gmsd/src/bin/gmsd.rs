// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd`: one Global Memory Service node as a process — a virtual NIC on a UDP link, its
//! firmware driven inline, a memory budget, heartbeats to the peers and a control socket.

use clap::Parser;
use gmsd::client::default_socket;
use gmsd::daemon::{Daemon, Options};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use trapeze_vnic::link::backend::parse_peer;

#[derive(Parser)]
#[command(name = "gmsd", about = "A Global Memory Service node daemon on a virtual NIC over UDP")]
struct Args {
    /// This node's id (0-65535), unique in the cluster.
    #[arg(long)]
    node: u16,
    /// The link's local UDP address, e.g. 127.0.0.1:7000 (heartbeats ride the link).
    #[arg(long)]
    listen: SocketAddr,
    /// Another node: ID=IP:PORT (its --listen address); repeat for each peer.
    #[arg(long = "peer", value_parser = peer)]
    peers: Vec<(u16, SocketAddr)>,
    /// Memory this node lends to GMS, in MiB (8 KiB pages).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    budget_mb: u64,
    /// Control socket (default $XDG_RUNTIME_DIR/trapeze/gmsd-N.sock or /tmp/trapeze-UID/gmsd-N.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Heartbeat interval in ms.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_ms: u64,
    /// A peer silent this long (ms) is declared failed.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    dead_after_ms: u64,
    /// A getpage/putpage unanswered after this long (ms) completes as a miss/failure.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    op_timeout_ms: u64,
    /// Pages in the local page cache that reads (not network-only gets) go through; 0: off.
    #[arg(long, default_value_t = 256)]
    cache_pages: usize,
    /// Client operations in flight at most. Every peer's putpages land in this node's
    /// 32-entry NIC receive ring: keep (nodes - 1) × window well below 32.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Faults and wire delay on this node's link sends, e.g. delay=20us (a modelled
    /// one-way wire) or drop=0.1%,seed=7 (default none).
    #[arg(long, default_value = "none")]
    link_faults: trapeze_vnic::link::FaultConfig,
}

fn peer(s: &str) -> Result<(u16, SocketAddr), String> {
    parse_peer(s).map_err(|e| e.0)
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    if a.budget_mb > (u64::MAX >> 20) {
        eprintln!("gmsd: --budget-mb {} is too large", a.budget_mb);
        std::process::exit(2);
    }
    let opts = Options {
        node: a.node,
        listen: a.listen,
        peers: a.peers,
        budget_pages: ((a.budget_mb << 20) / trapeze_vnic::rpc::FRAME_BYTES as u64) as usize,
        socket: a.socket.unwrap_or_else(|| default_socket(a.node)),
        heartbeat: Duration::from_millis(a.heartbeat_ms),
        dead_after: Duration::from_millis(a.dead_after_ms),
        op_timeout: Duration::from_millis(a.op_timeout_ms),
        cache_pages: a.cache_pages,
        window: a.window,
        link: a.link_faults,
    };
    let stop = Arc::new(AtomicBool::new(false));
    // SIGINT/SIGTERM end the loop, so the control socket file is removed on the way out.
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed)) {
        eprintln!("gmsd: cannot handle SIGINT/SIGTERM: {e}");
    }
    let result = Daemon::open(opts).and_then(|mut d| {
        println!(
            "gmsd: node {} listening on {}, control socket {}",
            d.opts.node,
            d.opts.listen,
            d.control.path().display()
        );
        d.run(&stop)
    });
    if let Err(e) = result {
        eprintln!("gmsd: {e:#}");
        std::process::exit(1);
    }
}
