// SPDX-License-Identifier: GPL-2.0-only
//! The user-space client: a station of its own (frames in host RAM) talking to one
//! server. A request is cut into chunks ([`crate::proto`]) and up to `window` chunks are
//! in flight at once — a stream of read requests shares the window
//! ([`Client::read_stream`]); a read chunk's reply lands, solicited, in the client's own
//! frames (named by one group in one IPT entry). A chunk that times out or finds the
//! server busy is sent again, at most [`TRIES`] times; an error reply ends the request
//! with that error. A finished chunk's frames go back to the pool only once the NIC can
//! no longer touch them (the `hold` module).

use crate::hold::{Carries, Holds};
use crate::proto::*;
use crate::station::{Placement, Station, StationConfig};
use anyhow::{anyhow, bail};
use netrpc::prelude::*;
use std::time::{Duration, Instant};
use trapeze_node::rpc::{Frame, Frames, RpcPort, Service};

pub(crate) use crate::hold::Flight;

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

/// A chunk on its way: which request (of a stream), where in it, and its call.
struct Chunk {
    req: usize,
    at: usize,
    len: u32,
    tries: u32,
    flight: Flight,
}

/// A request being read by [`Client::read_stream`]: its buffer, the bytes whose chunks
/// went out, the chunks in flight, its first error.
struct Reading<B> {
    offset: u64,
    buf: B,
    sent: usize,
    in_flight: usize,
    failed: Option<anyhow::Error>,
}

impl<B: AsMut<[u8]>> Reading<B> {
    /// Chunks left to send (none once it failed).
    fn unsent(&mut self) -> bool {
        self.failed.is_none() && self.sent < self.buf.as_mut().len()
    }

    /// All its chunks are in (or it failed and none is in flight).
    fn over(&mut self) -> bool {
        self.in_flight == 0 && !self.unsent()
    }
}

/// Hand every read that is over to `done`.
fn finish<B: AsMut<[u8]>>(reads: &mut [Option<Reading<B>>], done: &mut impl FnMut(u64, B, anyhow::Result<()>)) {
    for slot in reads.iter_mut() {
        if slot.as_mut().is_some_and(Reading::over) {
            if let Some(r) = slot.take() {
                done(r.offset, r.buf, r.failed.map_or(Ok(()), Err));
            }
        }
    }
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
    /// Frames of finished calls the NIC may still touch.
    holds: Holds,
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
        let mut c = Client { station, server, info: blank, window, last_work: Instant::now(), holds: Holds::default() };
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
        let back = self.holds.poll(&mut self.station.port.node.frames);
        if self.station.port.poll() || back {
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
        let mut one = Some((offset, buf));
        let mut out = Ok(());
        self.read_stream(|| one.take(), |_, _, o| out = o);
        out
    }

    /// Reads as a stream: `next` gives the next request, `(offset, buffer)` as
    /// [`Self::read`] takes them, whenever the window has room for more chunks than the
    /// requests started so far still have to send (asked again later if it gives none);
    /// `done` takes each request back with its outcome as soon as its last chunk is in.
    /// Runs until every request is done and `next` gives none. So requests that arrive
    /// while others are in flight join the same window, and each finishes when its own
    /// bytes have come; one that fails stops only its own chunks.
    pub fn read_stream<B: AsMut<[u8]>>(
        &mut self,
        mut next: impl FnMut() -> Option<(u64, B)>,
        mut done: impl FnMut(u64, B, anyhow::Result<()>),
    ) {
        let mut reads: Vec<Option<Reading<B>>> = Vec::new();
        let mut flight: Vec<Chunk> = Vec::new();
        loop {
            while flight.len() < self.window {
                let Some(k) = self.next_chunk(&mut reads, &mut next, &mut done) else { break };
                let r = reads[k].as_mut().expect("next_chunk names a live read");
                let len = read_chunk((r.buf.as_mut().len() - r.sent) as u32);
                match self.start_read(k, r.offset, r.sent, len, 1) {
                    Ok(c) => {
                        r.sent += len as usize;
                        r.in_flight += 1;
                        flight.push(c);
                    }
                    // Nothing in flight to free what the call lacked: the read fails.
                    Err(e) if flight.is_empty() => r.failed = Some(error_of(e)),
                    Err(_) => break,
                }
            }
            finish(&mut reads, &mut done);
            // Nothing in flight: the window had room, so `next` gave none.
            if flight.is_empty() && reads.iter().all(Option::is_none) {
                return;
            }
            self.pump();
            self.reap_reads(&mut reads, &mut flight);
        }
    }

    /// The read whose next chunk goes out now: the oldest with chunks left to send,
    /// taking a new request from `next` when none has; finished reads handed to `done`.
    fn next_chunk<B: AsMut<[u8]>>(
        &mut self,
        reads: &mut Vec<Option<Reading<B>>>,
        next: &mut impl FnMut() -> Option<(u64, B)>,
        done: &mut impl FnMut(u64, B, anyhow::Result<()>),
    ) -> Option<usize> {
        loop {
            finish(reads, done);
            if let Some(k) = reads.iter_mut().position(|r| r.as_mut().is_some_and(Reading::unsent)) {
                return Some(k);
            }
            let (offset, mut buf) = next()?;
            let failed = self.check(offset, buf.as_mut().len()).err();
            let r = Reading { offset, buf, sent: 0, in_flight: 0, failed };
            match reads.iter().position(Option::is_none) {
                Some(free) => reads[free] = Some(r),
                None => reads.push(Some(r)),
            }
        }
    }

    fn start_read(&mut self, req: usize, offset: u64, at: usize, len: u32, tries: u32) -> Result<Chunk, RpcError> {
        let r = Range { offset: offset + at as u64, len };
        let flight = send_read(&mut self.station.port, self.server, r)?;
        Ok(Chunk { req, at, len, tries, flight })
    }

    /// Take the outcomes of finished read chunks: copy out their bytes, resend retryable
    /// ones; a read's first error is its outcome (its later chunks are only reaped).
    fn reap_reads<B: AsMut<[u8]>>(&mut self, reads: &mut [Option<Reading<B>>], flight: &mut Vec<Chunk>) {
        let mut i = 0;
        while i < flight.len() {
            let Some(o) = self.station.port.rpc.take_outcome(flight[i].flight.call) else {
                i += 1;
                continue;
            };
            let c = flight.swap_remove(i);
            let frames = &mut self.station.port.node.frames;
            let Some(r) = reads[c.req].as_mut() else {
                self.holds.end(frames, c.flight, o.is_ok());
                continue;
            };
            let live = r.failed.is_none();
            if o.is_ok() && live {
                copy_out(frames, &c.flight.frames, c.len, 0, &mut r.buf.as_mut()[c.at..c.at + c.len as usize]);
            }
            let (k, at, len, tries) = (c.req, c.at, c.len, c.tries);
            self.holds.end(frames, c.flight, o.is_ok());
            r.in_flight -= 1;
            match o {
                Err(e) if live && retryable(e) && tries < TRIES => {
                    match self.start_read(k, r.offset, at, len, tries + 1) {
                        Ok(again) => {
                            r.in_flight += 1;
                            flight.push(again);
                        }
                        Err(e) => r.failed = Some(error_of(e)),
                    }
                }
                Err(e) if live => r.failed = Some(error_of(e)),
                _ => {}
            }
        }
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
        let flight = send_write(&mut self.station.port, self.server, r, data)?;
        Ok(Chunk { req: 0, at, len: r.len, tries, flight })
    }

    fn reap_writes(&mut self, offset: u64, data: &[u8], flight: &mut Vec<Chunk>) -> Option<anyhow::Error> {
        let mut i = 0;
        while i < flight.len() {
            let Some(o) = self.station.port.rpc.take_outcome(flight[i].flight.call) else {
                i += 1;
                continue;
            };
            let c = flight.swap_remove(i);
            let (at, len, tries) = (c.at, c.len, c.tries);
            // A call that timed out may end before its request left: the payload frame
            // waits for the sends posted so far.
            self.holds.end(&mut self.station.port.node.frames, c.flight, o.is_ok());
            if let Err(e) = o {
                if !(retryable(e) && tries < TRIES) {
                    return Some(error_of(e));
                }
                match self.start_write(offset, at, &data[at..at + len as usize], tries + 1) {
                    Ok(again) => flight.push(again),
                    Err(e) => return Some(error_of(e)),
                }
            }
        }
        None
    }

    /// Wait out chunks still in flight after a failure (each ends by its reply or its
    /// timeout); their frames go back as the `hold` module says.
    fn drain(&mut self, mut flight: Vec<Chunk>) {
        while !flight.is_empty() {
            self.pump();
            let mut k = 0;
            while k < flight.len() {
                let Some(o) = self.station.port.rpc.take_outcome(flight[k].flight.call) else {
                    k += 1;
                    continue;
                };
                let c = flight.swap_remove(k);
                self.holds.end(&mut self.station.port.node.frames, c.flight, o.is_ok());
            }
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
        let c = self.start_read(0, offset, 0, len, TRIES)?;
        loop {
            self.pump();
            if let Some(o) = self.station.port.rpc.take_outcome(c.flight.call) {
                self.holds.end(&mut self.station.port.node.frames, c.flight, o.is_ok());
                return o.map(|_| ());
            }
        }
    }

    /// `f`'s call is over (`ok`: it succeeded): its frames go back now, or once the NIC
    /// can no longer touch them (the `hold` module).
    pub(crate) fn end_flight(&mut self, f: Flight, ok: bool) {
        self.holds.end(&mut self.station.port.node.frames, f, ok);
    }

    /// Frames of finished calls the NIC may still touch back in the pool, once it is done
    /// with them (the `hold` module); whether any came back.
    pub(crate) fn poll_holds(&mut self) -> bool {
        self.holds.poll(&mut self.station.port.node.frames)
    }

    /// Wait for the server: poll for `d`.
    pub fn idle(&mut self, d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            self.pump();
        }
    }
}

/// Send read chunk `r` to `dst`, its reply solicited into fresh frames named by one group
/// armed in one IPT entry (a group even of one frame: the `hold` module). On `Err` nothing
/// is held.
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
    let Some(group) = frames.frames_mut().group(&mine, piece) else {
        return Err(free_all(frames, &mine, RpcError::TableFull));
    };
    let token = match frames.arm(group) {
        Ok(t) => t,
        Err(_) => {
            frames.release(group);
            return Err(free_all(frames, &mine, RpcError::TableFull));
        }
    };
    let rt = ReplyTo::Solicited { token: token.0, frame: group };
    let now = port.now();
    match port.rpc.call::<ReadOp>(now, &mut port.node, dst, &r, rt, Mode::Wait) {
        Ok(call) => Ok(Flight { call, frames: mine, carries: Carries::Reply { group, token } }),
        Err(e) => {
            // Nothing was queued: the entry is disarmed at once.
            port.node.frames.release(group);
            Err(free_all(&mut port.node.frames, &mine, e))
        }
    }
}

/// Send write chunk `r` to `dst` with `data` (at most one frame) as its payload.
pub(crate) fn send_write(port: &mut RpcPort<NoService>, dst: u16, r: Range, data: &[u8]) -> Result<Flight, RpcError> {
    let f = port.node.frames.alloc().ok_or(RpcError::TableFull)?;
    port.node.frames.write(f, data);
    let now = port.now();
    match port.rpc.call_with_payload::<WriteOp>(now, &mut port.node, dst, &r, (f, r.len), Mode::Wait) {
        Ok(call) => Ok(Flight { call, frames: vec![f], carries: Carries::Payload }),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::Carries;
    use std::net::UdpSocket;
    use trapeze_iface::ipt::{self, IptEntry, PayloadToken};

    fn free_port() -> std::net::SocketAddr {
        UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }

    /// A station whose only peer (node 9) never answers.
    fn station() -> Station<NoService> {
        let cfg = StationConfig {
            node: 2,
            listen: free_port(),
            peers: vec![(9, free_port())],
            region_bytes: 4 << 20,
            placement: Placement::HostRam,
            call_timeout: Duration::from_secs(2),
        };
        Station::open(&cfg, NoService).unwrap()
    }

    fn reply_of(f: &Flight) -> (Frame, PayloadToken) {
        match f.carries {
            Carries::Reply { group, token } => (group, token),
            Carries::Payload => panic!("not a read"),
        }
    }

    /// Whether every one of `mine` (`true`) or none of them (`false`) is in the pool; the
    /// pool is left as it was.
    fn in_pool(frames: &mut Frames, mine: &[Frame]) -> Option<bool> {
        let taken: Vec<Frame> = std::iter::from_fn(|| frames.alloc()).collect();
        let n = mine.iter().filter(|f| taken.contains(f)).count();
        for &f in taken.iter().rev() {
            frames.free(f);
        }
        match n {
            0 => Some(false),
            n if n == mine.len() => Some(true),
            _ => None,
        }
    }

    #[test]
    fn a_read_given_up_on_gives_its_frames_back_at_once() {
        for len in [4096, 8192, 32 * 1024] {
            let mut st = station();
            let port = &mut st.port;
            let flight = send_read(port, 9, Range { offset: 0, len }).unwrap();
            let mine = flight.frames.clone();
            port.rpc.cancel(&mut port.node, flight.call).unwrap();
            let mut holds = Holds::default();
            holds.end(&mut port.node.frames, flight, false);
            assert_eq!((port.node.frames.stats.leaked, holds.delivering()), (0, 0), "{len} bytes");
            assert_eq!(in_pool(&mut port.node.frames, &mine), Some(true), "{len} bytes");
            assert_eq!(port.node.frames.ep.ipt_in_use(), 0, "{len} bytes");
        }
    }

    /// The striped client's abandon (and a NetRPC timeout) while the NIC has taken a late
    /// reply's header and claimed its IPT entry but not yet delivered the payload: the
    /// entry cannot be disarmed, so the reply's frames stay out of the pool (handed out,
    /// the delivery would finish into a write's payload: issue 35) — and come back, with
    /// the entry, once the NIC has finished the delivery or backed off (kept for ever,
    /// every idle gap with a read-ahead fetch in flight cost an entry and its frames).
    #[test]
    fn a_read_given_up_on_while_the_nic_delivers_its_reply_gets_its_frames_back_once_the_nic_is_done() {
        for (len, completes) in [(32 * 1024, true), (4096, true), (32 * 1024, false)] {
            let mut st = station();
            let port = &mut st.port;
            let flight = send_read(port, 9, Range { offset: 0, len }).unwrap();
            let (mine, (group, token)) = (flight.frames.clone(), reply_of(&flight));
            let mem = port.node.frames.ep.mem();
            let claim = ipt::fw_claim(mem, token, len).expect("the NIC claims the armed entry");
            port.rpc.cancel(&mut port.node, flight.call).unwrap();
            let mut holds = Holds::default();
            holds.end(&mut port.node.frames, flight, false);
            let frames = &mut port.node.frames;
            assert_eq!((frames.stats.leaked, holds.delivering()), (1, 1), "{len} bytes: the busy entry is kept");
            assert_eq!(in_pool(frames, &mine), Some(false), "{len} bytes: a frame the NIC still writes was reused");
            assert!(!holds.poll(frames), "{len} bytes: nothing comes back while the NIC delivers");
            assert_eq!(in_pool(frames, &mine), Some(false));
            let entry = IptEntry::new(frames.ep.mem(), token.index()).unwrap();
            if completes {
                entry.fw_complete(&claim, len);
            } else {
                entry.fw_release(&claim);
            }
            assert!(holds.poll(frames), "{len} bytes: the delivery is over");
            assert_eq!((holds.delivering(), holds.recovered), (0, 1));
            assert_eq!(in_pool(frames, &mine), Some(true), "{len} bytes: the frames came back");
            assert_eq!(frames.ep.ipt_in_use(), 0, "{len} bytes: the entry came back");
            assert_eq!(frames.frames().group_frames(group), None, "{len} bytes: the group ended");
        }
    }

    /// A write whose call ends (a timeout, a cancel) before the NIC sent its request: the
    /// payload frame is not handed out again until the send completed — the NIC reads the
    /// frame's bytes when the packet leaves, so the next write's data (or a reply) put in
    /// it meanwhile would go out as this write's.
    #[test]
    fn a_write_given_up_on_before_its_request_left_keeps_its_payload_frame_until_the_send_completed() {
        let mut st = station();
        let port = &mut st.port;
        let flight = send_write(port, 9, Range { offset: 0, len: 8192 }, &[7u8; 8192]).unwrap();
        let mine = flight.frames.clone();
        // Posted to the send ring, the NIC not run yet (as behind a busy link).
        let t = port.rpc.peek_transmit().expect("the write request is queued");
        assert!(port.node.frames.post(t, 1, |_| {}));
        port.rpc.consume_transmit();
        port.rpc.cancel(&mut port.node, flight.call).unwrap();
        let mut holds = Holds::default();
        holds.end(&mut port.node.frames, flight, false);
        assert_eq!(in_pool(&mut port.node.frames, &mine), Some(false), "a payload frame still to be sent was reused");
        for _ in 0..1000 {
            port.poll();
            if port.node.frames.in_limbo() == 0 {
                break;
            }
        }
        assert_eq!(port.node.frames.in_limbo(), 0, "the send completed");
        assert_eq!(in_pool(&mut port.node.frames, &mine), Some(true));
    }
}
