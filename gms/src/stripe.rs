// SPDX-License-Identifier: GPL-2.0-only
//! Striping a volume over block servers, after Slice: the client-side policy that cuts a
//! user's request into per-server chunks, keeps every server busy, reads ahead of a
//! sequential stream and retries what failed — sans-IO, `no_std`, no heap, no `unsafe`.
//!
//! **Layout** ([`Layout`]): round-robin at a grain (32 KiB by default, Slice's). Volume
//! byte `v` is in stripe unit `u = v / grain`, on server `u % n`, at byte
//! `(u / n) * grain + v % grain` of that server. The volume is `n` times the smallest
//! server's whole units.
//!
//! **Requests.** [`Striper::read`] and [`Striper::write`] accept a request (aligned, at most
//! [`Config::max_request_bytes`]) with the caller's handle `Io`. Each request keeps one
//! cursor per server: the next piece of the request on that server. A piece lies in one
//! unit and is at most a read or write chunk long (the protocol's limits), so each is one
//! call. [`Striper::poll_command`] hands out sends round-robin over the servers, oldest
//! request first, at most [`Config::depth`] chunks in flight per server — so requests to
//! every server are in flight at once and a slow server holds up only its own pieces.
//!
//! **Completions** come in any order ([`Striper::handle_complete`]); each names its chunk
//! and generation, so a late answer to a chunk given up on is ignored. A chunk that timed
//! out (its deadline passed: [`Striper::poll_timeout`], [`Striper::handle_timeout`]), found
//! its server busy or could not be sent goes again after [`Config::retry_delay_ns`], at
//! most [`Config::tries`] sends in all; then its request fails with
//! [`StripeError::GaveUp`]. An error answer (`Refused`) fails it at once. A failed
//! request's other chunks are abandoned (the driver cancels their calls:
//! [`Command::Abandon`], always before the request is handed back), so no answer lands
//! in a buffer the user has been given back.
//!
//! **Read-ahead.** From the second read that starts where the previous one ended, the
//! striper fetches the next [`Config::readahead_stripes`] stripes beyond the stream's end
//! into ahead slots (`AHEAD` of them, each one *piece*: a unit, or a read chunk of a unit
//! larger than a chunk; the driver owns their buffers). A read that covers a slot's piece
//! waits for it and takes its bytes by [`Command::Copy`] instead of sending. Ahead fetches
//! go only when a server has room after the users' pieces; a write invalidates every slot
//! it overlaps, and no fetch starts over a write in flight, so a slot never holds data
//! older than an acknowledged write. Slots outside the window are let go.
//!
//! **Call order**, for a driver: commands `read`/`write`; then repeatedly
//! `poll_command` until `None` (send, cancel, copy), `poll_done` until `None`, wait until
//! an answer or `poll_timeout`, `handle_complete` / `handle_timeout`. Time is always a
//! parameter (ns). Capacities are const generics: `SERVERS` servers, `REQS` (≤ 32)
//! requests, `CHUNKS` chunk slots (at least `depth` × servers), `AHEAD` ahead slots.

use core::fmt;

/// Slice's stripe grain.
pub const DEFAULT_GRAIN_BYTES: u32 = 32 * 1024;

/// Which way a request's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// Why one send of a chunk failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No answer before the deadline.
    Timeout,
    /// The server was out of buffers.
    Busy,
    /// The driver could not send it (no frame, no call slot).
    NotSent,
    /// The server answered with this error code: not retried.
    Refused(u16),
}

impl Fault {
    fn retryable(self) -> bool {
        !matches!(self, Fault::Refused(_))
    }
}

/// Why a request was refused or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StripeError {
    /// Empty, or longer than [`Config::max_request_bytes`].
    BadLength,
    /// Offset or length not a multiple of the block size.
    Misaligned,
    /// The range ends past the end of the volume.
    PastEnd,
    /// Every request slot is in use: submit again after a completion.
    Busy,
    /// A chunk on `server` was sent [`Config::tries`] times; the last send ended so.
    GaveUp { server: u16, fault: Fault },
    /// `server` answered a chunk with error `code`.
    Refused { server: u16, code: u16 },
}

impl fmt::Display for StripeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StripeError::BadLength => f.write_str("the request is empty or longer than allowed"),
            StripeError::Misaligned => f.write_str("offset or length is not a multiple of the block size"),
            StripeError::PastEnd => f.write_str("the range ends past the end of the striped volume"),
            StripeError::Busy => f.write_str("every request slot is in use"),
            StripeError::GaveUp { server, fault: Fault::Timeout } => {
                write!(f, "stripe server {server} did not answer (gave up after retries)")
            }
            StripeError::GaveUp { server, fault } => write!(f, "stripe server {server}: {fault:?} on every try"),
            StripeError::Refused { server, code } => write!(f, "stripe server {server} refused a chunk (error {code})"),
        }
    }
}

/// What is wrong with a striper's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// No server, or more than the striper's `SERVERS`.
    Servers,
    /// The grain, a chunk limit or the request limit is zero or not a multiple of the block.
    Sizes,
    /// A server holds less than one grain.
    TooSmall,
    /// Depth zero, tries zero, or depth × servers over the chunk slots.
    Depth,
    /// More than 32 request slots (waiters are a bitmask), or none.
    Requests,
    /// The read-ahead window is more than `AHEAD` slots, or the grain is larger than a
    /// read chunk without being a multiple of it.
    ReadAhead,
}

/// Where the stripe units are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    servers: u16,
    grain: u32,
    units_per_server: u64,
}

impl Layout {
    /// `servers` servers of at least `server_bytes` each, striped at `grain` (a multiple
    /// of `block`).
    pub fn new(servers: u16, grain: u32, block: u32, server_bytes: u64) -> Result<Layout, ConfigError> {
        if servers == 0 {
            return Err(ConfigError::Servers);
        }
        if block == 0 || grain == 0 || !grain.is_multiple_of(block) {
            return Err(ConfigError::Sizes);
        }
        let units_per_server = server_bytes / u64::from(grain);
        if units_per_server == 0 {
            return Err(ConfigError::TooSmall);
        }
        Ok(Layout { servers, grain, units_per_server })
    }

    pub fn servers(&self) -> u16 {
        self.servers
    }

    pub fn grain(&self) -> u32 {
        self.grain
    }

    /// The striped volume's size in bytes.
    pub fn volume_bytes(&self) -> u64 {
        self.units_per_server * u64::from(self.servers) * u64::from(self.grain)
    }

    /// Where volume byte `v` lives: (server, byte offset on that server).
    pub fn locate(&self, v: u64) -> (u16, u64) {
        let (g, n) = (u64::from(self.grain), u64::from(self.servers));
        let unit = v / g;
        ((unit % n) as u16, (unit / n) * g + v % g)
    }

    /// The volume byte that byte `at` of `server` holds (the inverse of [`Self::locate`]).
    pub fn volume_offset(&self, server: u16, at: u64) -> u64 {
        let (g, n) = (u64::from(self.grain), u64::from(self.servers));
        ((at / g) * n + u64::from(server)) * g + at % g
    }

    /// The first byte at or after `v` that lies on `server`.
    fn first_on(&self, server: u16, v: u64) -> u64 {
        let (g, n) = (u64::from(self.grain), u64::from(self.servers));
        let unit = v / g;
        let ahead = (u64::from(server) + n - unit % n) % n;
        if ahead == 0 {
            v
        } else {
            (unit + ahead) * g
        }
    }

    /// After a piece of `server` ending at `end`: where its next piece starts.
    fn next_on(&self, end: u64) -> u64 {
        let g = u64::from(self.grain);
        if end.is_multiple_of(g) {
            end + (u64::from(self.servers) - 1) * g
        } else {
            end
        }
    }
}

/// How a striper behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub grain_bytes: u32,
    /// Every offset and length is a multiple of it.
    pub block_bytes: u32,
    /// A read chunk (one call) at most, and a write chunk.
    pub max_read_bytes: u32,
    pub max_write_bytes: u32,
    /// A user request at most.
    pub max_request_bytes: u32,
    /// Chunks in flight per server at most.
    pub depth: u16,
    /// A chunk not answered this long after its send is given up on and sent again.
    pub chunk_timeout_ns: u64,
    /// Sends of one chunk at most.
    pub tries: u8,
    /// The pause before a failed chunk goes again.
    pub retry_delay_ns: u64,
    /// Stripes read ahead of a sequential stream (0: none).
    pub readahead_stripes: u16,
}

impl Config {
    /// Slice's grain, gmblock's chunk limits, 8 chunks per server, a 2 s chunk timeout,
    /// four tries, two stripes of read-ahead.
    pub const DEFAULT: Config = Config {
        grain_bytes: DEFAULT_GRAIN_BYTES,
        block_bytes: 4096,
        max_read_bytes: 64 * 1024,
        max_write_bytes: 8 * 1024,
        max_request_bytes: 1 << 20,
        depth: 8,
        chunk_timeout_ns: 2_000_000_000,
        tries: 4,
        retry_delay_ns: 1_000_000,
        readahead_stripes: 2,
    };
}

impl Default for Config {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Names one send of a chunk: its slot and the slot's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkId {
    pub slot: u16,
    pub generation: u16,
}

/// Where a chunk's data comes from (write) or goes (read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<Io> {
    /// The user's request `io`, from its byte `at`.
    Request { io: Io, at: u32 },
    /// Ahead slot `slot` (a read ahead; the whole slot, from its start).
    Ahead { slot: u16 },
}

/// One call to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Send<Io> {
    pub chunk: ChunkId,
    pub dir: Dir,
    pub server: u16,
    pub server_offset: u64,
    /// Where the chunk is in the volume (for the driver's checks and logs).
    pub volume_offset: u64,
    pub len: u32,
    pub target: Target<Io>,
}

/// What the driver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Command<Io> {
    /// Make this call; report its end to [`Striper::handle_complete`].
    Send(Send<Io>),
    /// Cancel this call: its answer is no longer wanted (free what it holds).
    Abandon(ChunkId),
    /// Copy `len` bytes from ahead slot `slot` at `slot_at` into request `io` at `at`.
    Copy { slot: u16, slot_at: u32, io: Io, at: u32, len: u32 },
}

/// A finished request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done<Io> {
    pub io: Io,
    pub result: Result<(), StripeError>,
}

/// What a striper counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub failed: u64,
    pub sends: u64,
    pub retries: u64,
    pub timeouts: u64,
    pub ahead_fetches: u64,
    /// Bytes users took from ahead slots.
    pub ahead_bytes_used: u64,
}

/// A chunk slot's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    /// Sent; given up on at `deadline`.
    Flying {
        deadline: u64,
    },
    /// To be sent again at `at`.
    Waiting {
        at: u64,
    },
    /// Given up on: the driver must cancel it, then it goes again (`retry`) or is dropped.
    Cancel {
        retry: Option<u64>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Request(u8),
    Ahead(u16),
}

#[derive(Clone, Copy, Debug)]
struct Chunk {
    slot: Slot,
    generation: u16,
    owner: Owner,
    dir: Dir,
    volume_offset: u64,
    len: u32,
    tries: u8,
}

impl Chunk {
    const FREE: Chunk = Chunk {
        slot: Slot::Free,
        generation: 0,
        owner: Owner::Ahead(0),
        dir: Dir::Read,
        volume_offset: 0,
        len: 0,
        tries: 0,
    };
}

/// An ahead slot's state: which piece it holds, whether a write made it stale (then no
/// new reader joins and it is let go once its readers are done), the requests that read
/// from it (bit `r`: request slot `r`, until that request ends) and those it has served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ahead {
    Free,
    Fetching { piece: u64, stale: bool, waiters: u32 },
    Ready { piece: u64, stale: bool, waiters: u32, served: u32 },
}

impl Ahead {
    /// The piece it holds for new readers.
    fn fresh_piece(self) -> Option<u64> {
        match self {
            Ahead::Fetching { piece, stale: false, .. } | Ahead::Ready { piece, stale: false, .. } => Some(piece),
            _ => None,
        }
    }
}

/// A user's request.
#[derive(Clone, Copy, Debug)]
struct Req<Io, const SERVERS: usize> {
    io: Io,
    seq: u64,
    dir: Dir,
    offset: u64,
    end: u64,
    /// Per server: where its next piece starts (`end` or beyond: none left).
    next: [u64; SERVERS],
    /// Bytes not yet done.
    left: u32,
    /// Chunk slots it owns.
    owned: u16,
    failed: Option<StripeError>,
}

mod engine;
mod readahead;
#[cfg(test)]
mod tests;

/// The striping policy for one volume over up to `SERVERS` servers.
pub struct Striper<Io, const SERVERS: usize, const REQS: usize, const CHUNKS: usize, const AHEAD: usize> {
    cfg: Config,
    layout: Layout,
    /// Bytes of an ahead piece: the grain, or a read chunk when the grain is larger.
    piece_bytes: u32,
    reqs: [Option<Req<Io, SERVERS>>; REQS],
    chunks: [Chunk; CHUNKS],
    ahead: [Ahead; AHEAD],
    /// Chunks in flight per server.
    flying: [u16; SERVERS],
    /// Where sends start their round over the servers.
    turn: u16,
    seq: u64,
    /// The end of the last read accepted, and how many reads in a row started there.
    stream_end: u64,
    run: u32,
    /// Per server: the next piece of the window it may fetch ahead.
    ahead_next: [u64; SERVERS],
    stats: Stats,
}
