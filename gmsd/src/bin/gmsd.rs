// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd`: one Global Memory Service node as a process — a virtual NIC on a UDP or
//! raw-Ethernet link, its
//! firmware driven inline, a memory budget, heartbeats to the peers and a control socket.

use clap::Parser;
use gmsd::client::default_socket;
use gmsd::daemon::{Daemon, Options, IDLE_SPIN, MAX_BUDGET_MB};
use gmsd::link::{parse_peers, LinkAddr};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use trapeze_node::gms::{default_dir_entries, default_replicas, MAX_REPLICAS};
use trapeze_vnic::link::backend::BackendSpec;

#[derive(Parser)]
#[command(group(clap::ArgGroup::new("medium").required(true).multiple(false)))]
#[command(
    name = "gmsd",
    version,
    about = "A Global Memory Service node daemon on a virtual NIC over UDP or raw Ethernet",
    after_help = "Stop it with SIGINT or SIGTERM (its control socket is removed). Talk to it with `gms`. \
                  Logs go to stderr (RUST_LOG sets the level, default info)."
)]
struct Args {
    /// This node's id (0-63), unique in the cluster.
    #[arg(long)]
    node: u16,
    /// The link's local UDP address, e.g. 127.0.0.1:7000 (heartbeats ride the link); the
    /// same as --link udp:IP:PORT. Give this or --link.
    #[arg(long, group = "medium", value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// The link: ether:IFNAME for raw Ethernet frames (ethertype 0x88B5) on that interface
    /// of this network namespace (needs root or CAP_NET_RAW; an MTU of 9000 carries an
    /// 8 KiB page in one frame), or udp:IP:PORT (as --listen).
    #[arg(long, group = "medium", value_name = "SPEC")]
    link: Option<BackendSpec>,
    /// Another node, repeated for each peer (at most 15): ID=IP:PORT (its --listen address)
    /// on a UDP link, ID=MAC (its interface's address, e.g. 1=02:00:00:00:00:01) on
    /// --link ether:IFNAME.
    #[arg(long = "peer", value_name = "ID=ADDR")]
    peers: Vec<String>,
    /// Memory this node lends to GMS, in MiB of 8 KiB pages (1-65536). The frame region
    /// and the page-frame directory are sized for it at start-up; memory is used as pages
    /// arrive.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUDGET_MB))]
    budget_mb: u64,
    /// The pages this node can be the directory node for, in MiB of 8 KiB pages (live
    /// entries and tombstones; 1-131072) [default: twice --budget-mb, at least 64].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=2 * MAX_BUDGET_MB))]
    directory_mb: Option<u64>,
    /// Control socket [default: $XDG_RUNTIME_DIR/trapeze/gmsd-N.sock, or
    /// /tmp/trapeze-UID/gmsd-N.sock without XDG_RUNTIME_DIR].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Heartbeat interval in ms (1-60000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    heartbeat_ms: u64,
    /// A peer silent this long (ms) is declared failed; at least 2 × --heartbeat-ms
    /// (at most 3600000). With kernel nodes in the cluster (a heartbeat a second) give 3000 or more.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(2..=3_600_000))]
    dead_after_ms: u64,
    /// A getpage/putpage unanswered after this long (ms) completes as a miss/failure (1-60000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    op_timeout_ms: u64,
    /// Pages in the local page cache that reads (not network-only gets) go through; 0: off
    /// (at most 65536 = 512 MiB, all a 16-node cluster holds).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=65_536))]
    cache_pages: u64,
    /// How long the loop spins, in µs, after its last work (a client's request, a message
    /// other than a heartbeat or a global-LRU message) before it sleeps in poll(2)
    /// (0-1000000). Spinning saves a wakeup per message on a core of its own; on a
    /// machine with fewer cores than busy processes, spinning daemons take turns by the
    /// scheduler's history of each, and a short spin or 0 is steadier.
    #[arg(long, default_value_t = IDLE_SPIN.as_micros() as u64, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    idle_spin_us: u64,
    /// Client operations in flight at most (1-32). Every peer's putpages land in this node's
    /// 32-entry NIC receive ring: keep (nodes - 1) × window well below 32.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=32))]
    window: u64,
    /// Faults and wire delay on this node's link sends, e.g. delay=20us (a modelled
    /// one-way wire) or drop=0.1%,seed=7; none: no faults.
    #[arg(long, default_value = "none")]
    link_faults: trapeze_vnic::link::FaultConfig,
    /// Cluster key file (32 bytes, owned by this user, mode 0600; make one with
    /// `trapeze-nic keygen PATH`): every link packet carries a MAC under it and packets
    /// whose MAC fails are dropped. Every node of the cluster needs the same key; without
    /// it the link is unauthenticated.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Copies of each page put through this daemon, each on a different node other than
    /// this one (1-4); a put is answered stored only when every copy is, and a read falls
    /// back to the next copy when one misses. Needs at least that many peers
    /// [default: 2 with two or more peers, else 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=MAX_REPLICAS as i64))]
    replicas: Option<u8>,
    /// Pages of each volume this daemon writes (a client's `VOL:PAGE` is page PAGE of
    /// volume VOL; the first put into a volume opens it here, and a volume has one writer).
    /// Its record of what was written takes about 40 bytes per page and copy here, and its
    /// floor map 8 bytes per page and copy in the cluster, stored when the volume is made.
    #[arg(long, default_value_t = gmsd::volumes::VOLUME_PAGES,
          value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    volume_pages: u64,
}

/// 8 KiB pages in `mb` MiB (`mb` is bounded by clap, so this cannot overflow).
fn mb_pages(mb: u64) -> usize {
    ((mb << 20) / trapeze_node::rpc::FRAME_BYTES as u64) as usize
}

/// The link end from --listen or --link (clap makes sure exactly one is given).
fn link_addr(a: &Args) -> LinkAddr {
    match (&a.listen, &a.link) {
        (Some(addr), _) | (None, Some(BackendSpec::Udp(addr))) => LinkAddr::Udp(*addr),
        (None, Some(BackendSpec::Ether(ifname))) => LinkAddr::Ether(ifname.clone()),
        (None, None) => unreachable!("clap requires --listen or --link"),
    }
}

fn main() {
    // Colour only on a terminal: a log file or a pipe gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let a = Args::parse();
    let key = match a.key.as_deref().map(trapeze_vnic::key::ClusterKey::load).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("gmsd: --key: {e:#}");
            std::process::exit(2);
        }
    };
    let link = link_addr(&a);
    let peers = match parse_peers(&link, &a.peers) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gmsd: {e}");
            std::process::exit(2);
        }
    };
    let replicas = a.replicas.unwrap_or_else(|| default_replicas(a.peers.len() + 1));
    let opts = Options {
        replicas,
        volume_pages: a.volume_pages,
        node: a.node,
        link,
        peers,
        budget_pages: mb_pages(a.budget_mb),
        dir_entries: a.directory_mb.map_or_else(|| default_dir_entries(mb_pages(a.budget_mb)), mb_pages),
        socket: a.socket.unwrap_or_else(|| default_socket(a.node)),
        heartbeat: Duration::from_millis(a.heartbeat_ms),
        dead_after: Duration::from_millis(a.dead_after_ms),
        op_timeout: Duration::from_millis(a.op_timeout_ms),
        cache_pages: a.cache_pages as usize,
        window: a.window as usize,
        idle_spin: Duration::from_micros(a.idle_spin_us),
        faults: a.link_faults,
        key,
    };
    let stop = Arc::new(AtomicBool::new(false));
    // SIGINT/SIGTERM end the loop, so the control socket file is removed on the way out.
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed)) {
        eprintln!("gmsd: cannot handle SIGINT/SIGTERM: {e}");
    }
    let result = Daemon::open(opts).and_then(|mut d| {
        println!("gmsd: node {} on link {}, control socket {}", d.opts.node, d.medium, d.control.path().display());
        if d.opts.peers.is_empty() {
            tracing::warn!(
                "no --peer given: node {} is alone, and GMS keeps each page on another node, so every put through \
                 this daemon is refused (no live node to store on); give --peer ID=ADDR for each other node",
                d.opts.node
            );
        }
        d.run(&stop)
    });
    if let Err(e) = result {
        eprintln!("gmsd: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option says what it is for.
    #[test]
    fn every_option_has_help() {
        let cmd = Args::command();
        cmd.clone().debug_assert();
        let missing: Vec<String> = cmd
            .get_arguments()
            .filter(|a| !["help", "version"].contains(&a.get_id().as_str()) && a.get_help().is_none())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(missing.is_empty(), "no help: {missing:?}");
    }
}
