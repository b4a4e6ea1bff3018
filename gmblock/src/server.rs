// SPDX-License-Identifier: GPL-2.0-only
//! The block server: [`BlockService`] answers the protocol's operations ([`crate::proto`])
//! from a [`Disk`], its blocks moving by `O_DIRECT` between the disk and the frames of
//! its station's region ([`crate::frameio`]) — NIC-local memory on the direct path, host
//! RAM on the via-RAM path — and [`Server`] runs it: one thread polling the station,
//! spinning while there is work and sleeping on the link's socket (and on the completions
//! of its disk reads in flight) when idle. A read chunk goes on the ring ([`crate::uring`],
//! at most [`READS_IN_FLIGHT`]) and its reply is sent when it completes, so the disk works
//! on every chunk the clients keep in flight; with a modelled disk, or a full ring, or
//! where the kernel refuses io_uring, it is read inside its request.
//!
//! A read reply's frames are retired, not freed: they return to the pool once the NIC
//! has sent them. Every bad request gets an error reply and changes nothing.

use crate::disk::{Disk, Kind};
use crate::frameio;
use crate::model::DiskModel;
use crate::proto::*;
use crate::station::{NicBytes, Placement, Station, StationConfig};
use crate::uring::Reads;
use netrpc::prelude::*;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use trapeze_node::rpc::{Frame, Frames, RpcPort, Service};

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
    /// The most reads the disk had in flight at once (on the ring).
    pub most_reads_in_flight: u64,
}

/// Reads the disk works on at once (a client keeps at most 32 chunks in flight).
pub const READS_IN_FLIGHT: u32 = 64;

/// A read on the disk whose reply is owed: the request, and the frames it fills (each
/// `piece` bytes).
struct Owed {
    pending: Pending,
    range: Range,
    got: Vec<Frame>,
    piece: u32,
}

/// The protocol's server stubs over one disk.
pub struct BlockService {
    pub disk: Disk,
    pub path: DataPath,
    pub stats: ServerStats,
    /// When set, reads and writes take as long as this modelled disk would.
    pub model: Option<DiskModel>,
    /// Reads in flight on the disk ([`crate::uring`]); `None`: each read is done inside
    /// its request's stub, one at a time (a modelled disk serves one request at a time).
    reads: Option<Reads<Owed>>,
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
            ReadOp::OP => self.read(inc.decode::<ReadOp>()?, Pending::of(inc), frames).map_err(BlockError::rpc),
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

    /// Read a chunk into fresh frames and reply with them (gathered when several): on the
    /// ring, the reply sent when the read completes ([`Server::pass`]), or here.
    fn read(&mut self, r: Range, owed: Option<Pending>, frames: &mut Frames) -> Result<Action<Frame>, BlockError> {
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
        if let (Some(reads), Some(pending)) = (self.reads.as_mut().filter(|q| q.has_room()), owed) {
            let fd = self.disk.fd();
            return match reads.push(fd, &region, &pieces, r.offset, Owed { pending, range: r, got, piece }) {
                Ok(()) => {
                    let most = &mut self.stats.most_reads_in_flight;
                    *most = (*most).max(reads.in_flight() as u64);
                    Ok(Action::Done)
                }
                Err(o) => Err(give_back(frames, &o.got, BlockError::Io)),
            };
        }
        let disk = &mut self.disk;
        let read = frameio::with_pieces_mut(&region, &pieces, |iov| disk.read(r.offset, r.len as usize, iov));
        if let Err(e) = read.unwrap_or(Err(BlockError::Io)) {
            return Err(give_back(frames, &got, e));
        }
        let payload = read_done(&mut self.stats, r, &got, piece, frames)?;
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

/// A read's frames hold its bytes: the reply's payload (a group when several), its frames
/// retired (freed once the reply that carries them has been sent).
fn read_done(
    stats: &mut ServerStats,
    r: Range,
    got: &[Frame],
    piece: u32,
    frames: &mut Frames,
) -> Result<Frame, BlockError> {
    let payload = match got {
        [one] => *one,
        _ => match frames.frames_mut().group(got, piece) {
            Some(g) => g,
            None => return Err(give_back(frames, got, BlockError::Busy)),
        },
    };
    for &f in got {
        frames.retire(f);
    }
    stats.reads += 1;
    stats.bytes_read += u64::from(r.len);
    Ok(payload)
}

/// Reply to the reads the ring completed: their bytes, or the disk's error. Whether any
/// completed.
fn finish_reads(port: &mut RpcPort<BlockService>) -> bool {
    let (rpc, node) = (&mut port.rpc, &mut port.node);
    let (svc, frames) = (&mut node.service, &mut node.frames);
    let Some(reads) = svc.reads.as_mut() else { return false };
    let (disk, stats) = (&mut svc.disk, &mut svc.stats);
    reads.complete(|o, got| {
        let read = disk.read_result(o.range.offset, o.range.len as usize, got);
        let replied = match read.map_err(|e| give_back(frames, &o.got, e)) {
            Ok(()) => read_done(stats, o.range, &o.got, o.piece, frames),
            Err(e) => Err(e),
        };
        match replied {
            Ok(payload) => {
                if rpc.reply_later(o.pending, &[], Some((payload, o.range.len))).is_err() {
                    // Not sent (the transmit queue is full): as an unsent immediate reply.
                    frames.release(payload);
                }
            }
            Err(e) => {
                stats.errors += 1;
                let _ = rpc.error_later(o.pending, e.rpc());
            }
        }
    })
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
    /// Readable when disk reads completed (a duplicate of the ring's descriptor).
    reads_ready: Option<OwnedFd>,
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
        let reads = match cfg.model {
            Some(_) => None,
            None => Reads::new(READS_IN_FLIGHT)
                .map_err(|e| eprintln!("gmblockd: io_uring refused ({e}): the disk reads one chunk at a time"))
                .ok(),
        };
        let reads_ready = reads.as_ref().map(|r| r.ready_fd().try_clone_to_owned()).transpose()?;
        let service = BlockService { disk, path: cfg.path, stats: ServerStats::default(), model: cfg.model, reads };
        let station = Station::open(&cfg.station, service)?;
        Ok(Server { station, started: Instant::now(), reads_ready })
    }

    /// One pass: reply to the reads the disk completed, poll the port (sending those
    /// replies, serving requests), start the reads its requests queued, then let the
    /// frames retired in it wait for its sends. Whether it did anything.
    pub fn pass(&mut self) -> bool {
        let port = &mut self.station.port;
        let done = finish_reads(port);
        let busy = port.poll();
        if let (false, Some(m)) = (busy, port.node.service.model.as_mut()) {
            m.went_idle();
        }
        // A refused submission leaves the reads queued for the next pass.
        let refused = port.node.service.reads.as_mut().is_some_and(|r| r.submit().is_err());
        port.node.frames.tag_limbo();
        busy || done || refused
    }

    /// Serve until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        let mut last_work = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if self.pass() {
                last_work = Instant::now();
            } else if last_work.elapsed() > IDLE_SPIN {
                // Asleep until a request arrives or a disk read completes.
                self.station.wait_link_or(Duration::from_millis(20), self.reads_ready.as_ref().map(|fd| fd.as_fd()));
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
