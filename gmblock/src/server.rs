// SPDX-License-Identifier: GPL-2.0-only
//! The block server: [`BlockService`] answers the protocol's operations ([`crate::proto`])
//! from a [`Disk`], its blocks moving by `O_DIRECT` between the disk and the frames of
//! its station's region ([`crate::frameio`]) — NIC-local memory on the direct path, host
//! RAM on the via-RAM path — and [`Server`] runs it: one thread polling the station,
//! spinning while there is work and sleeping on the link's socket when idle.
//!
//! A read reply's frames are retired, not freed: they return to the pool once the NIC
//! has sent them. Every bad request gets an error reply and changes nothing.

use crate::disk::{Disk, Kind};
use crate::frameio;
use crate::model::DiskModel;
use crate::proto::*;
use crate::station::{NicBytes, Placement, Station, StationConfig};
use netrpc::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use trapeze_node::rpc::{Frame, Frames, Service};

/// How long the loop spins after its last work before it sleeps on the link.
pub const IDLE_SPIN: Duration = Duration::from_micros(100);

/// What the server counts.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ServerStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub errors: u64,
}

/// The protocol's server stubs over one disk.
pub struct BlockService {
    pub disk: Disk,
    pub path: DataPath,
    pub stats: ServerStats,
    /// When set, reads and writes take as long as this modelled disk would.
    pub model: Option<DiskModel>,
}

impl Service for BlockService {
    const READS_CLOCK: bool = false;

    fn serve(&mut self, inc: &Incoming<'_, Frame>, frames: &mut Frames) -> Action<Frame> {
        let payload = match inc.payload {
            InPayload::Buffer { frame, len } => Some((frame, len)),
            _ => None,
        };
        let arrived = Instant::now();
        let out = self.dispatch(inc, payload, frames);
        if let (Some(m), Ok(Action::Reply { .. }), ReadOp::OP | WriteOp::OP) = (self.model.as_mut(), &out, inc.op) {
            let bytes = inc.decode::<ReadOp>().map_or(0, |r| u64::from(r.len));
            m.serve(arrived, bytes);
        }
        // The stub owns a received buffer: done with it whatever the outcome.
        if let Some((f, _)) = payload {
            frames.release(f);
        }
        out.unwrap_or_else(|e| {
            self.stats.errors += 1;
            Action::Error(e)
        })
    }
}

impl BlockService {
    fn dispatch(
        &mut self,
        inc: &Incoming<'_, Frame>,
        payload: Option<(Frame, u32)>,
        frames: &mut Frames,
    ) -> Result<Action<Frame>, RpcError> {
        if self.disk.removed() {
            return Err(BlockError::Removed.rpc());
        }
        match inc.op {
            InfoOp::OP => {
                let info = Info { size: self.disk.size, path: self.path, read_only: self.disk.read_only };
                Ok(Action::reply(&info, None))
            }
            ReadOp::OP => self.read(inc.decode::<ReadOp>()?, frames).map_err(BlockError::rpc),
            WriteOp::OP => self.write(inc.decode::<WriteOp>()?, payload, frames).map_err(BlockError::rpc),
            FlushOp::OP => {
                inc.decode::<FlushOp>()?;
                self.stats.flushes += 1;
                self.disk.flush().map(|()| Action::reply(&(), None)).map_err(BlockError::rpc)
            }
            TrimOp::OP => {
                let r = inc.decode::<TrimOp>()?;
                check_range(r, self.disk.size, MAX_REQUEST_BYTES).map_err(BlockError::rpc)?;
                self.stats.trims += 1;
                self.disk.trim(r.offset, u64::from(r.len)).map(|()| Action::reply(&(), None)).map_err(BlockError::rpc)
            }
            _ => Err(RpcError::UnknownOp),
        }
    }

    /// Read a chunk into fresh frames and reply with them (gathered when several).
    fn read(&mut self, r: Range, frames: &mut Frames) -> Result<Action<Frame>, BlockError> {
        check_range(r, self.disk.size, READ_CHUNK_BYTES)?;
        let (piece, n) = read_layout(r.len).ok_or(BlockError::TooLarge)?;
        let mut got: Vec<Frame> = Vec::with_capacity(n as usize);
        for _ in 0..n {
            match frames.alloc() {
                Some(f) => got.push(f),
                None => return Err(give_back(frames, &got, BlockError::Busy)),
            }
        }
        let pieces: Vec<(usize, usize)> = got.iter().map(|&f| (f as usize, piece as usize)).collect();
        let region = frames.frames().region.clone();
        let disk = &mut self.disk;
        let read = frameio::with_pieces_mut(&region, &pieces, |iov| disk.read(r.offset, r.len as usize, iov));
        if let Err(e) = read.unwrap_or(Err(BlockError::Io)) {
            return Err(give_back(frames, &got, e));
        }
        let payload = match got.as_slice() {
            [one] => *one,
            _ => match frames.frames_mut().group(&got, piece) {
                Some(g) => g,
                None => return Err(give_back(frames, &got, BlockError::Busy)),
            },
        };
        // Free once the reply that carries them has been sent.
        for &f in &got {
            frames.retire(f);
        }
        self.stats.reads += 1;
        self.stats.bytes_read += u64::from(r.len);
        Ok(Action::reply(&(), Some((payload, r.len))))
    }

    /// Write a chunk from the request's payload frame.
    fn write(
        &mut self,
        r: Range,
        payload: Option<(Frame, u32)>,
        frames: &mut Frames,
    ) -> Result<Action<Frame>, BlockError> {
        check_range(r, self.disk.size, WRITE_CHUNK_BYTES)?;
        let Some((f, len)) = payload.filter(|p| p.1 == r.len) else {
            return Err(BlockError::BadPayload);
        };
        let region = frames.frames().region.clone();
        let disk = &mut self.disk;
        let wrote =
            frameio::with_pieces(&region, &[(f as usize, len as usize)], |iov| disk.write(r.offset, len as usize, iov));
        wrote.unwrap_or(Err(BlockError::Io))?;
        self.stats.writes += 1;
        self.stats.bytes_written += u64::from(len);
        Ok(Action::reply(&(), None))
    }
}

fn give_back(frames: &mut Frames, got: &[Frame], e: BlockError) -> BlockError {
    for &f in got {
        frames.free(f);
    }
    e
}

/// Everything `gmblockd` is started with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub station: StationConfig,
    pub export: std::path::PathBuf,
    pub read_only: bool,
    pub path: DataPath,
    pub model: Option<DiskModel>,
}

/// A running server.
pub struct Server {
    pub station: Station<BlockService>,
    started: Instant,
}

/// What a server reports (`--stats-json`, the bench).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub path: DataPath,
    pub size: u64,
    pub uptime_s: f64,
    pub cpu_s: f64,
    /// Bytes the NIC's DMA moved, host RAM and NIC-local apart.
    pub nic_bytes: NicBytes,
    /// Bytes the disk's `O_DIRECT` DMA moved to or from host RAM: everything read and
    /// written on the via-RAM path, nothing on the direct path (its frames are NIC-local).
    pub disk_host_ram_bytes: u64,
    pub stats: ServerStats,
    pub last_error: Option<String>,
    /// Seconds replies were held for the modelled disk, and requests that found it idle.
    pub model_held_s: f64,
    pub model_started_idle: u64,
}

impl Server {
    /// Open the export, then the station with its frames placed for the data path.
    pub fn open(mut cfg: ServerConfig) -> anyhow::Result<Server> {
        let disk = Disk::open(&cfg.export, cfg.read_only)?;
        if disk.kind == Kind::BlockDevice && !cfg.read_only {
            eprintln!("gmblockd: exporting block device {} read-write", disk.path.display());
        }
        cfg.station.placement = match cfg.path {
            DataPath::Direct => Placement::NicLocal,
            DataPath::ViaRam => Placement::HostRam,
        };
        let service = BlockService { disk, path: cfg.path, stats: ServerStats::default(), model: cfg.model };
        let station = Station::open(&cfg.station, service)?;
        Ok(Server { station, started: Instant::now() })
    }

    /// One pass: poll the port, then let the frames retired in it wait for its sends.
    pub fn pass(&mut self) -> bool {
        let busy = self.station.port.poll();
        if let (false, Some(m)) = (busy, self.station.port.node.service.model.as_mut()) {
            m.went_idle();
        }
        self.station.port.node.frames.tag_limbo();
        busy
    }

    /// Serve until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut last_work = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if self.pass() {
                last_work = Instant::now();
            } else if last_work.elapsed() > IDLE_SPIN {
                self.station.wait_link(Duration::from_millis(20));
            }
        }
    }

    pub fn report(&self) -> Report {
        let svc = &self.station.port.node.service;
        Report {
            path: svc.path,
            size: svc.disk.size,
            uptime_s: self.started.elapsed().as_secs_f64(),
            cpu_s: crate::cpu_seconds(),
            nic_bytes: self.station.nic_bytes(),
            disk_host_ram_bytes: match svc.path {
                DataPath::Direct => 0,
                DataPath::ViaRam => svc.stats.bytes_read + svc.stats.bytes_written,
            },
            stats: svc.stats,
            last_error: svc.disk.last_error.clone(),
            model_held_s: svc.model.as_ref().map_or(0.0, |m| m.held.as_secs_f64()),
            model_started_idle: svc.model.as_ref().map_or(0, |m| m.started_idle),
        }
    }
}
