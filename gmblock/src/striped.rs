// SPDX-License-Identifier: GPL-2.0-only
//! A striped volume over several gmblock servers, after Slice: the policy is
//! `gms::stripe` (the client core's — layout, per-server depth, read-ahead, retries,
//! deadlines); this module only moves its bytes. One station of its own (frames in host
//! RAM) talks to every server, each a `gmblockd` with its own virtual NIC and node id.
//!
//! The driver loop: hand the striper the user's request, run its commands (a send is a
//! read or write chunk call, an abandon cancels a call, a copy takes bytes from an ahead
//! slot), poll the port, report every ended call to the striper, give it the time when its
//! deadline passes, until it hands the request back. A read-ahead fetch is copied from its
//! reply frames into the ahead slot's buffer as it lands, so a window of data held ahead
//! holds no frames, IPT entries or reply groups (the port has 64 of those). Read chunks
//! are at most 32 KiB (any block multiple up to that fits one reply's frames), write
//! chunks one frame. A call's frames go back to the pool only once the NIC can no longer
//! touch them (the `hold` module): a fetch given up on may still have its reply landing.

use crate::client::{copy_out, error_of, send_read, send_write, Flight, NoService, SPIN, TRIES};
use crate::hold::Holds;
use crate::proto::*;
use crate::station::{Placement, Station, StationConfig};
use anyhow::{anyhow, bail, Context};
use gms::stripe::{self, ChunkId, Command, Dir, Fault, StripeError, Striper, Target};
use netrpc::prelude::*;
use std::time::{Duration, Instant};
use trapeze_node::rpc::Frame;

/// Servers of one striped volume at most.
pub const MAX_SERVERS: usize = 16;
/// Ahead slots (the read-ahead window, in pieces, is at most this).
pub const AHEAD: usize = 64;
/// Chunk slots, and the calls in flight at most (depth × servers): NetRPC's call records
/// (64) less room for flushes and trims.
const CHUNKS: usize = 56;
/// The largest read chunk the striper cuts (see the module doc).
pub const STRIPE_READ_BYTES: u32 = 32 * 1024;
/// Stripes read ahead of a sequential stream unless asked otherwise: while a reader's
/// next request is on its way, every server already fetches its next two units.
pub const DEFAULT_READAHEAD_STRIPES: u16 = 2;

type Core = Striper<u32, MAX_SERVERS, 1, CHUNKS, AHEAD>;

/// How a striped volume is read and written.
#[derive(Clone, Copy, Debug)]
pub struct StripeConfig {
    /// The stripe unit (a multiple of 4 KiB; above 32 KiB, of 32 KiB).
    pub grain: u32,
    /// Chunks in flight per server.
    pub depth: u16,
    /// Stripes read ahead of a sequential stream (0: none).
    pub readahead_stripes: u16,
    /// A chunk not answered in this time is sent again, at most `tries` times in all.
    pub chunk_timeout: Duration,
    pub tries: u8,
}

impl Default for StripeConfig {
    fn default() -> Self {
        StripeConfig {
            grain: stripe::DEFAULT_GRAIN_BYTES,
            depth: 8,
            readahead_stripes: DEFAULT_READAHEAD_STRIPES,
            chunk_timeout: Duration::from_secs(2),
            tries: 4,
        }
    }
}

/// A call the striper asked for, and what it holds.
struct Call {
    id: ChunkId,
    dir: Dir,
    target: Target<u32>,
    len: u32,
    flight: Flight,
}

/// The user's buffer of the request being run.
enum Buf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// A client of a volume striped over several servers.
pub struct StripedClient {
    pub station: Station<NoService>,
    /// Node ids, in stripe order.
    pub servers: Vec<u16>,
    pub infos: Vec<Info>,
    core: Box<Core>,
    /// Calls by chunk slot.
    calls: Vec<Option<Call>>,
    /// Landed read-ahead by ahead slot (each the striper's piece size, made on first use).
    ahead: Vec<Vec<u8>>,
    epoch: Instant,
    last_work: Instant,
    next_io: u32,
    /// Frames of finished calls the NIC may still touch (the `hold` module).
    holds: Holds,
}

/// What a failed call means to the striper.
fn fault_of(e: RpcError) -> Fault {
    match e {
        RpcError::Timeout => Fault::Timeout,
        RpcError::Remote(c) if c == BlockError::Busy as u16 => Fault::Busy,
        RpcError::Remote(c) => Fault::Refused(c),
        _ => Fault::NotSent,
    }
}

impl StripedClient {
    /// Open a station (its peers: every server) and ask each of `servers` (node ids, in
    /// stripe order) for its volume. The volume is as many whole grains of the smallest.
    pub fn connect(mut cfg: StationConfig, servers: &[u16], sc: StripeConfig) -> anyhow::Result<StripedClient> {
        if servers.is_empty() || servers.len() > MAX_SERVERS {
            bail!("{} servers: a striped volume has 1..={MAX_SERVERS}", servers.len());
        }
        if (1..servers.len()).any(|i| servers[..i].contains(&servers[i])) {
            bail!("servers {servers:?}: each server once");
        }
        if sc.depth == 0 || usize::from(sc.depth) * servers.len() > CHUNKS {
            let most = CHUNKS / servers.len();
            bail!("depth {}: 1..={most} chunks in flight per server with {} servers", sc.depth, servers.len());
        }
        let frames_needed = usize::from(sc.depth) * servers.len() * 4 + 64;
        cfg.placement = Placement::HostRam;
        cfg.region_bytes = cfg.region_bytes.max(frames_needed * FRAME_BYTES as usize);
        let mut station = Station::open(&cfg, NoService)?;
        let mut infos = Vec::new();
        for &s in servers {
            let info = info_of(&mut station, s).with_context(|| format!("server {s}"))?;
            infos.push(info);
        }
        let smallest = infos.iter().map(|i| i.size).min().unwrap_or(0);
        let policy = stripe::Config {
            grain_bytes: sc.grain,
            block_bytes: BLOCK_BYTES,
            max_read_bytes: STRIPE_READ_BYTES,
            max_write_bytes: WRITE_CHUNK_BYTES,
            max_request_bytes: MAX_REQUEST_BYTES,
            depth: sc.depth,
            chunk_timeout_ns: sc.chunk_timeout.as_nanos() as u64,
            tries: sc.tries,
            retry_delay_ns: 1_000_000,
            readahead_stripes: sc.readahead_stripes,
        };
        let core = Core::new(policy, servers.len() as u16, smallest).map_err(|e| config_error(e, &sc, smallest))?;
        Ok(StripedClient {
            station,
            servers: servers.to_vec(),
            infos,
            core: Box::new(core),
            calls: (0..CHUNKS).map(|_| None).collect(),
            ahead: (0..AHEAD).map(|_| Vec::new()).collect(),
            epoch: Instant::now(),
            last_work: Instant::now(),
            next_io: 0,
            holds: Holds::default(),
        })
    }

    /// The striped volume's size.
    pub fn size(&self) -> u64 {
        self.core.layout().volume_bytes()
    }

    /// Whether any server exports read-only (then so is the volume).
    pub fn read_only(&self) -> bool {
        self.infos.iter().any(|i| i.read_only)
    }

    pub fn layout(&self) -> &stripe::Layout {
        self.core.layout()
    }

    pub fn stats(&self) -> stripe::Stats {
        self.core.stats()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Read `buf.len()` bytes (4 KiB–1 MiB, aligned) at `offset`.
    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        self.next_io = self.next_io.wrapping_add(1);
        self.core.read(self.next_io, offset, len).map_err(|e| self.refusal(offset, len, e))?;
        self.run(Buf::Read(buf))
    }

    /// Write `data` (4 KiB–1 MiB, aligned) at `offset`; done once every chunk is
    /// acknowledged by its server.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        self.next_io = self.next_io.wrapping_add(1);
        self.core.write(self.next_io, offset, len).map_err(|e| self.refusal(offset, len, e))?;
        self.run(Buf::Write(data))
    }

    fn refusal(&self, offset: u64, len: u32, e: StripeError) -> anyhow::Error {
        anyhow!("{len} bytes at {offset} (striped volume of {} bytes): {e}", self.size())
    }

    /// Drive the striper until it hands the request back.
    fn run(&mut self, mut buf: Buf<'_>) -> anyhow::Result<()> {
        loop {
            let now = self.now();
            if self.core.poll_timeout().is_some_and(|t| t <= now) {
                self.core.handle_timeout(now);
            }
            while let Some(c) = self.core.poll_command(now) {
                self.execute(now, c, &mut buf);
            }
            if let Some(done) = self.core.poll_done() {
                return done.result.map_err(|e| self.failure(e));
            }
            self.pump();
            self.reap(&mut buf);
        }
    }

    /// A failed request in words, naming the server's node id and its error.
    fn failure(&self, e: StripeError) -> anyhow::Error {
        let node = |s: u16| self.servers.get(usize::from(s)).copied().unwrap_or(u16::MAX);
        match e {
            StripeError::Refused { server, code } => match BlockError::from_code(code) {
                Some(b) => anyhow!("stripe server {server} (node {}): {b}", node(server)),
                None => anyhow!("stripe server {server} (node {}): error {code}", node(server)),
            },
            StripeError::GaveUp { server, fault } => {
                let tries = self.core.config().tries;
                let what = match fault {
                    Fault::Timeout => "did not answer".to_string(),
                    Fault::Busy => "stayed out of buffers".to_string(),
                    f => format!("could not be sent to ({f:?})"),
                };
                anyhow!("stripe server {server} (node {}) {what}: gave up after {tries} tries", node(server))
            }
            e => anyhow!("{e}"),
        }
    }

    fn execute(&mut self, now: u64, c: Command<u32>, buf: &mut Buf<'_>) {
        match c {
            Command::Send(s) => {
                let dst = self.servers[usize::from(s.server)];
                let r = Range { offset: s.server_offset, len: s.len };
                let port = &mut self.station.port;
                let sent = match (s.dir, s.target, &*buf) {
                    (Dir::Write, Target::Request { at, .. }, Buf::Write(data)) => {
                        send_write(port, dst, r, &data[at as usize..(at + s.len) as usize])
                    }
                    (Dir::Read, _, _) => send_read(port, dst, r),
                    _ => Err(RpcError::Malformed),
                };
                match sent {
                    Ok(flight) => {
                        let call = Call { id: s.chunk, dir: s.dir, target: s.target, len: s.len, flight };
                        self.calls[usize::from(s.chunk.slot)] = Some(call);
                    }
                    Err(e) => {
                        self.core.handle_complete(now, s.chunk, Err(fault_of(e)));
                    }
                }
            }
            Command::Abandon(id) => {
                let slot = &mut self.calls[usize::from(id.slot)];
                if let Some(call) = slot.take_if(|c| c.id == id) {
                    let port = &mut self.station.port;
                    let _ = port.rpc.cancel(&mut port.node, call.flight.call);
                    self.holds.end(&mut port.node.frames, call.flight, false);
                }
            }
            Command::Copy { slot, slot_at, at, len, .. } => {
                // The striper copies only from a slot whose fetch landed (`reap` filled it)
                // into a read.
                let (src, Buf::Read(dst)) = (&self.ahead[usize::from(slot)], buf) else { return };
                let (from, to) = (slot_at as usize, at as usize);
                dst[to..to + len as usize].copy_from_slice(&src[from..from + len as usize]);
            }
        }
    }

    /// Report every call that ended to the striper, moving read data where it goes.
    fn reap(&mut self, buf: &mut Buf<'_>) {
        let now = self.now();
        for i in 0..self.calls.len() {
            let Some(call) = &self.calls[i] else { continue };
            let Some(outcome) = self.station.port.rpc.take_outcome(call.flight.call) else { continue };
            let Some(call) = self.calls[i].take() else { continue };
            let result = outcome.map(|_| ()).map_err(fault_of);
            let frames = &mut self.station.port.node.frames;
            match (result, call.dir, call.target, &mut *buf) {
                (Ok(()), Dir::Read, Target::Request { at, .. }, Buf::Read(dst)) => {
                    let dst = &mut dst[at as usize..(at + call.len) as usize];
                    copy_out(frames, &call.flight.frames, call.len, 0, dst);
                }
                (Ok(()), Dir::Read, Target::Ahead { slot }, _) => {
                    let piece = self.core.piece_bytes() as usize;
                    let dst = &mut self.ahead[usize::from(slot)];
                    dst.resize(piece, 0);
                    let n = (call.len as usize).min(piece);
                    copy_out(frames, &call.flight.frames, call.len, 0, &mut dst[..n]);
                }
                _ => {}
            }
            let id = call.id;
            self.holds.end(frames, call.flight, result.is_ok());
            self.core.handle_complete(now, id, result);
        }
    }

    /// One pass of the port; after [`SPIN`] idle, sleep on the link until an answer or
    /// the striper's next deadline (at most 1 ms).
    fn pump(&mut self) {
        let back = self.holds.poll(&mut self.station.port.node.frames);
        if self.station.port.poll() || back {
            self.last_work = Instant::now();
            return;
        }
        if self.last_work.elapsed() <= SPIN {
            return;
        }
        let now = self.now();
        let until = self.core.poll_timeout().map_or(1_000_000, |t| t.saturating_sub(now)).min(1_000_000);
        self.station.wait_link(Duration::from_nanos(until));
        self.last_work = Instant::now();
    }

    /// `FLUSH` on every server: every write acknowledged so far is durable.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        for k in 0..self.servers.len() {
            let s = self.servers[k];
            call_retried::<FlushOp>(&mut self.station, s, &()).with_context(|| format!("flush on server {s}"))?;
        }
        Ok(())
    }

    /// `TRIM` a range (aligned, at most 1 MiB): each stripe unit's part on its server.
    pub fn trim(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        let r = Range { offset, len };
        check_range(r, self.size(), MAX_REQUEST_BYTES)
            .map_err(|e| anyhow!("{len} bytes at {offset} (striped volume of {} bytes): {e}", self.size()))?;
        let layout = *self.core.layout();
        let g = u64::from(layout.grain());
        let (mut v, end) = (offset, offset + u64::from(len));
        while v < end {
            let n = ((v / g + 1) * g).min(end) - v;
            let (s, at) = layout.locate(v);
            let node = self.servers[usize::from(s)];
            call_retried::<TrimOp>(&mut self.station, node, &Range { offset: at, len: n as u32 })
                .with_context(|| format!("trim on server {node}"))?;
            v += n;
        }
        Ok(())
    }
}

/// A call with no payload, retried on timeouts and busy answers.
fn call_retried<O: Operation>(st: &mut Station<NoService>, dst: u16, req: &O::Request) -> anyhow::Result<Reply<Frame>> {
    let mut tries = 0;
    loop {
        tries += 1;
        match st.port.call_wait::<O>(dst, req, ReplyTo::None) {
            Ok(r) => return Ok(r),
            Err(e) if matches!(fault_of(e), Fault::Timeout | Fault::Busy) && tries < TRIES => {}
            Err(e) => return Err(error_of(e)),
        }
    }
}

fn info_of(st: &mut Station<NoService>, server: u16) -> anyhow::Result<Info> {
    let reply = call_retried::<InfoOp>(st, server, &())?;
    reply.decode::<Info>().map_err(|e| anyhow!("a malformed INFO reply: {e:?}"))
}

fn config_error(e: stripe::ConfigError, sc: &StripeConfig, smallest: u64) -> anyhow::Error {
    use stripe::ConfigError as C;
    match e {
        C::Sizes => anyhow!("grain {}: must be a positive multiple of {BLOCK_BYTES}", sc.grain),
        C::TooSmall => anyhow!("grain {}: the smallest server holds only {smallest} bytes", sc.grain),
        C::ReadAhead => anyhow!(
            "grain {} with read-ahead of {} stripes: the grain must be at most {STRIPE_READ_BYTES} or a multiple \
             of it, and the window at most {AHEAD} pieces",
            sc.grain,
            sc.readahead_stripes
        ),
        C::Depth => anyhow!("depth {} or tries {}: both must be at least 1", sc.depth, sc.tries),
        e => anyhow!("striping: {e:?}"),
    }
}
