// SPDX-License-Identifier: GPL-2.0-only
//! A volume on one block server cached in GMS (network memory), the client core's policy
//! (`gms::cached`: getpage first, the server on a miss; write-through or write-back, every
//! dirty page cleaned before a flush completes) driven over a gmblock [`Client`] and a
//! node of an in-process GMS [`Cluster`]. The thinnest real path: each command the policy
//! gives is run to its end before the next (block calls and GMS operations block), so
//! one request is in flight at a time.

use crate::client::Client;
use crate::proto::BLOCK_BYTES;
use anyhow::{anyhow, bail};
use gms::cached::{BlockFault, Buf, Cache, CachedError, Command, Config, Dirt, Got, Served, Stats};
use gms::prelude::*;
use std::collections::HashMap;
use trapeze_node::gms::{Cluster, Got as GmsGot};

/// Jobs (requests and cleanings) and dirty records of one cached volume.
pub const JOBS: usize = 8;
pub const DIRTY: usize = 256;

type Core = Cache<u32, JOBS, DIRTY>;

/// A block server's volume cached in GMS from node `at` of `gms`.
pub struct CachedVolume {
    pub gms: Cluster,
    pub at: usize,
    pub block: Client,
    core: Box<Core>,
    /// Each request's page and each cleaning's scratch page.
    user: HashMap<u32, Vec<u8>>,
    scratch: HashMap<u16, Vec<u8>>,
    next_io: u32,
}

/// What the block client's error means to the policy.
fn fault_of(e: &anyhow::Error) -> BlockFault {
    let s = e.to_string();
    if s.contains("did not answer") {
        BlockFault::Failed
    } else {
        BlockFault::Refused(0)
    }
}

impl CachedVolume {
    /// Cache `block`'s volume (all its 4 KiB blocks) in space `space` of `gms`, from node
    /// `at`, writing by `writes`. `first_version`: above every version this space was put
    /// at before.
    pub fn new(gms: Cluster, at: usize, block: Client, cfg: Config) -> anyhow::Result<CachedVolume> {
        let blocks = block.info.size / u64::from(BLOCK_BYTES);
        let core = Core::new(Config { blocks, ..cfg }).map_err(|e| anyhow!("cached volume: {e:?}"))?;
        Ok(CachedVolume {
            gms,
            at,
            block,
            core: Box::new(core),
            user: HashMap::new(),
            scratch: HashMap::new(),
            next_io: 0,
        })
    }

    pub fn stats(&self) -> Stats {
        self.core.stats()
    }
    /// Pages GMS may hold the only copy of.
    pub fn dirty(&self) -> usize {
        self.core.dirty()
    }

    /// Read block `b` (4 KiB).
    pub fn read(&mut self, b: u64) -> anyhow::Result<(Vec<u8>, Served)> {
        let io = self.io(vec![0; BLOCK_BYTES as usize]);
        self.core.read(io, b).map_err(|e| anyhow!("block {b}: {e}"))?;
        let served = self.run(io)?;
        Ok((self.user.remove(&io).unwrap_or_default(), served))
    }

    /// Write block `b` (4 KiB).
    pub fn write(&mut self, b: u64, data: &[u8]) -> anyhow::Result<Served> {
        if data.len() != BLOCK_BYTES as usize {
            bail!("{} bytes: a block is {BLOCK_BYTES}", data.len());
        }
        let io = self.io(data.to_vec());
        self.core.write(io, b).map_err(|e| anyhow!("block {b}: {e}"))?;
        let r = self.run(io);
        self.user.remove(&io);
        r
    }

    /// Every write so far durable on the server's disk.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        let io = self.io(Vec::new());
        self.core.flush(io).map_err(|e| anyhow!("flush: {e}"))?;
        let r = self.run(io);
        self.user.remove(&io);
        r.map(|_| ())
    }

    fn io(&mut self, buf: Vec<u8>) -> u32 {
        self.next_io = self.next_io.wrapping_add(1);
        self.user.insert(self.next_io, buf);
        self.next_io
    }

    /// Run the policy's commands until request `io` ends.
    fn run(&mut self, io: u32) -> anyhow::Result<Served> {
        loop {
            while let Some(c) = self.core.poll_command() {
                self.execute(c)?;
            }
            if let Some(d) = self.core.poll_done() {
                if d.io == io {
                    return d.result.map_err(|e: CachedError| anyhow!("{e}"));
                }
                continue;
            }
            bail!("the cached volume stalled with request {io} unfinished");
        }
    }

    fn buf(&mut self, b: Buf<u32>) -> &mut Vec<u8> {
        match b {
            Buf::User(io) => self.user.entry(io).or_default(),
            Buf::Scratch(j) => self.scratch.entry(j).or_insert_with(|| vec![0; BLOCK_BYTES as usize]),
        }
    }

    /// Run one command to its end and report it.
    fn execute(&mut self, c: Command<u32>) -> anyhow::Result<()> {
        match c {
            Command::Get { job, page, at_least, buf } => {
                let got = match self.gms.get_wait(self.at, page) {
                    // An older copy than the writer knows of is no copy of it.
                    Ok(GmsGot::Hit { version, data, .. }) if version >= at_least => {
                        let b = self.buf(buf);
                        b.clear();
                        b.extend_from_slice(&data);
                        Got::Hit { version }
                    }
                    Ok(_) => Got::Miss,
                    Err(_) => Got::Failed,
                };
                self.core.handle_get(job, got);
            }
            Command::Put { job, page, version, dirt, buf } => {
                let data = self.buf(buf).clone();
                let r = self.put(page, version, &data, dirt == Dirt::Dirty);
                self.core.handle_put(job, r);
            }
            Command::Discard { job, page, version } => {
                let done = self.gms.discard_wait(self.at, page, version).unwrap_or(false);
                self.core.handle_discard(job, done);
            }
            Command::BlockRead { job, block, buf } => {
                let mut data = vec![0; BLOCK_BYTES as usize];
                let r = self.block.read(block * u64::from(BLOCK_BYTES), &mut data);
                if r.is_ok() {
                    *self.buf(buf) = data;
                }
                self.core.handle_block(job, r.as_ref().map(|_| ()).map_err(fault_of));
            }
            Command::BlockWrite { job, block, buf } => {
                let data = self.buf(buf).clone();
                let r = self.block.write(block * u64::from(BLOCK_BYTES), &data);
                self.core.handle_block(job, r.as_ref().map(|_| ()).map_err(fault_of));
            }
            Command::BlockFlush { job } => {
                let r = self.block.flush();
                self.core.handle_block(job, r.as_ref().map(|_| ()).map_err(fault_of));
            }
        }
        Ok(())
    }

    /// A put to the target the global LRU picks, waited for: how it ended.
    fn put(&mut self, page: PageId, version: Version, data: &[u8], dirty: bool) -> PutResult {
        if self.gms.ports[self.at].put_with(page, version, data, None, dirty).is_err() {
            return PutResult::Failed;
        }
        if self.gms.settle(self.at).is_err() {
            return PutResult::Failed;
        }
        let log = &self.gms.ports[self.at].put_log;
        log.iter().rev().find(|(p, v, _)| *p == page && *v == version).map_or(PutResult::Failed, |e| e.2)
    }
}
