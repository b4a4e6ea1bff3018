// SPDX-License-Identifier: GPL-2.0-only
//! The user-space client: a station of its own (frames in host RAM) talking to one
//! server. A request is cut into chunks ([`crate::proto`]) and up to `window` chunks are
//! in flight at once; a read chunk's reply lands, solicited, in the client's own frames
//! (gathered into one IPT entry when it spans several). A chunk that times out or finds
//! the server busy is sent again, at most [`TRIES`] times; an error reply ends the
//! request with that error.

use crate::proto::*;
use crate::station::{Placement, Station, StationConfig};
use anyhow::{anyhow, bail};
use netrpc::prelude::*;
use std::time::{Duration, Instant};
use trapeze_node::rpc::{Frame, Frames, RpcPort, Service};

/// Sends of one chunk before the request fails.
pub const TRIES: u32 = 4;
/// How long the client spins on its port with nothing happening before it sleeps on the
/// link (a wakeup costs 25–45 µs here; a spinning client on a busy two-core machine takes
/// the server's core).
pub const SPIN: Duration = Duration::from_micros(50);

/// The client serves nothing.
pub struct NoService;
impl Service for NoService {
    const READS_CLOCK: bool = false;
    fn serve(&mut self, _inc: &Incoming<'_, Frame>, _frames: &mut Frames) -> Action<Frame> {
        Action::Error(RpcError::UnknownOp)
    }
}

/// Which way a chunk's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

/// A chunk on its way.
struct Chunk {
    dir: Dir,
    call: CallId,
    /// Where in the request.
    at: usize,
    len: u32,
    /// Its frames (read: the reply's; write: the payload's) and the group naming them.
    frames: Vec<Frame>,
    group: Option<Frame>,
    tries: u32,
}

/// A client of one block server.
pub struct Client {
    pub station: Station<NoService>,
    server: u16,
    pub info: Info,
    /// Chunks in flight at most.
    pub window: usize,
    /// When the port last did something.
    last_work: Instant,
}

/// What a failed chunk means.
pub(crate) fn error_of(e: RpcError) -> anyhow::Error {
    match e {
        RpcError::Remote(c) => match BlockError::from_code(c) {
            Some(b) => anyhow!("server: {b}"),
            None => anyhow!("server error {c}"),
        },
        RpcError::Timeout => anyhow!("the server did not answer in time"),
        e => anyhow!("call failed: {e:?}"),
    }
}

fn retryable(e: RpcError) -> bool {
    e == RpcError::Timeout || e == BlockError::Busy.rpc()
}

impl Client {
    /// Open a station and ask `server` for its volume.
    pub fn connect(mut cfg: StationConfig, server: u16, window: usize) -> anyhow::Result<Client> {
        if window == 0 || window > 32 {
            bail!("window {window}: must be 1..=32 chunks");
        }
        cfg.placement = Placement::HostRam;
        cfg.region_bytes = cfg.region_bytes.max((window * 8 + 64) * FRAME_BYTES as usize);
        let station = Station::open(&cfg, NoService)?;
        let blank = Info { size: 0, path: DataPath::ViaRam, read_only: true };
        let mut c = Client { station, server, info: blank, window, last_work: Instant::now() };
        c.info = c.call_once::<InfoOp>(&())?.decode::<Info>().map_err(error_of)?;
        Ok(c)
    }

    /// The server's node id.
    pub fn server(&self) -> u16 {
        self.server
    }

    fn port(&mut self) -> &mut RpcPort<NoService> {
        &mut self.station.port
    }

    /// One pass of the port; after [`SPIN`] of passes that did nothing, sleep on the
    /// link (at most a millisecond, so timeouts still fire).
    fn pump(&mut self) {
        if self.station.port.poll() {
            self.last_work = Instant::now();
        } else if self.last_work.elapsed() > SPIN {
            self.station.wait_link(Duration::from_millis(1));
            self.last_work = Instant::now();
        }
    }

    /// A call with no payload, retried on timeouts, waited for.
    fn call_once<O: Operation>(&mut self, req: &O::Request) -> anyhow::Result<Reply<Frame>> {
        let mut tries = 0;
        loop {
            tries += 1;
            let dst = self.server;
            let o = self.port().call_wait::<O>(dst, req, ReplyTo::None);
            match o {
                Err(e) if retryable(e) && tries < TRIES => continue,
                o => return o.map_err(error_of),
            }
        }
    }

    /// Make sure the volume holds `[offset, offset + len)` and it is aligned.
    fn check(&self, offset: u64, len: usize) -> anyhow::Result<()> {
        let r = Range { offset, len: u32::try_from(len).unwrap_or(u32::MAX) };
        check_range(r, self.info.size, MAX_REQUEST_BYTES)
            .map_err(|e| anyhow!("{len} bytes at {offset} (volume of {} bytes): {e}", self.info.size))
    }

    /// Read `buf.len()` bytes (4 KiB–1 MiB, aligned) at `offset`.
    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.check(offset, buf.len())?;
        let mut next = 0usize;
        let mut flight: Vec<Chunk> = Vec::new();
        let mut failed = None;
        while failed.is_none() && (next < buf.len() || !flight.is_empty()) {
            while next < buf.len() && flight.len() < self.window {
                let len = read_chunk((buf.len() - next) as u32);
                match self.start_read(offset, next, len, 1) {
                    Ok(c) => flight.push(c),
                    Err(e) if flight.is_empty() => return Err(error_of(e)),
                    Err(_) => break,
                }
                next += len as usize;
            }
            self.pump();
            failed = self.reap_reads(offset, buf, &mut flight);
        }
        self.drain(flight);
        failed.map_or(Ok(()), Err)
    }

    fn start_read(&mut self, offset: u64, at: usize, len: u32, tries: u32) -> Result<Chunk, RpcError> {
        let r = Range { offset: offset + at as u64, len };
        let f = send_read(&mut self.station.port, self.server, r)?;
        Ok(Chunk { dir: Dir::Read, call: f.call, at, len, frames: f.frames, group: f.group, tries })
    }

    /// Take the outcomes of finished read chunks; resend retryable ones. The first error.
    fn reap_reads(&mut self, offset: u64, buf: &mut [u8], flight: &mut Vec<Chunk>) -> Option<anyhow::Error> {
        let mut i = 0;
        while i < flight.len() {
            let Some(o) = self.station.port.rpc.take_outcome(flight[i].call) else {
                i += 1;
                continue;
            };
            let c = flight.swap_remove(i);
            match o {
                Ok(_) => {
                    let frames = &mut self.station.port.node.frames;
                    copy_out(frames, &c.frames, c.len, 0, &mut buf[c.at..c.at + c.len as usize]);
                    finish(frames, &c, true);
                }
                Err(e) => {
                    finish(&mut self.station.port.node.frames, &c, false);
                    if !(retryable(e) && c.tries < TRIES) {
                        return Some(error_of(e));
                    }
                    match self.start_read(offset, c.at, c.len, c.tries + 1) {
                        Ok(again) => flight.push(again),
                        Err(e) => return Some(error_of(e)),
                    }
                }
            }
        }
        None
    }

    /// Write `data` (4 KiB–1 MiB, aligned) at `offset`; acknowledged chunk by chunk.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        self.check(offset, data.len())?;
        let mut next = 0usize;
        let mut flight: Vec<Chunk> = Vec::new();
        let mut failed = None;
        while failed.is_none() && (next < data.len() || !flight.is_empty()) {
            while next < data.len() && flight.len() < self.window {
                let len = (data.len() - next).min(WRITE_CHUNK_BYTES as usize) as u32;
                match self.start_write(offset, next, &data[next..next + len as usize], 1) {
                    Ok(c) => flight.push(c),
                    Err(e) if flight.is_empty() => return Err(error_of(e)),
                    Err(_) => break,
                }
                next += len as usize;
            }
            self.pump();
            failed = self.reap_writes(offset, data, &mut flight);
        }
        self.drain(flight);
        failed.map_or(Ok(()), Err)
    }

    fn start_write(&mut self, offset: u64, at: usize, data: &[u8], tries: u32) -> Result<Chunk, RpcError> {
        let r = Range { offset: offset + at as u64, len: data.len() as u32 };
        let f = send_write(&mut self.station.port, self.server, r, data)?;
        Ok(Chunk { dir: Dir::Write, call: f.call, at, len: r.len, frames: f.frames, group: None, tries })
    }

    fn reap_writes(&mut self, offset: u64, data: &[u8], flight: &mut Vec<Chunk>) -> Option<anyhow::Error> {
        let mut i = 0;
        while i < flight.len() {
            let Some(o) = self.station.port.rpc.take_outcome(flight[i].call) else {
                i += 1;
                continue;
            };
            let c = flight.swap_remove(i);
            // The request's send is done once its call ended: the payload frame is free.
            free_all(&mut self.station.port.node.frames, &c.frames, RpcError::Cancelled);
            if let Err(e) = o {
                if !(retryable(e) && c.tries < TRIES) {
                    return Some(error_of(e));
                }
                match self.start_write(offset, c.at, &data[c.at..c.at + c.len as usize], c.tries + 1) {
                    Ok(again) => flight.push(again),
                    Err(e) => return Some(error_of(e)),
                }
            }
        }
        None
    }

    /// Wait out chunks still in flight after a failure (each ends by its reply or its
    /// timeout), freeing their frames. A write's payload frame is not reused before its
    /// call ended: freed early, it could be sent as another write's data.
    fn drain(&mut self, mut flight: Vec<Chunk>) {
        while !flight.is_empty() {
            self.pump();
            let port = &mut self.station.port;
            flight.retain(|c| {
                let Some(o) = port.rpc.take_outcome(c.call) else { return true };
                match c.dir {
                    Dir::Read => finish(&mut port.node.frames, c, o.is_ok()),
                    Dir::Write => {
                        free_all(&mut port.node.frames, &c.frames, RpcError::Cancelled);
                    }
                }
                false
            });
        }
    }

    /// `FLUSH`: every write acknowledged so far is durable on the server's disk.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.call_once::<FlushOp>(&()).map(|_| ())
    }

    /// `TRIM` a range (aligned, at most 1 MiB).
    pub fn trim(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        self.check(offset, len as usize)?;
        self.call_once::<TrimOp>(&Range { offset, len }).map(|_| ())
    }

    /// One call as given, no payload either way, not retried: for probing what a server
    /// refuses.
    pub fn raw_call<O: Operation>(&mut self, req: &O::Request) -> Result<Reply<Frame>, RpcError> {
        let dst = self.server;
        self.port().call_wait::<O>(dst, req, ReplyTo::None)
    }

    /// One read chunk as given (solicited into fresh frames), not retried.
    pub fn raw_read(&mut self, offset: u64, len: u32) -> Result<(), RpcError> {
        let c = self.start_read(offset, 0, len, TRIES)?;
        loop {
            self.pump();
            if let Some(o) = self.station.port.rpc.take_outcome(c.call) {
                finish(&mut self.station.port.node.frames, &c, o.is_ok());
                return o.map(|_| ());
            }
        }
    }

    /// Wait for the server: poll for `d`.
    pub fn idle(&mut self, d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            self.pump();
        }
    }
}

/// A call on its way and the frames it holds: a read's reply frames (and the group naming
/// them when several), or a write's payload frame.
pub(crate) struct Flight {
    pub call: CallId,
    pub frames: Vec<Frame>,
    pub group: Option<Frame>,
}

/// Send read chunk `r` to `dst`, its reply solicited into fresh frames (gathered into one
/// IPT entry when it spans several). On `Err` nothing is held.
pub(crate) fn send_read(port: &mut RpcPort<NoService>, dst: u16, r: Range) -> Result<Flight, RpcError> {
    let (piece, n) = read_layout(r.len).ok_or(RpcError::Malformed)?;
    let frames = &mut port.node.frames;
    let mut mine = Vec::new();
    for _ in 0..n {
        match frames.alloc() {
            Some(f) => mine.push(f),
            None => return Err(free_all(frames, &mine, RpcError::TableFull)),
        }
    }
    let (frame, group) = match mine.as_slice() {
        [one] => (*one, None),
        _ => match frames.frames_mut().group(&mine, piece) {
            Some(g) => (g, Some(g)),
            None => return Err(free_all(frames, &mine, RpcError::TableFull)),
        },
    };
    let token = match frames.arm(frame) {
        Ok(t) => t,
        Err(_) => {
            if let Some(g) = group {
                frames.release(g);
            }
            return Err(free_all(frames, &mine, RpcError::TableFull));
        }
    };
    let rt = ReplyTo::Solicited { token: token.0, frame };
    let now = port.now();
    match port.rpc.call::<ReadOp>(now, &mut port.node, dst, &r, rt, Mode::Wait) {
        Ok(call) => Ok(Flight { call, frames: mine, group }),
        Err(e) => {
            port.node.frames.release(frame);
            Err(free_all(&mut port.node.frames, if group.is_some() { &mine } else { &[] }, e))
        }
    }
}

/// Send write chunk `r` to `dst` with `data` (at most one frame) as its payload.
pub(crate) fn send_write(port: &mut RpcPort<NoService>, dst: u16, r: Range, data: &[u8]) -> Result<Flight, RpcError> {
    let f = port.node.frames.alloc().ok_or(RpcError::TableFull)?;
    port.node.frames.write(f, data);
    let now = port.now();
    match port.rpc.call_with_payload::<WriteOp>(now, &mut port.node, dst, &r, (f, r.len), Mode::Wait) {
        Ok(call) => Ok(Flight { call, frames: vec![f], group: None }),
        Err(e) => Err(free_all(&mut port.node.frames, &[f], e)),
    }
}

/// Copy `dst.len()` bytes of a landed read chunk of `len` bytes, from its byte `from`.
pub(crate) fn copy_out(frames: &mut Frames, mine: &[Frame], len: u32, from: usize, dst: &mut [u8]) {
    let (piece, _) = read_layout(len).unwrap_or((len, 1));
    let piece = piece as usize;
    let mut done = 0;
    while done < dst.len() {
        let at = from + done;
        let (k, within) = (at / piece, at % piece);
        let n = (piece - within).min(dst.len() - done);
        if let Some(&f) = mine.get(k) {
            // A frame is its byte offset in the region: `f + within` is inside it.
            let _ = frames.read(f + within as u64, &mut dst[done..done + n]);
        }
        done += n;
    }
}

/// Free `frames` and pass `e` on.
fn free_all(frames: &mut Frames, mine: &[Frame], e: RpcError) -> RpcError {
    for &f in mine {
        frames.free(f);
    }
    e
}

/// A read call is over: its reply frame (or group) goes back — NetRPC already released it
/// if the call failed — and so do the frames a group named, unless the group outlived its
/// release: the port could not disarm its IPT entry because the NIC was still delivering
/// a (late) reply into it, and kept the group live rather than end it under the NIC. Its
/// frames then stay out of the pool (leaked, as the port counts the entry): freed, they
/// would be handed out again — as a write's payload, say — and the NIC's delivery would
/// finish into them.
pub(crate) fn finish_flight(frames: &mut Frames, f: &Flight, ok: bool) {
    end_read(frames, &f.frames, f.group, ok)
}

fn end_read(frames: &mut Frames, mine: &[Frame], group: Option<Frame>, ok: bool) {
    match group {
        Some(g) => {
            if ok {
                frames.release(g);
            }
            if frames.frames().group_frames(g) != Some(mine) {
                free_all(frames, mine, RpcError::Cancelled);
            }
        }
        None if ok => frames.release(mine[0]),
        None => {}
    }
}

/// [`finish_flight`] for a chunk of this client.
fn finish(frames: &mut Frames, c: &Chunk, ok: bool) {
    end_read(frames, &c.frames, c.group, ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::station::Placement;
    use std::net::UdpSocket;
    use trapeze_iface::ipt::{self, PayloadToken};

    fn free_port() -> std::net::SocketAddr {
        UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }

    /// A station whose only peer (node 9) never answers, and a 32 KiB read sent to it:
    /// its reply gathered into a group of frames armed in the IPT.
    fn read_in_flight() -> (Station<NoService>, Flight) {
        let cfg = StationConfig {
            node: 2,
            listen: free_port(),
            peers: vec![(9, free_port())],
            region_bytes: 4 << 20,
            placement: Placement::HostRam,
            call_timeout: Duration::from_secs(2),
        };
        let mut st = Station::open(&cfg, NoService).unwrap();
        let flight = send_read(&mut st.port, 9, Range { offset: 0, len: 32 * 1024 }).unwrap();
        assert!(flight.group.is_some() && flight.frames.len() > 1, "a 32 KiB reply spans several frames");
        (st, flight)
    }

    /// Whether any of `mine` can be allocated again (takes the whole pool).
    fn pool_hands_out(frames: &mut Frames, mine: &[Frame]) -> bool {
        let mut again = false;
        while let Some(f) = frames.alloc() {
            again |= mine.contains(&f);
        }
        again
    }

    #[test]
    fn a_read_given_up_on_gives_its_frames_back() {
        let (mut st, flight) = read_in_flight();
        let port = &mut st.port;
        port.rpc.cancel(&mut port.node, flight.call).unwrap();
        finish_flight(&mut port.node.frames, &flight, false);
        assert_eq!(port.node.frames.stats.leaked, 0);
        assert!(pool_hands_out(&mut port.node.frames, &flight.frames));
    }

    /// The striped client's abandon (and a NetRPC timeout) while the NIC has taken the
    /// late reply's header and claimed its IPT entry but not yet delivered the payload:
    /// the entry cannot be disarmed, so the reply's frames must never be handed out again
    /// (once they were, and the delivery finished into a write's payload: issue 35).
    #[test]
    fn a_read_given_up_on_while_the_nic_delivers_its_reply_keeps_its_frames_out_of_the_pool() {
        let (mut st, flight) = read_in_flight();
        let port = &mut st.port;
        let request = port.rpc.peek_transmit().expect("the read request is queued");
        let (h, _) = netrpc::wire::Header::parse(request.ctrl()).unwrap();
        let token = PayloadToken(h.token.payload_token);
        ipt::fw_claim(port.node.frames.ep.mem(), token, 32 * 1024).expect("the NIC claims the armed entry");
        port.rpc.cancel(&mut port.node, flight.call).unwrap();
        finish_flight(&mut port.node.frames, &flight, false);
        assert_eq!(port.node.frames.stats.leaked, 1, "the busy entry is counted");
        assert!(!pool_hands_out(&mut port.node.frames, &flight.frames), "a frame the NIC still writes was reused");
    }
}
