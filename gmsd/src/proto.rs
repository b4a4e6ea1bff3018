// SPDX-License-Identifier: GPL-2.0-only
//! The control protocol between `gms` clients and a `gmsd` daemon over its UNIX stream
//! socket: length-prefixed binary frames (the page data stays binary; only `stat`
//! answers in JSON).
//!
//! Every message is `u32 length (LE)` + body, at most [`MAX_FRAME_BYTES`]. A request body
//! starts with an op byte; a reply body with a status byte (`0` ok, `1` error + UTF-8
//! message). Integers are little-endian.
//!
//! | request | body after the op byte | ok reply after the status byte |
//! |---|---|---|
//! | `PUT` (1) | `u32 n`, n × (`u64 vol`, `u64 page`, `u32 len`, data) | `u32 n`, n × (`u8 outcome`, `u64 version`, `u8 k`, k × `u16 node`) |
//! | `GET` (2) | `u8 flags` (bit 0: network only), `u32 n`, n × (`u64 vol`, `u64 page`) | `u32 n`, n × (`u8 0` miss, `u8 why`, `u16 node` \| `u8 1` hit, `u8 source`, `u64 version`, `u32 len`, data) |
//! | `STAT` (3) | — | JSON of [`Stat`] |
//!
//! A put's nodes: for `Stored` the holders of replicas 0, 1, …; for `TooFewTargets` the
//! live nodes a replica could go to, `version` being the replicas asked for; for `Failed`
//! the node that did not answer.

use anyhow::{bail, Context};
use gms::prelude::PageId;
use gms::replica::MAX_REPLICAS;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{Read, Write};
use std::str::FromStr;

/// Size of a page (the GMS frame size). A put carries 1 to this many bytes; a shorter one
/// is stored padded with zeros, and a get returns the whole page.
pub const PAGE_BYTES: usize = trapeze_node::rpc::FRAME_BYTES as usize;
/// Largest message either side accepts (a batch of 1024 pages plus headers).
pub const MAX_FRAME_BYTES: usize = 1024 * (PAGE_BYTES + 32) + 64;
/// Most pages in one batch (fits [`MAX_FRAME_BYTES`]).
pub const MAX_BATCH: usize = 1024;

pub const OP_PUT: u8 = 1;
pub const OP_GET: u8 = 2;
pub const OP_STAT: u8 = 3;
pub const STATUS_OK: u8 = 0;
pub const STATUS_ERR: u8 = 1;
/// GET flag: plain getpage over the network (no local page cache, no read-ahead).
pub const GET_NETWORK_ONLY: u8 = 1;

/// A page named on a command line as `VOL:PAGE` (both decimal or 0x-hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRef(pub PageId);

impl FromStr for PageRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| -> Option<u64> {
            let x = x.trim();
            match x.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => x.parse().ok(),
            }
        };
        let (v, p) = s.split_once(':').ok_or_else(|| format!("bad page {s:?}: expected VOL:PAGE, e.g. 1:42"))?;
        match (num(v), num(p)) {
            (Some(v), Some(p)) => Ok(PageRef(PageId::new(v, p))),
            _ => Err(format!("bad page {s:?}: VOL and PAGE must be unsigned 64-bit numbers, e.g. 1:42")),
        }
    }
}

impl fmt::Display for PageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0.space, self.0.page)
    }
}

/// Up to [`MAX_REPLICAS`] node ids: the holders of a page's replicas, 0 first.
#[derive(Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes {
    len: u8,
    ids: [u16; MAX_REPLICAS as usize],
}

impl Nodes {
    /// The first [`MAX_REPLICAS`] of `ids`.
    pub fn new(ids: &[u16]) -> Self {
        let mut n = Nodes::default();
        for &id in ids.iter().take(MAX_REPLICAS as usize) {
            n.ids[n.len as usize] = id;
            n.len += 1;
        }
        n
    }
    pub fn as_slice(&self) -> &[u16] {
        &self.ids[..self.len as usize]
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn contains(&self, n: u16) -> bool {
        self.as_slice().contains(&n)
    }
}

impl fmt::Debug for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// `node 1` or `nodes 1, 2`.
impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.as_slice().iter().map(u16::to_string).collect();
        write!(f, "node{} {}", if self.len == 1 { "" } else { "s" }, list.join(", "))
    }
}

/// How a put ended (GMS's [`gms::prelude::PutResult`], plus errors of the daemon).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutOutcome {
    /// Every replica stored, replica `k` at node `targets[k]`; `version`: the write's
    /// (a replica put again after a refusal or timeout is at a newer one).
    Stored { targets: Nodes, version: u64 },
    /// The target had no room (its budget is full) or was busy with the page.
    Refused,
    /// A newer version of the page (or a discard) is already recorded.
    Superseded,
    /// Membership changed while the page was being stored.
    WrongView,
    /// No answer in time (twice) or the target left: whether it is stored is unknown.
    /// `targets`: the node(s) that did not answer (empty: the job ran past its deadline).
    Failed { targets: Nodes },
    /// The daemon could not issue it (an empty page, or the node refused the operation).
    Error,
    /// No live node to store on: this node's only member is itself (GMS stores a page on
    /// another node).
    NoTarget,
    /// Fewer live nodes other than this one (`live`) than the daemon's `--replicas`
    /// (`replicas`): the page is not stored rather than kept with fewer copies.
    TooFewTargets { replicas: u8, live: Nodes },
    /// The page's volume is written by the daemon on node `owner` (a volume has one
    /// writer): put it through that daemon.
    NotOwner { owner: u16 },
    /// Past the end of the volume (`--volume-pages`: `pages`).
    OutOfRange { pages: u64 },
}

impl PutOutcome {
    fn encode(self, out: &mut Vec<u8>) {
        let none = Nodes::default();
        let (code, version, nodes) = match self {
            PutOutcome::Stored { targets, version } => (0u8, version, targets),
            PutOutcome::Refused => (1, 0, none),
            PutOutcome::Superseded => (2, 0, none),
            PutOutcome::WrongView => (3, 0, none),
            PutOutcome::Failed { targets } => (4, 0, targets),
            PutOutcome::Error => (5, 0, none),
            PutOutcome::NoTarget => (6, 0, none),
            PutOutcome::TooFewTargets { replicas, live } => (7, u64::from(replicas), live),
            PutOutcome::NotOwner { owner } => (8, u64::from(owner), none),
            PutOutcome::OutOfRange { pages } => (9, pages, none),
        };
        out.push(code);
        out.extend_from_slice(&version.to_le_bytes());
        out.push(nodes.len);
        for n in nodes.as_slice() {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    fn decode(r: &mut Reader<'_>) -> anyhow::Result<Self> {
        let code = r.u8()?;
        let version = r.u64()?;
        let k = r.u8()?;
        if k > MAX_REPLICAS {
            bail!("a put outcome naming {k} nodes (at most {MAX_REPLICAS})");
        }
        let ids = (0..k).map(|_| r.u16()).collect::<anyhow::Result<Vec<u16>>>()?;
        let nodes = Nodes::new(&ids);
        Ok(match code {
            0 if !nodes.is_empty() => PutOutcome::Stored { targets: nodes, version },
            0 => bail!("a stored put naming no node"),
            1 => PutOutcome::Refused,
            2 => PutOutcome::Superseded,
            3 => PutOutcome::WrongView,
            4 => PutOutcome::Failed { targets: nodes },
            5 => PutOutcome::Error,
            6 => PutOutcome::NoTarget,
            7 => PutOutcome::TooFewTargets { replicas: version.min(u8::MAX.into()) as u8, live: nodes },
            8 => PutOutcome::NotOwner { owner: u16::try_from(version).context("bad owner")? },
            9 => PutOutcome::OutOfRange { pages: version },
            c => bail!("bad put outcome {c}"),
        })
    }
}

/// Where a hit was served from (the vNIC runtime's [`trapeze_node::gms::Source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Served {
    Cache,
    Local,
    TwoWay,
    ThreeWay,
}

impl Served {
    pub fn name(self) -> &'static str {
        match self {
            Served::Cache => "cache",
            Served::Local => "local",
            Served::TwoWay => "2-way",
            Served::ThreeWay => "3-way",
        }
    }
    fn code(self) -> u8 {
        self as u8
    }
    fn from_code(c: u8) -> anyhow::Result<Self> {
        Ok(match c {
            0 => Served::Cache,
            1 => Served::Local,
            2 => Served::TwoWay,
            3 => Served::ThreeWay,
            c => bail!("bad source {c}"),
        })
    }
}

impl From<trapeze_node::gms::Source> for Served {
    fn from(s: trapeze_node::gms::Source) -> Self {
        use trapeze_node::gms::Source;
        match s {
            Source::Cache => Served::Cache,
            Source::Local => Served::Local,
            Source::TwoWay => Served::TwoWay,
            Source::ThreeWay => Served::ThreeWay,
        }
    }
}

/// Why a get missed, as far as the daemon knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MissWhy {
    /// No node answered with the page: never stored, or lost with a failed node (its holder
    /// or its directory node) that this daemon has no record of storing it on.
    NotFound,
    /// No answer within the operation timeout (a reader makes a second pass first).
    TimedOut,
    /// This node has no live peer (and does not hold the page itself).
    Alone,
    /// The page was written through this daemon and no copy of it is left (every node
    /// that held one failed): its data is gone.
    Lost,
    /// The page was written through this daemon and no copy could be reached: the nodes
    /// that may hold one are declared failed or did not answer (it reads again if they
    /// come back with their memory).
    Unreachable,
}

impl MissWhy {
    fn encode(self, out: &mut Vec<u8>) {
        let (code, node) = match self {
            MissWhy::NotFound => (0u8, 0u16),
            MissWhy::Lost => (1, 0),
            MissWhy::Unreachable => (4, 0),
            MissWhy::TimedOut => (2, 0),
            MissWhy::Alone => (3, 0),
        };
        out.push(code);
        out.extend_from_slice(&node.to_le_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> anyhow::Result<Self> {
        let code = r.u8()?;
        let _node = r.u16()?;
        Ok(match code {
            0 => MissWhy::NotFound,
            1 => MissWhy::Lost,
            4 => MissWhy::Unreachable,
            2 => MissWhy::TimedOut,
            3 => MissWhy::Alone,
            c => bail!("bad miss reason {c}"),
        })
    }
}

impl fmt::Display for MissWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissWhy::NotFound => write!(
                f,
                "no node has it: it was never written, or (read from a volume another daemon writes) it was lost \
                 with a failed node"
            ),
            MissWhy::TimedOut => {
                write!(
                    f,
                    "no answer within the daemon's operation timeout, --op-timeout-ms (lost packets or a failing node)"
                )
            }
            MissWhy::Alone => write!(f, "this node has no live peer and does not hold the page itself"),
            MissWhy::Lost => write!(f, "written through this daemon, and every node that held a copy has failed"),
            MissWhy::Unreachable => write!(
                f,
                "written through this daemon, and no copy could be reached: the nodes that may hold one are declared \
                 failed or do not answer (it reads again if they come back)"
            ),
        }
    }
}

/// How a get ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetOutcome {
    Hit { version: u64, source: Served, data: Vec<u8> },
    Miss(MissWhy),
}

impl GetOutcome {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            GetOutcome::Miss(why) => {
                out.push(0);
                why.encode(out);
            }
            GetOutcome::Hit { version, source, data } => {
                out.push(1);
                out.push(source.code());
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                out.extend_from_slice(data);
            }
        }
    }
    fn decode(r: &mut Reader<'_>) -> anyhow::Result<Self> {
        Ok(match r.u8()? {
            0 => GetOutcome::Miss(MissWhy::decode(r)?),
            1 => {
                let source = Served::from_code(r.u8()?)?;
                let version = r.u64()?;
                let len = r.u32()? as usize;
                GetOutcome::Hit { version, source, data: r.bytes(len)?.to_vec() }
            }
            c => bail!("bad get outcome {c}"),
        })
    }
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Put(Vec<(PageId, Vec<u8>)>),
    Get { network_only: bool, pages: Vec<PageId> },
    Stat,
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Request::Put(items) => {
                out.push(OP_PUT);
                out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for (p, d) in items {
                    put_page(&mut out, p);
                    out.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    out.extend_from_slice(d);
                }
            }
            Request::Get { network_only, pages } => {
                out.push(OP_GET);
                out.push(if *network_only { GET_NETWORK_ONLY } else { 0 });
                out.extend_from_slice(&(pages.len() as u32).to_le_bytes());
                for p in pages {
                    put_page(&mut out, p);
                }
            }
            Request::Stat => out.push(OP_STAT),
        }
        out
    }

    /// Parse a request body; errors say what is wrong (the daemon sends them back).
    pub fn decode(body: &[u8]) -> anyhow::Result<Request> {
        let mut r = Reader(body);
        let req = match r.u8().context("empty request")? {
            OP_PUT => {
                let n = r.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let page = r.page()?;
                    let len = r.u32()? as usize;
                    if len > PAGE_BYTES {
                        bail!("page {}:{}: {len} bytes exceed the page size {PAGE_BYTES}", page.space, page.page);
                    }
                    items.push((page, r.bytes(len)?.to_vec()));
                }
                Request::Put(items)
            }
            OP_GET => {
                let flags = r.u8()?;
                let n = r.count()?;
                let pages = (0..n).map(|_| r.page()).collect::<anyhow::Result<_>>()?;
                Request::Get { network_only: flags & GET_NETWORK_ONLY != 0, pages }
            }
            OP_STAT => Request::Stat,
            op => bail!("unknown request op {op}"),
        };
        if !r.0.is_empty() {
            bail!("{} stray bytes after the request", r.0.len());
        }
        Ok(req)
    }
}

/// Encode an ok PUT reply.
pub fn encode_put_reply(res: &[PutOutcome]) -> Vec<u8> {
    let mut out = vec![STATUS_OK];
    out.extend_from_slice(&(res.len() as u32).to_le_bytes());
    for r in res {
        r.encode(&mut out);
    }
    out
}

/// Encode an ok GET reply.
pub fn encode_get_reply(res: &[GetOutcome]) -> Vec<u8> {
    let mut out = vec![STATUS_OK];
    out.extend_from_slice(&(res.len() as u32).to_le_bytes());
    for r in res {
        r.encode(&mut out);
    }
    out
}

pub fn encode_error(msg: &str) -> Vec<u8> {
    let mut out = vec![STATUS_ERR];
    out.extend_from_slice(msg.as_bytes());
    out
}

/// The ok payload of a reply, or the daemon's error.
pub fn reply_body(body: &[u8]) -> anyhow::Result<&[u8]> {
    match body.split_first() {
        Some((&STATUS_OK, rest)) => Ok(rest),
        Some((&STATUS_ERR, msg)) => bail!("gmsd: {}", String::from_utf8_lossy(msg)),
        Some((s, _)) => bail!("bad reply status {s}"),
        None => bail!("empty reply"),
    }
}

pub fn decode_put_reply(body: &[u8]) -> anyhow::Result<Vec<PutOutcome>> {
    let mut r = Reader(reply_body(body)?);
    let n = r.count()?;
    (0..n).map(|_| PutOutcome::decode(&mut r)).collect()
}

pub fn decode_get_reply(body: &[u8]) -> anyhow::Result<Vec<GetOutcome>> {
    let mut r = Reader(reply_body(body)?);
    let n = r.count()?;
    (0..n).map(|_| GetOutcome::decode(&mut r)).collect()
}

fn put_page(out: &mut Vec<u8>, p: &PageId) {
    out.extend_from_slice(&p.space.to_le_bytes());
    out.extend_from_slice(&p.page.to_le_bytes());
}

/// A bounds-checked little-endian reader: every short read is an error, never a panic.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        if self.0.len() < n {
            bail!("message truncated: wanted {n} bytes, {} left", self.0.len());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> anyhow::Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> anyhow::Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into()?))
    }
    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into()?))
    }
    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into()?))
    }
    fn page(&mut self) -> anyhow::Result<PageId> {
        Ok(PageId::new(self.u64()?, self.u64()?))
    }
    fn count(&mut self) -> anyhow::Result<usize> {
        let n = self.u32()? as usize;
        if n > MAX_BATCH {
            bail!("batch of {n} pages exceeds {MAX_BATCH}");
        }
        Ok(n)
    }
}

/// Write one length-prefixed message.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// The length of the message at the start of `buf`: `None` until 4 bytes are there, an
/// error if it exceeds [`MAX_FRAME_BYTES`].
pub fn read_len(buf: &[u8]) -> Option<anyhow::Result<usize>> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    Some(if len > MAX_FRAME_BYTES {
        Err(anyhow::anyhow!("message of {len} bytes exceeds {MAX_FRAME_BYTES}"))
    } else {
        Ok(len)
    })
}

/// Read one length-prefixed message (blocking).
pub fn read_frame(r: &mut impl Read) -> anyhow::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).context("reading a reply from gmsd")?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        bail!("message of {len} bytes exceeds {MAX_FRAME_BYTES}");
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).context("reading a reply from gmsd")?;
    Ok(body)
}

/// A node's state as a daemon's liveness table has it ([`crate::peers`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerState {
    /// Heard within the failure timeout (the daemon itself is always alive): a member.
    #[default]
    Alive,
    /// Heard once, then silent for the failure timeout: failed, not a member.
    Dead,
    /// No heartbeat since this daemon started: not a member, and never put to.
    NeverHeard,
}

impl PeerState {
    pub fn name(self) -> &'static str {
        match self {
            PeerState::Alive => "alive",
            PeerState::Dead => "dead",
            PeerState::NeverHeard => "never heard",
        }
    }
}

/// One node's memory as a daemon knows it (itself: now; peers: from their heartbeats).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMem {
    pub node: u16,
    /// `state` is [`PeerState::Alive`].
    pub alive: bool,
    #[serde(default)]
    pub state: PeerState,
    /// Link packets claiming to come from this node that failed the cluster key check (the
    /// claim is unauthenticated): a node on another `--key`, or none where this one has one.
    #[serde(default)]
    pub mac_rejected: u64,
    /// Pages held for GMS.
    pub held: u64,
    pub budget: u64,
    /// Milliseconds since this daemon last heard from it (0 for itself).
    pub last_heard_ms: u64,
}

/// A latency histogram as reported: bucket upper bounds in µs and counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistReport {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// (upper bound µs, count) for non-empty buckets.
    pub buckets: Vec<(f64, u64)>,
}

/// The answer to `stat`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub node: u16,
    pub uptime_s: f64,
    pub members: Vec<u16>,
    /// The membership view's number; in JSON a hex string ("0x…"), as the text shows it.
    #[serde(with = "hex_u64")]
    pub view: u64,
    pub nodes: Vec<NodeMem>,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub hits_cache: u64,
    pub hits_local: u64,
    pub hits_2way: u64,
    pub hits_3way: u64,
    pub puts: u64,
    pub puts_stored: u64,
    /// Operations retried after a timeout (failed puts, gets that timed out into a miss).
    pub retries: u64,
    /// Puts of this node's clients that a target refused.
    pub puts_refused: u64,
    /// Putpages this node refused as a target (budget).
    pub refused_here: u64,
    /// Registrations (and so puts) refused because this node's directory is full.
    #[serde(default)]
    pub dir_full: u64,
    pub pages_dropped: u64,
    /// Held pages registered again with a new directory node after a membership change
    /// moved their directory (repair instead of dropping them).
    #[serde(default)]
    pub reregistered: u64,
    pub op_timeouts: u64,
    /// Peers declared dead by the heartbeat.
    pub failures_detected: u64,
    /// Peers heard again after being declared dead, or restarted (a new incarnation).
    #[serde(default)]
    pub rejoins: u64,
    /// Longest gap between two passes of the daemon's loop, ms (a stalled daemon misses
    /// heartbeats and may be declared dead by its peers).
    pub max_pass_gap_ms: f64,
    /// getpage latency as the daemon saw it (issue to completion), all sources.
    pub get_latency: HistReport,
    pub get_latency_2way: HistReport,
    pub get_latency_3way: HistReport,
    /// The NIC's non-zero firmware and link counters (`rx_ring_wait`, `link_…`), by name.
    pub nic: std::collections::BTreeMap<String, u64>,
    /// Putpage targets drawn from the global LRU's plan / chosen least loaded (no plan yet,
    /// or the plan drew no target that takes puts).
    pub puts_by_plan: u64,
    pub puts_fallback: u64,
    /// Putpage targets kept: the replica's holder, its copy rewritten in place.
    #[serde(default)]
    pub puts_kept: u64,
    /// Global-LRU plans this node adopted, epochs it started as coordinator, and LRU
    /// messages it rejected (malformed, for another epoch, or late).
    pub lru_plans: u64,
    pub lru_epochs_started: u64,
    pub lru_rejected: u64,
    /// Pages this node discarded by the global LRU (held pages aged out to make room).
    pub pages_discarded: u64,
    /// GMS messages refused because their sender was not entitled to send them, and
    /// NetRPC replies and requests from a node other than the one the call names.
    #[serde(default)]
    pub unentitled: u64,
    #[serde(default)]
    pub foreign_rpc: u64,
    /// Heartbeats refused for an incarnation older than the one its sender is alive as
    /// (a member or a replay alternating incarnations: `Liveness::stale_incarnations`).
    #[serde(default)]
    pub stale_incarnations: u64,
    /// Those GMS messages by kind (`GmsStats`' `rejected_*` counters), every kind, zero
    /// or not.
    #[serde(default)]
    pub refused: Vec<(String, u64)>,
    /// What the NIC's link refused before GMS saw it, every reason by name, zero or not
    /// (`LinkCounter`: MAC failures, replays, stale incarnations, forged trailers, ...).
    #[serde(default)]
    pub link_refused: Vec<(String, u64)>,
    /// The weights of the global LRU's plan in force, by node id (empty before the first).
    pub plan_weights: Vec<u32>,
    /// Copies this daemon keeps of each page put through it (`--replicas`).
    #[serde(default)]
    pub replicas: u8,
    /// Reads that went on to the next replica (the one before missed or was stale).
    #[serde(default)]
    pub replica_fallbacks: u64,
    /// Replicas this daemon put again from a surviving copy after their holder failed.
    #[serde(default)]
    pub re_replicated: u64,
    /// Replicas lost with a failed node still to be put again (waiting or under way).
    #[serde(default)]
    pub re_replicate_pending: u64,
    /// Copies this node holds still to be registered with the directory node a
    /// membership change gave them (until then a reader may be told "ask again").
    #[serde(default)]
    pub reregister_pending: u64,
}

/// `u64` as a "0x…" string in JSON (a view number is a hash: hex is how people compare it).
mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        let hex = s.strip_prefix("0x").ok_or_else(|| serde::de::Error::custom(format!("view {s:?}: not 0x…")))?;
        u64::from_str_radix(hex, 16).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let p = PageId::new(3, u64::MAX);
        for req in [
            Request::Put(vec![(p, vec![7; 100]), (PageId::new(0, 0), vec![])]),
            Request::Get { network_only: true, pages: vec![p, p] },
            Request::Get { network_only: false, pages: vec![] },
            Request::Stat,
        ] {
            assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        }
    }

    #[test]
    fn bad_requests_are_errors() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[9]).unwrap_err().to_string().contains("unknown request op 9"));
        let mut put = Request::Put(vec![(PageId::new(1, 1), vec![1; 10])]).encode();
        put.pop();
        assert!(Request::decode(&put).unwrap_err().to_string().contains("truncated"));
        let mut big = vec![OP_PUT];
        big.extend_from_slice(&1u32.to_le_bytes());
        big.extend_from_slice(&[0; 16]);
        big.extend_from_slice(&(PAGE_BYTES as u32 + 1).to_le_bytes());
        assert!(Request::decode(&big).unwrap_err().to_string().contains("exceed the page size"));
        let mut many = vec![OP_GET, 0];
        many.extend_from_slice(&(MAX_BATCH as u32 + 1).to_le_bytes());
        assert!(Request::decode(&many).unwrap_err().to_string().contains("exceeds"));
        let mut stray = Request::Stat.encode();
        stray.push(0);
        assert!(Request::decode(&stray).is_err());
    }

    #[test]
    fn replies_round_trip() {
        let puts = [
            PutOutcome::Stored { targets: Nodes::new(&[2]), version: 99 },
            PutOutcome::Stored { targets: Nodes::new(&[2, 1, 4]), version: 100 },
            PutOutcome::TooFewTargets { replicas: 2, live: Nodes::new(&[1]) },
            PutOutcome::Refused,
            PutOutcome::Failed { targets: Nodes::new(&[3]) },
            PutOutcome::Failed { targets: Nodes::default() },
            PutOutcome::NoTarget,
        ];
        assert_eq!(decode_put_reply(&encode_put_reply(&puts)).unwrap(), puts);
        let gets = [
            GetOutcome::Miss(MissWhy::NotFound),
            GetOutcome::Miss(MissWhy::Lost),
            GetOutcome::Miss(MissWhy::TimedOut),
            GetOutcome::Miss(MissWhy::Alone),
            GetOutcome::Hit { version: 5, source: Served::ThreeWay, data: vec![1, 2, 3] },
        ];
        assert_eq!(decode_get_reply(&encode_get_reply(&gets)).unwrap(), gets);
        let e = decode_get_reply(&encode_error("no such thing")).unwrap_err();
        assert!(e.to_string().contains("no such thing"));
    }

    #[test]
    fn page_refs() {
        assert_eq!("1:42".parse::<PageRef>(), Ok(PageRef(PageId::new(1, 42))));
        assert_eq!("0x10:0xff".parse::<PageRef>(), Ok(PageRef(PageId::new(16, 255))));
        assert!("142".parse::<PageRef>().unwrap_err().contains("expected VOL:PAGE"));
        assert!("1:-2".parse::<PageRef>().unwrap_err().contains("unsigned"));
        assert_eq!(PageRef(PageId::new(1, 42)).to_string(), "1:42");
    }
}
