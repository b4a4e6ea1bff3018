// SPDX-License-Identifier: GPL-2.0-only
//! `gmblockd`: export a file or block device over NetRPC on this process's own virtual
//! NIC (crate doc: the two data paths).

use clap::Parser;
use gmblock::model::DiskModel;
use gmblock::proto::DataPath;
use gmblock::server::{Server, ServerConfig};
use gmblock::station::{Placement, StationConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Serve a file or block device to gmblock clients.
#[derive(Parser)]
#[command(name = "gmblockd")]
struct Args {
    /// This server's node id on the link.
    #[arg(long)]
    node: u16,
    /// The UDP address of this server's link.
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// A client allowed on the link: ID=IP:PORT (repeatable).
    #[arg(long = "peer", value_name = "ID=IP:PORT", value_parser = gmblock::parse_peer)]
    peers: Vec<(u16, SocketAddr)>,
    /// The file or block device to export (opened with O_DIRECT).
    #[arg(long)]
    export: PathBuf,
    /// Where blocks go between disk and link: NIC-local memory or host RAM.
    #[arg(long, value_enum, default_value = "direct")]
    path: DataPath,
    /// Refuse writes and trims.
    #[arg(long)]
    read_only: bool,
    /// Frame region size in MiB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    region_mb: u64,
    /// Model the disk's throughput (MB/s): reads and writes take as long as such a disk
    /// would, one at a time (so several servers on one machine behave like several disks).
    #[arg(long, value_name = "MB/S", value_parser = gmblock::model::parse_mbps)]
    model_mbps: Option<f64>,
    /// Model the disk's latency per request (µs), with or without --model-mbps.
    #[arg(long, value_name = "US", value_parser = gmblock::model::parse_latency_us)]
    model_latency_us: Option<u64>,
    /// On exit, write the server's report (counters, CPU time, NIC DMA bytes) here as JSON.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let station = StationConfig {
        node: a.node,
        listen: a.listen,
        peers: a.peers,
        region_bytes: (a.region_mb << 20) as usize,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    };
    let model = match (a.model_mbps, a.model_latency_us) {
        (None, None) => None,
        (mbps, us) => Some(DiskModel::new(mbps, us.unwrap_or(0)).map_err(anyhow::Error::msg)?),
    };
    let cfg = ServerConfig { station, export: a.export, read_only: a.read_only, path: a.path, model };
    let mut server = Server::open(cfg)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::Relaxed))?;
    let r = server.report();
    println!("gmblockd ready: node {} on {}, {} bytes, path {:?}", a.node, server.station.medium, r.size, r.path);
    server.run(&stop);
    let report = server.report();
    if let Some(p) = a.stats_json {
        std::fs::write(&p, serde_json::to_vec_pretty(&report)?)?;
    }
    eprintln!("gmblockd: {}", serde_json::to_string(&report)?);
    Ok(())
}
