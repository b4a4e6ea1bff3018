// SPDX-License-Identifier: GPL-2.0-only
//! The GMS-cached sides of `bench block`: `--cached-blocks` 4 KiB writes to a gmblockd
//! with a modelled disk (read-write), then a flush, through
//! - **block**: gmblock's own client, 64 blocks per call (the baseline: the writes without
//!   GMS, in the client's pipeline of 8 KiB chunks),
//! - **through**: the GMS-cached volume in write-through (the block write, then a clean
//!   put),
//! - **back**: the GMS-cached volume in write-back (dirty puts of two copies on distinct
//!   lenders; the flush writes every page to the server, then its `FLUSH`).
//!
//! The cached sides hand over 64 writes at a time (`write_many`: the policy's commands
//! for all of them in flight together). Per side: `ack_mb_s`, the write bytes over the time until the last write was
//! acknowledged, and `flushed_mb_s`, over the time until the flush was. The GMS cluster is
//! three in-process nodes whose two lenders hold every block. After each side the server's
//! file is checked byte for byte.

use super::{make_file, start_gmblockd, udp_port, Reaped};
use anyhow::ensure;
use gmblock::cached::CachedVolume;
use gmblock::client::Client;
use gmblock::station::{Placement, StationConfig};
use gms::cached::Config;
use gms::prelude::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes handed over at once (the cached volume keeps up to 30 of them in flight; the
/// client, its window of 8 chunks).
const BATCH: usize = 64;

/// How a cached side writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Block,
    Through,
    Back,
}

/// One cached side's figures.
#[derive(Clone, Copy, Debug)]
pub struct Cached {
    pub ack_mb_s: f64,
    pub flushed_mb_s: f64,
}

fn data(b: u64, salt: u8) -> Vec<u8> {
    (0..4096u64).map(|i| ((b * 4096 + i).wrapping_mul(0x9e37_79b1) >> 13) as u8 ^ salt).collect()
}

/// A read-write gmblockd on `file` with a modelled disk, for client node 100 at `client`.
fn gmblockd_rw(file: &Path, client: SocketAddr, mbps: f64, us: u64) -> anyhow::Result<(Reaped, SocketAddr)> {
    start_gmblockd(1, (100, client), |c| {
        c.args(["--model-mbps", &mbps.to_string(), "--model-latency-us", &us.to_string()]).arg("--export").arg(file)
    })
}

/// Run side `way`: `blocks` writes and a flush, timed; the file checked after.
pub fn run(way: Way, dir: &Path, blocks: u64, mbps: f64, us: u64, salt: u8) -> anyhow::Result<Cached> {
    let dir: PathBuf = dir.to_path_buf();
    trapeze_node::gms::on_big_stack(move || side(way, &dir, blocks, mbps, us, salt))?
}

fn side(way: Way, dir: &Path, blocks: u64, mbps: f64, us: u64, salt: u8) -> anyhow::Result<Cached> {
    let mib = (blocks * 4096).div_ceil(1 << 20);
    let file = make_file(&dir.join("cached"), mib)?;
    let me = udp_port();
    let (_server, addr) = gmblockd_rw(&file, me, mbps, us)?;
    let cfg = StationConfig {
        node: 100,
        listen: me,
        peers: vec![(1, addr)],
        region_bytes: 0,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    };
    let mut c = Client::connect(cfg, 1, 8)?;
    let bytes = (blocks * 4096) as f64;
    let figures = match way {
        Way::Block => {
            // The client's own pipeline: BATCH blocks per call, its window of chunks in
            // flight (8 KiB each: two blocks per call to the server).
            let all: Vec<u8> = (0..blocks).flat_map(|b| data(b, salt)).collect();
            let t = Instant::now();
            for at in (0..all.len()).step_by(BATCH * 4096) {
                let end = (at + BATCH * 4096).min(all.len());
                c.write(at as u64, &all[at..end])?;
            }
            let ack = t.elapsed().as_secs_f64();
            c.flush()?;
            Cached { ack_mb_s: bytes / 1e6 / ack, flushed_mb_s: bytes / 1e6 / t.elapsed().as_secs_f64() }
        }
        Way::Through | Way::Back => {
            let writes = if way == Way::Back { WritePolicy::WriteBack } else { WritePolicy::WriteThrough };
            let per_lender = blocks as usize + 64;
            let gms = trapeze_node::gms::Cluster::new(3, per_lender, GmsConfig::default())?;
            let cfg = Config { space: 90, writes, clean_at: 256, ..Config::DEFAULT };
            let mut v = CachedVolume::new(gms, 0, c, cfg)?;
            let all: Vec<Vec<u8>> = (0..blocks).map(|b| data(b, salt)).collect();
            let t = Instant::now();
            for batch in (0..blocks).collect::<Vec<_>>().chunks(BATCH) {
                let writes: Vec<(u64, &[u8])> = batch.iter().map(|&b| (b, &all[b as usize][..])).collect();
                v.write_many(&writes)?;
            }
            let ack = t.elapsed().as_secs_f64();
            v.flush()?;
            ensure!(v.stats().lost == 0 && v.dirty() == 0, "cached side: {:?}", v.stats());
            eprintln!("cached {way:?}: {:?}", v.stats());
            Cached { ack_mb_s: bytes / 1e6 / ack, flushed_mb_s: bytes / 1e6 / t.elapsed().as_secs_f64() }
        }
    };
    let on_disk = std::fs::read(&file)?;
    for b in 0..blocks {
        let at = (b * 4096) as usize;
        ensure!(on_disk[at..at + 4096] == data(b, salt)[..], "{way:?}: block {b} on the server's disk is wrong");
    }
    Ok(figures)
}
