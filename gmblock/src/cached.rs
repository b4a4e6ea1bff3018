// SPDX-License-Identifier: GPL-2.0-only
//! A volume on one block server cached in GMS (network memory), the client core's policy
//! (`gms::cached`: getpage first, the server on a miss; write-through or write-back, a
//! write acknowledged once its dirty copies are on distinct lenders, every dirty page
//! cleaned before a flush completes) driven over a gmblock [`Client`] and a node of an
//! in-process GMS [`Cluster`]. This file only moves bytes: every command of the policy is
//! started at once (a getpage, put or discard through the node; a read, write or flush
//! call to the server), the cluster and the server's port are polled, and each command's
//! end is reported back — so the commands of several requests and cleanings are in flight
//! together ([`CachedVolume::write_many`]). A put that must keep clear of the lenders of a
//! page's other copies goes to the node's placement among the rest
//! (`GmsPort::choose_target_apart`); with none of them taking puts it fails, and the
//! policy writes through.

use crate::client::{copy_out, send_read, send_write, Client, Flight};
use crate::proto::{FlushOp, Range, BLOCK_BYTES};
use anyhow::{anyhow, bail};
use gms::cached::{BlockFault, Buf, Cache, CachedError, Command, Config, Dirt, Done, Got, Rec, Served, Stats};
use gms::prelude::*;
use netrpc::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use trapeze_node::gms::{Cluster, Got as GmsGot};

/// Jobs (requests and cleanings) and dirty records of one cached volume.
pub const JOBS: usize = 32;
pub const DIRTY: usize = 256;
/// A request that sees nothing end for this long fails (every command has a timeout of
/// its own, far shorter: this only turns a bug into an error).
const STALL: Duration = Duration::from_secs(60);

type Core = Cache<u32, JOBS, DIRTY>;

/// A command on its way.
enum Flying {
    Get { op: OpId, at_least: Version, buf: Buf<u32> },
    Put { page: PageId, version: Version },
    Discard(OpId),
    Read { flight: Flight, buf: Buf<u32> },
    Write(Flight),
    Flush(CallId),
}

/// How a command ended.
enum Ended {
    Get(Got),
    Put(PutResult),
    Discard(bool),
    Block(Result<(), BlockFault>),
}

/// A block server's volume cached in GMS from node `at` of `gms`.
pub struct CachedVolume {
    pub gms: Cluster,
    pub at: usize,
    pub block: Client,
    core: Box<Core>,
    /// Each request's page and each cleaning's scratch page.
    user: HashMap<u32, Vec<u8>>,
    scratch: HashMap<u16, Vec<u8>>,
    flying: HashMap<u16, Flying>,
    /// Requests that ended, not yet taken.
    done: HashMap<u32, Result<Served, CachedError>>,
    /// Entries of the node's put log already matched.
    log_seen: usize,
    /// Nodes of the cluster alive when last looked at: one fewer is a lender lost.
    alive: usize,
    next_io: u32,
}

/// What a failed block call means to the policy.
fn fault_of(e: RpcError) -> BlockFault {
    match e {
        RpcError::Remote(c) if c != crate::proto::BlockError::Busy as u16 => BlockFault::Refused(c),
        _ => BlockFault::Failed,
    }
}

impl CachedVolume {
    /// Cache `block`'s volume (all its 4 KiB blocks) in `cfg.space` of `gms`, from node
    /// `at` (`cfg.first_version`: above every version this space was put at before).
    pub fn new(gms: Cluster, at: usize, block: Client, cfg: Config) -> anyhow::Result<CachedVolume> {
        let blocks = block.info.size / u64::from(BLOCK_BYTES);
        let core = Core::new(Config { blocks, ..cfg }).map_err(|e| anyhow!("cached volume: {e:?}"))?;
        Ok(CachedVolume {
            alive: gms.alive.iter().filter(|a| **a).count(),
            gms,
            at,
            block,
            core: Box::new(core),
            user: HashMap::new(),
            scratch: HashMap::new(),
            flying: HashMap::new(),
            done: HashMap::new(),
            log_seen: 0,
            next_io: 0,
        })
    }

    pub fn stats(&self) -> Stats {
        self.core.stats()
    }
    /// Pages only GMS holds (not yet written to the server).
    pub fn dirty(&self) -> usize {
        self.core.dirty()
    }
    /// Pages written back whose every copy is gone (until written again).
    pub fn lost(&self) -> usize {
        self.core.records().filter(|r| matches!(r, Rec::Lost { .. })).count()
    }

    /// Read block `b` (4 KiB).
    pub fn read(&mut self, b: u64) -> anyhow::Result<(Vec<u8>, Served)> {
        let io = self.io(vec![0; BLOCK_BYTES as usize]);
        self.submit(|c| c.read(io, b)).map_err(|e| anyhow!("block {b}: {e}"))?;
        let served = self.wait(io)?;
        Ok((self.user.remove(&io).unwrap_or_default(), served))
    }

    /// Write block `b` (4 KiB).
    pub fn write(&mut self, b: u64, data: &[u8]) -> anyhow::Result<Served> {
        self.write_many(&[(b, data)]).map(|s| s[0])
    }

    /// Write each `(block, 4 KiB)`, as many in flight at once as the policy takes.
    pub fn write_many(&mut self, writes: &[(u64, &[u8])]) -> anyhow::Result<Vec<Served>> {
        let mut ios = Vec::with_capacity(writes.len());
        for &(b, data) in writes {
            if data.len() != BLOCK_BYTES as usize {
                bail!("{} bytes: a block is {BLOCK_BYTES}", data.len());
            }
            let io = self.io(data.to_vec());
            self.submit(|c| c.write(io, b)).map_err(|e| anyhow!("block {b}: {e}"))?;
            ios.push(io);
        }
        let mut out = Vec::with_capacity(ios.len());
        for io in ios {
            let r = self.wait(io);
            self.user.remove(&io);
            out.push(r?);
        }
        Ok(out)
    }

    /// Every write so far durable on the server's disk.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        let io = self.io(Vec::new());
        self.submit(|c| c.flush(io)).map_err(|e| anyhow!("flush: {e}"))?;
        let r = self.wait(io);
        self.user.remove(&io);
        r.map(|_| ())
    }

    /// Hand the policy a request, driving it while every job is busy (cleanings and
    /// earlier requests free them).
    fn submit(&mut self, mut req: impl FnMut(&mut Core) -> Result<(), CachedError>) -> anyhow::Result<()> {
        let since = Instant::now();
        loop {
            match req(&mut self.core) {
                Err(CachedError::Busy) if since.elapsed() < STALL => self.step()?,
                r => return r.map_err(|e| anyhow!("{e}")),
            }
        }
    }

    fn io(&mut self, buf: Vec<u8>) -> u32 {
        self.next_io = self.next_io.wrapping_add(1);
        self.user.insert(self.next_io, buf);
        self.next_io
    }

    /// Drive until request `io` ends.
    fn wait(&mut self, io: u32) -> anyhow::Result<Served> {
        let since = Instant::now();
        loop {
            if let Some(r) = self.done.remove(&io) {
                return r.map_err(|e| anyhow!("{e}"));
            }
            if since.elapsed() > STALL {
                bail!("the cached volume stalled: request {io} did not end in {STALL:?}");
            }
            self.step()?;
        }
    }

    /// One pass: start what the policy wants, poll both sides, report what ended.
    fn step(&mut self) -> anyhow::Result<()> {
        let alive = self.gms.alive.iter().filter(|a| **a).count();
        if alive < self.alive {
            // Dirty pages may be down to fewer copies: they are cleaned at once.
            self.core.handle_lender_lost();
        }
        self.alive = alive;
        while let Some(c) = self.core.poll_command() {
            self.start(c);
        }
        while let Some(Done { io, result }) = self.core.poll_done() {
            self.done.insert(io, result);
        }
        self.gms.poll();
        self.block.poll_holds();
        self.block.station.port.poll();
        self.reap();
        Ok(())
    }

    fn buf(&mut self, b: Buf<u32>) -> &mut Vec<u8> {
        match b {
            Buf::User(io) => self.user.entry(io).or_default(),
            Buf::Scratch(j) => self.scratch.entry(j).or_insert_with(|| vec![0; BLOCK_BYTES as usize]),
        }
    }

    /// Start command `c`; one that cannot start ends at once, failed.
    fn start(&mut self, c: Command<u32>) {
        let server = self.block.server();
        let range = |block: u64| Range { offset: block * u64::from(BLOCK_BYTES), len: BLOCK_BYTES };
        let (job, started) = match c {
            Command::Get { job, page, at_least, buf } => {
                (job, self.gms.ports[self.at].get_start(page).map(|op| Flying::Get { op, at_least, buf }).ok())
            }
            Command::Put { job, page, version, dirt, buf, apart } => {
                let data = self.buf(buf).clone();
                let port = &mut self.gms.ports[self.at];
                // A copy goes to a lender clear of the others; none left: it fails (the
                // policy writes through).
                let target = match apart.as_slice() {
                    [] => Some(None),
                    nodes => port.choose_target_apart(nodes).map(Some),
                };
                let put = target.and_then(|t| port.put_with(page, version, &data, t, dirt == Dirt::Dirty).ok());
                (job, put.map(|_| Flying::Put { page, version }))
            }
            Command::Discard { job, page, version } => {
                (job, self.gms.ports[self.at].discard_start(page, version).ok().map(Flying::Discard))
            }
            Command::BlockRead { job, block, buf } => {
                let port = &mut self.block.station.port;
                (job, send_read(port, server, range(block)).ok().map(|flight| Flying::Read { flight, buf }))
            }
            Command::BlockWrite { job, block, buf } => {
                let data = self.buf(buf).clone();
                let port = &mut self.block.station.port;
                (job, send_write(port, server, range(block), &data).ok().map(Flying::Write))
            }
            Command::BlockFlush { job } => {
                let port = &mut self.block.station.port;
                let now = port.now();
                (
                    job,
                    port.rpc
                        .call::<FlushOp>(now, &mut port.node, server, &(), ReplyTo::None, Mode::Wait)
                        .ok()
                        .map(Flying::Flush),
                )
            }
        };
        match started {
            Some(f) => {
                self.flying.insert(job, f);
            }
            None => {
                let failed = match c {
                    Command::Get { .. } => Ended::Get(Got::Failed),
                    Command::Put { .. } => Ended::Put(PutResult::Failed),
                    Command::Discard { .. } => Ended::Discard(false),
                    _ => Ended::Block(Err(BlockFault::Failed)),
                };
                self.report(job, failed);
            }
        }
    }

    fn report(&mut self, job: u16, e: Ended) {
        match e {
            Ended::Get(g) => self.core.handle_get(job, g),
            Ended::Put(r) => self.core.handle_put(job, r),
            Ended::Discard(d) => self.core.handle_discard(job, d),
            Ended::Block(r) => self.core.handle_block(job, r),
        };
    }

    /// Report every command that ended.
    fn reap(&mut self) {
        let mut ended = Vec::new();
        let log = &self.gms.ports[self.at].put_log;
        for &(page, version, result) in &log[self.log_seen..] {
            let job = self.flying.iter().find_map(|(j, f)| match f {
                Flying::Put { page: p, version: v } if *p == page && *v == version => Some(*j),
                _ => None,
            });
            if let Some(job) = job {
                self.flying.remove(&job);
                ended.push((job, Ended::Put(result)));
            }
        }
        self.log_seen = log.len();
        let jobs: Vec<u16> = self.flying.keys().copied().collect();
        for job in jobs {
            if let Some(e) = self.ended(job) {
                ended.push((job, e));
            }
        }
        for (job, e) in ended {
            self.report(job, e);
        }
    }

    /// Whether `job`'s command ended, and how (it leaves `flying` then).
    fn ended(&mut self, job: u16) -> Option<Ended> {
        let port = &mut self.gms.ports[self.at];
        let rpc = &mut self.block.station.port;
        let e = match self.flying.get(&job)? {
            Flying::Put { .. } => return None,
            Flying::Get { op, at_least, buf } => {
                let (at_least, buf) = (*at_least, *buf);
                match port.get_poll(*op)? {
                    // An older copy than the writer knows of is no copy of it.
                    GmsGot::Hit { version, data, .. } if version >= at_least => {
                        let b = self.buf(buf);
                        b.clear();
                        b.extend_from_slice(&data);
                        Ended::Get(Got::Hit { version })
                    }
                    _ => Ended::Get(Got::Miss),
                }
            }
            Flying::Discard(op) => Ended::Discard(port.discard_poll(*op)?),
            Flying::Read { flight, buf } => {
                let outcome = rpc.rpc.take_outcome(flight.call)?;
                let (ok, buf) = (outcome.is_ok(), *buf);
                if ok {
                    let mut data = vec![0; BLOCK_BYTES as usize];
                    copy_out(&mut rpc.node.frames, &flight.frames, BLOCK_BYTES, 0, &mut data);
                    *self.buf(buf) = data;
                }
                Ended::Block(outcome.map(|_| ()).map_err(fault_of))
            }
            Flying::Write(flight) => {
                let outcome = rpc.rpc.take_outcome(flight.call)?;
                Ended::Block(outcome.map(|_| ()).map_err(fault_of))
            }
            Flying::Flush(call) => Ended::Block(rpc.rpc.take_outcome(*call)?.map(|_| ()).map_err(fault_of)),
        };
        // A block call's frames go back as `crate::hold` says (a late reply may still land
        // in a read's; a write's request may not have left yet).
        let ok = matches!(e, Ended::Block(Ok(())));
        if let Some(Flying::Read { flight, .. } | Flying::Write(flight)) = self.flying.remove(&job) {
            self.block.end_flight(flight, ok);
        }
        Some(e)
    }
}
