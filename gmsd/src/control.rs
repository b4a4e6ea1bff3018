// SPDX-License-Identifier: GPL-2.0-only
//! The daemon's control socket: a non-blocking UNIX stream listener and its clients,
//! each request ([`crate::proto`]) a **job** whose pages are issued to the node as
//! operation slots free up (at most `window` client operations in flight) and answered,
//! in request order, once every page has completed. Polled from the daemon's loop;
//! nothing here blocks.
//!
//! Only the daemon's own user and root are served: the socket is mode 0600 in a private
//! directory, and each connection's peer credentials are checked when it is accepted
//! ([`trapeze_vnic::local`]). At most [`MAX_CLIENTS`] clients are served at once, each
//! with at most one request under way, one request frame buffered and about one frame of
//! answers unwritten ([`MAX_UNWRITTEN`]): a client that sends without reading stalls only
//! itself.

mod clients;

use crate::hist::Histogram;
use crate::proto::{
    encode_error, encode_get_reply, encode_put_reply, read_len, GetOutcome, MissWhy, Nodes, PageRef, PutOutcome,
    Request, Served, Stat, MAX_FRAME_BYTES,
};
use crate::volumes::{gms_page, Done, Item, Refused, Volumes};
use anyhow::{bail, Context};
use clients::{queue, request_ready, Conn};
use gms::prelude::*;
use gms::reader::{Heard, ReadNext, Reader, ReaderEnd};
use gms::store::liveness::Event;
use gms::store::{StoreConfig, StoreError};
use rustix::event::{PollFd, PollFlags};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trapeze_node::gms::{GmsPort, Got, MAX_REPLICAS};

/// Most clients served at once; a further connection is answered with an error and closed.
pub const MAX_CLIENTS: usize = 64;

/// A client's next request is not started while this many bytes of its answers are still
/// unwritten (it does not read them): what one client makes the daemon hold is bounded.
pub const MAX_UNWRITTEN: usize = MAX_FRAME_BYTES;

/// How often the loop looks for new clients. Linux makes a socket for every `accept`
/// before it finds none pending: tried on every pass of the spinning loop, `accept4` was
/// 13–22 % of a lender's perf samples while it served getpages. A client waits at most
/// this long to be taken.
const ACCEPT_EVERY: Duration = Duration::from_millis(1);

/// A job not finished after this long is answered with what it has (misses / failures).
/// GMS completes every operation within its own timeout, so this is a last resort.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// Counters of the requests served.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub gets: u64,
    pub misses: u64,
    /// Hits by [`Served`] (cache, local, 2-way, 3-way).
    pub hits_by: [u64; 4],
    /// Putpages the stores sent (every copy, retries, repairs and meta pages included).
    pub puts: u64,
    /// Client pages stored (every copy).
    pub puts_stored: u64,
    /// Operations issued again: the stores' puts and gets sent again after no answer, a
    /// refusal or another view, and readers' network-only gets that timed out.
    pub retries: u64,
    /// Reads that went on to the next replica (the one before missed or was stale).
    pub replica_fallbacks: u64,
    /// Replicas put again from a surviving copy after their holder failed.
    pub re_replicated: u64,
    /// The stores' puts kept on the replica's holder (a rewrite in place).
    pub puts_kept: u64,
}

impl Counters {
    pub fn hits(&self) -> u64 {
        self.hits_by.iter().sum()
    }
}

enum Items {
    /// An item's data moves into its volume's store when it is issued.
    Put { items: Vec<(PageId, Vec<u8>)>, res: Vec<Option<PutOutcome>> },
    /// A page of a volume this daemon writes is read by its store; any other page as a
    /// reader, by its item's [`Reader`] (which replica to ask, and when it is a miss).
    Get { network_only: bool, pages: Vec<PageId>, readers: Vec<Reader>, res: Vec<Option<GetOutcome>> },
}

struct Job {
    conn: u64,
    items: Items,
    /// Items to issue, in order (a reader's item asked again goes to the back, its next
    /// replica to the front).
    queue: VecDeque<usize>,
    /// Items without a result.
    left: usize,
    deadline: Instant,
    /// Readers' items to issue at a time: (when, port clock ns; item).
    later: Vec<(u64, usize)>,
}

/// A page's waiter: (job, item, replica, issued at).
type Waiter = (u64, usize, u8, Instant);

/// The listener, its clients and their jobs.
pub struct Control {
    listener: UnixListener,
    /// When [`Control::step`] next looks for new connections.
    next_accept: Instant,
    path: PathBuf,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    /// What a pass reads from the clients into, and the ids of the connections it reads:
    /// made once, since a busy daemon makes thousands of passes a second (zeroing a
    /// fresh 64 KiB buffer each time was a tenth of its CPU in `bench gms`'s baselines).
    scratch: Vec<u8>,
    conn_ids: Vec<u64>,
    jobs: BTreeMap<u64, Job>,
    next_job: u64,
    /// The volumes this daemon writes, each with its store.
    volumes: Volumes,
    /// What the stores finished in a step.
    store_done: Vec<Done>,
    get_wait: HashMap<OpId, Waiter>,
    read_wait: HashMap<PageId, Vec<Waiter>>,
    /// This node is its only member (no live peer).
    alone: bool,
    /// The membership view as of the last step.
    view: u64,
    /// A reader's replicas and retries ([`Reader::new`]).
    reader: StoreConfig,
    pub counters: Counters,
    /// getpage latency, issue to answer (hits and misses), and the port's 2-/3-way figures.
    pub lat_all: Histogram,
    pub lat_2way: Histogram,
    pub lat_3way: Histogram,
}

impl Control {
    /// Listen at `path`, as a NIC's control socket is prepared
    /// ([`trapeze_vnic::control::prepare_socket_path`]): the default directory
    /// ([`trapeze_vnic::local::runtime_dir`]) is made mode 0700 or checked to be private;
    /// any other directory must exist (nothing is made) and not be writable by everyone
    /// without the sticky bit. A stale socket file (nobody accepting) is replaced; a live
    /// socket (a daemon, or a NIC by its socket type) or any other file is an error. The
    /// socket is mode 0600.
    pub fn bind(path: &Path, replicas: u8, volume_pages: u64) -> anyhow::Result<Control> {
        if !(1..=MAX_REPLICAS).contains(&replicas) {
            bail!("replicas {replicas}: must be 1..={MAX_REPLICAS}");
        }
        if let Some(dir) = path.parent().filter(|d| *d == trapeze_vnic::local::runtime_dir()) {
            trapeze_vnic::local::ensure_private_dir(dir)?;
        }
        trapeze_vnic::control::prepare_socket_path(path, rustix::net::SocketType::STREAM, "control socket")?;
        let listener = UnixListener::bind(path).with_context(|| format!("cannot listen at {}", path.display()))?;
        // A connection made before this is refused by the peer check in `accept`.
        trapeze_vnic::local::restrict_socket(path)?;
        listener.set_nonblocking(true)?;
        let volumes = Volumes::new(replicas, volume_pages);
        Ok(Control {
            listener,
            next_accept: Instant::now(),
            path: path.to_path_buf(),
            conns: HashMap::new(),
            next_conn: 0,
            scratch: vec![0; 64 * 1024],
            conn_ids: Vec::new(),
            jobs: BTreeMap::new(),
            next_job: 0,
            reader: volumes.reader_config(),
            volumes,
            store_done: Vec::new(),
            get_wait: HashMap::new(),
            read_wait: HashMap::new(),
            alone: false,
            view: 0,
            counters: Counters::default(),
            lat_all: Histogram::default(),
            lat_2way: Histogram::default(),
            lat_3way: Histogram::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies of each page put through this daemon.
    pub fn replicas(&self) -> u8 {
        self.volumes.replicas()
    }

    /// Lost copies not made again yet in the volumes this daemon writes (0 only once
    /// re-replication is done: [`Volumes::repair_pending`]).
    pub fn re_replicate_pending(&self) -> usize {
        self.volumes.repair_pending() as usize
    }

    /// The counters, with the stores' own folded in.
    pub fn counters(&self) -> Counters {
        let s = self.volumes.stats();
        Counters {
            puts: s.puts,
            retries: self.counters.retries + s.retries,
            replica_fallbacks: self.counters.replica_fallbacks + s.fallbacks,
            re_replicated: s.repaired,
            puts_kept: s.puts_kept,
            ..self.counters
        }
    }

    /// The volumes this daemon writes: (identity, how its load stands).
    pub fn volumes(&self) -> Vec<(u64, gms::store::Phase)> {
        self.volumes.list()
    }

    /// Work a pass can do without waiting for anything: operations of a job still to
    /// issue, replicas to repair, replies still to write, requests read whole but not
    /// started (the loop must not sleep while it has these). A job whose operations are
    /// all issued waits for their answers, which wake the loop, or for a time that
    /// [`Self::poll_timeout`] gives.
    pub fn has_work(&self) -> bool {
        self.jobs.values().any(|j| !j.queue.is_empty())
            || self.conns.values().any(|c| c.wpos < c.wbuf.len() || request_ready(c))
    }

    /// When [`Self::step`] must run again although no client speaks and no answer
    /// comes, if ever: a job's deadline or a read to issue again at a time, and the
    /// stores' timers (retries, write windows, re-replication).
    pub fn poll_timeout(&self, port: &GmsPort) -> Option<Instant> {
        let later = self.jobs.values().flat_map(|j| j.later.iter().map(|l| l.0)).min();
        let later = later.map(|at| Instant::now() + Duration::from_nanos(at.saturating_sub(port.now())));
        let jobs = self.jobs.values().map(|j| j.deadline).min();
        [jobs, later, self.volumes.poll_timeout(port)].into_iter().flatten().min()
    }

    /// The loop slept in `poll(2)` on [`Self::poll_fds`]: the next step accepts at once
    /// if the listener was readable, and otherwise (nobody was waiting) only after
    /// `ACCEPT_EVERY`, as while spinning.
    pub fn woke(&mut self, listener_ready: bool) {
        let now = Instant::now();
        self.next_accept = if listener_ready { now } else { now + ACCEPT_EVERY };
    }

    /// Add the listener and the clients to a `poll(2)` set (the listener first).
    pub fn poll_fds<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) {
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for c in self.conns.values() {
            let mut fl = PollFlags::IN;
            if c.wpos < c.wbuf.len() {
                fl |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&c.stream, fl));
        }
    }

    pub fn wants_stat(&self) -> bool {
        self.conns.values().any(|c| c.stat)
    }

    /// Answer every client waiting for `stat`.
    pub fn answer_stat(&mut self, s: &Stat) {
        let mut body = vec![crate::proto::STATUS_OK];
        body.extend_from_slice(&serde_json::to_vec(s).unwrap_or_default());
        for c in self.conns.values_mut().filter(|c| c.stat) {
            c.stat = false;
            queue(c, &body);
        }
    }

    /// A heartbeat from `node`: it holds `held` pages of its `budget` (its room for puts).
    pub fn heard(&mut self, node: u16, held: u32, budget: u32) {
        self.volumes.handle_room(node, u64::from(budget.saturating_sub(held)));
    }

    /// A membership change, for the stores (at the port's clock `now`).
    pub fn member(&mut self, now: u64, event: Event) {
        self.volumes.handle_member(now, event);
    }

    /// One pass at `now` (the loop's clock reading for it): accept, read requests, collect
    /// completions, issue, answer, write.
    pub fn step(&mut self, port: &mut GmsPort, window: usize, now: Instant) -> bool {
        self.alone = port.node.members().ids().iter().all(|&n| n == port.id());
        self.view = port.node.members().view();
        let mut busy = false;
        if now >= self.next_accept {
            self.next_accept = now + ACCEPT_EVERY;
            busy |= self.accept();
        }
        busy |= self.read_all();
        busy |= self.collect(port);
        busy |= self.issue(port, window);
        busy |= self.collect_stores(port);
        busy |= self.finish();
        busy |= self.write_all();
        busy
    }

    /// Start the next complete request of client `id` if it has none under way.
    fn start_request(&mut self, id: u64) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        if c.job.is_some() || c.stat || c.wbuf.len() - c.wpos >= MAX_UNWRITTEN {
            return false;
        }
        let len = match read_len(&c.rbuf) {
            None => return false,
            Some(Ok(len)) if c.rbuf.len() >= 4 + len => len,
            Some(Ok(_)) => return false,
            Some(Err(e)) => {
                // A length we will not read: say so and hang up.
                queue(c, &encode_error(&format!("{e:#}")));
                c.rbuf.clear();
                c.eof = true;
                return true;
            }
        };
        // Split the message off without a per-byte pass (a batch is megabytes).
        let rest = c.rbuf.split_off(4 + len);
        let msg = std::mem::replace(&mut c.rbuf, rest);
        let req = match Request::decode(&msg[4..]) {
            Ok(r) => r,
            Err(e) => {
                queue(c, &encode_error(&format!("bad request: {e:#}")));
                return true;
            }
        };
        let now = Instant::now();
        let items = match req {
            Request::Stat => {
                c.stat = true;
                return true;
            }
            Request::Put(items) => {
                let n = items.len();
                Items::Put { items, res: vec![None; n] }
            }
            Request::Get { network_only, pages } => {
                let n = pages.len();
                let readers = vec![Reader::new(&self.reader, None, 0); n];
                Items::Get { network_only, pages, readers, res: vec![None; n] }
            }
        };
        self.next_job += 1;
        c.job = Some(self.next_job);
        let left = match &items {
            Items::Put { res, .. } => res.len(),
            Items::Get { res, .. } => res.len(),
        };
        let job =
            Job { conn: id, items, queue: (0..left).collect(), left, deadline: now + JOB_TIMEOUT, later: Vec::new() };
        self.jobs.insert(self.next_job, job);
        true
    }

    /// Issue pages of the jobs, oldest job first, while the window has room: a put, and a
    /// get of a volume this daemon writes, go to the volume's store; any other get is a
    /// reader's, through GMS's directory.
    fn issue(&mut self, port: &mut GmsPort, window: usize) -> bool {
        let mut any = false;
        let mut answered = Vec::new();
        let Control { jobs, get_wait, read_wait, volumes, .. } = self;
        'jobs: for (&jid, job) in jobs.iter_mut() {
            let ns = port.now();
            job.later.retain(|&(at, idx)| {
                let due = at <= ns;
                if due {
                    job.queue.push_back(idx);
                }
                !due
            });
            while port.in_flight() < window {
                let Some(&idx) = job.queue.front() else { break };
                let (now, ns) = (Instant::now(), port.now());
                match &mut job.items {
                    Items::Put { items, res } => {
                        let (page, data) = &mut items[idx];
                        // GMS carries no empty page. (A lone node's put is the store's to
                        // refuse: too few members, told as `NoTarget`.)
                        if data.is_empty() {
                            res[idx] = Some(PutOutcome::Error);
                            job.left -= 1;
                        } else {
                            let item =
                                Item { job: jid, idx, page: page.page, data: Some(std::mem::take(data)), t0: now };
                            match volumes.write(port, *page, item) {
                                Ok(()) => {}
                                Err(Refused::Busy(item)) => {
                                    *data = item.data.unwrap_or_default();
                                    break 'jobs;
                                }
                                Err(Refused::Now(out)) => {
                                    res[idx] = Some(out);
                                    job.left -= 1;
                                }
                            }
                        }
                    }
                    Items::Get { pages, .. } if volumes.is_open(pages[idx].space) => {
                        let page = pages[idx];
                        let item = Item { job: jid, idx, page: page.page, data: None, t0: now };
                        if let Some(Err(_)) = volumes.read(port, page, item) {
                            break 'jobs;
                        }
                    }
                    Items::Get { network_only, pages, readers, .. } => {
                        // The replica the reader asks next (taken once it is asked).
                        let ReadNext::Ask { replica: k, .. } = readers[idx].next() else {
                            job.queue.pop_front();
                            continue;
                        };
                        let page = gms_page(pages[idx], k);
                        if *network_only {
                            match port.get_start(page) {
                                Ok(op) => {
                                    get_wait.insert(op, (jid, idx, k, now));
                                }
                                Err(e) if port.in_flight() > 0 => {
                                    tracing::trace!("get {} deferred: {e:#}", PageRef(page));
                                    break 'jobs;
                                }
                                Err(e) => {
                                    tracing::warn!("get {}: {e:#}", PageRef(page));
                                    answered.push((jid, idx, k, (Got::Miss, Heard::NoAnswer), now));
                                }
                            }
                        } else if let Some(w) = read_wait.get_mut(&page) {
                            w.push((jid, idx, k, now));
                        } else if let Some(got) = port.read_start_heard(page) {
                            answered.push((jid, idx, k, got, now));
                        } else {
                            read_wait.insert(page, vec![(jid, idx, k, now)]);
                        }
                        readers[idx].poll_ask(ns);
                    }
                }
                job.queue.pop_front();
                any = true;
            }
        }
        let ns = port.now();
        for (jid, idx, k, got, t0) in answered {
            self.deliver(jid, idx, k, got, t0, ns);
        }
        any
    }

    /// What the volumes' stores finished: answers for their jobs.
    fn collect_stores(&mut self, port: &mut GmsPort) -> bool {
        let mut done = std::mem::take(&mut self.store_done);
        let busy = self.volumes.step(port, &mut done);
        for d in done.drain(..) {
            match d {
                Done::Put { job, idx, outcome } => {
                    if matches!(outcome, PutOutcome::Stored { .. }) {
                        self.counters.puts_stored += 1;
                    }
                    self.answer(job, idx, Answer::Put(outcome));
                }
                Done::Get { job, idx, got, took } => {
                    self.counters.gets += 1;
                    self.lat_all.record(took.as_nanos() as u64);
                    let out = match got {
                        // The store reads straight from the holder (two messages).
                        Ok(Some((version, data))) => {
                            self.counters.hits_by[Served::TwoWay as usize] += 1;
                            GetOutcome::Hit { version: version.0, source: Served::TwoWay, data }
                        }
                        Ok(None) => GetOutcome::Miss(miss_why(NoData::NeverWritten, self.alone)),
                        Err(e) => GetOutcome::Miss(miss_why(NoData::Failed(e), self.alone)),
                    };
                    if matches!(out, GetOutcome::Miss(_)) {
                        self.counters.misses += 1;
                    }
                    self.answer(job, idx, Answer::Get(out));
                }
            }
        }
        self.store_done = done;
        busy
    }

    /// Item `idx` of job `jid` ended.
    fn answer(&mut self, jid: u64, idx: usize, a: Answer) {
        let Some(job) = self.jobs.get_mut(&jid) else { return };
        let slot = match (&mut job.items, a) {
            (Items::Put { res, .. }, Answer::Put(o)) => res.get_mut(idx).filter(|r| r.is_none()).map(|r| *r = Some(o)),
            (Items::Get { res, .. }, Answer::Get(o)) => res.get_mut(idx).filter(|r| r.is_none()).map(|r| *r = Some(o)),
            _ => None,
        };
        if slot.is_some() {
            job.left -= 1;
        }
    }

    /// Take finished operations from the port.
    fn collect(&mut self, port: &mut GmsPort) -> bool {
        let (mut any, ns) = (false, port.now());
        // The stores' putpages are theirs; the port's own log is not read.
        port.put_log.clear();
        if !self.get_wait.is_empty() {
            let ops: Vec<OpId> = self.get_wait.keys().copied().collect();
            for op in ops {
                if let Some(got) = port.get_poll_heard(op) {
                    let (jid, idx, k, t0) = self.get_wait.remove(&op).expect("key taken from the map");
                    self.deliver(jid, idx, k, got, t0, ns);
                    any = true;
                }
            }
        }
        if !self.read_wait.is_empty() {
            let pages: Vec<PageId> = self.read_wait.keys().copied().collect();
            for page in pages {
                if let Some(got) = port.read_poll_heard(page) {
                    for (jid, idx, k, t0) in self.read_wait.remove(&page).unwrap_or_default() {
                        self.deliver(jid, idx, k, got.clone(), t0, ns);
                    }
                    any = true;
                }
            }
        }
        for ns in port.lat_2way.drain(..) {
            self.lat_2way.record(ns);
        }
        for ns in port.lat_3way.drain(..) {
            self.lat_3way.record(ns);
        }
        any
    }

    /// Replica `k` of job `jid`'s item `idx` answered `got` (at `now`, port clock): its
    /// reader says what is next.
    fn deliver(&mut self, jid: u64, idx: usize, k: u8, got: (Got, Heard), t0: Instant, now: u64) {
        self.lat_all.record(t0.elapsed().as_nanos() as u64);
        let Some(job) = self.jobs.get_mut(&jid) else { return };
        let Items::Get { readers, res, .. } = &mut job.items else { return };
        if res[idx].is_some() {
            return;
        }
        let end = match readers[idx].handle(k, got.1, now) {
            ReadNext::Wait => return,
            ReadNext::Ask { replica, at } => {
                // On to the next replica at once, or the same one (another pass) again.
                if replica > k {
                    self.counters.replica_fallbacks += 1;
                    job.queue.push_front(idx);
                } else {
                    self.counters.retries += 1;
                    match at <= now {
                        true => job.queue.push_back(idx),
                        false => job.later.push((at, idx)),
                    }
                }
                return;
            }
            ReadNext::Done(end) => end,
        };
        self.counters.gets += 1;
        let out = match (end, got.0) {
            (ReaderEnd::Hit { .. }, Got::Hit { version, data, source }) => {
                let s = Served::from(source);
                self.counters.hits_by[s as usize] += 1;
                GetOutcome::Hit { version: version.0, source: s, data }
            }
            (ReaderEnd::Failed(e), _) => GetOutcome::Miss(miss_why(NoData::Failed(e), self.alone)),
            (ReaderEnd::Hit { .. } | ReaderEnd::NotFound, _) => {
                GetOutcome::Miss(miss_why(NoData::NotFound, self.alone))
            }
        };
        if matches!(out, GetOutcome::Miss(_)) {
            self.counters.misses += 1;
        }
        res[idx] = Some(out);
        job.left -= 1;
    }

    /// Answer finished (or overdue) jobs.
    fn finish(&mut self) -> bool {
        let now = Instant::now();
        let done: Vec<u64> =
            self.jobs.iter().filter(|(_, j)| j.left == 0 || now >= j.deadline).map(|(&k, _)| k).collect();
        for jid in &done {
            let job = self.jobs.remove(jid).expect("key taken from the map");
            if job.left > 0 {
                tracing::error!(job = jid, left = job.left, "job overdue: answering the rest as failures");
            }
            let body = match job.items {
                Items::Put { res, .. } => encode_put_reply(
                    &res.into_iter()
                        .map(|r| r.unwrap_or(PutOutcome::Failed { targets: Nodes::default() }))
                        .collect::<Vec<_>>(),
                ),
                Items::Get { res, .. } => encode_get_reply(
                    &res.into_iter().map(|r| r.unwrap_or(GetOutcome::Miss(MissWhy::TimedOut))).collect::<Vec<_>>(),
                ),
            };
            if let Some(c) = self.conns.get_mut(&job.conn) {
                queue(c, &body);
                c.job = None;
            }
            // The client may have sent its next request already.
            self.start_request(job.conn);
        }
        !done.is_empty()
    }
}

/// How a read ended without data.
enum NoData {
    /// A volume's store knows the page was never written (its record of written pages).
    NeverWritten,
    /// No member had a copy (a read outside a volume: nothing records what was written).
    NotFound,
    /// The read failed.
    Failed(StoreError),
}

/// Why a read brought no data, as the wire says it: one rule for the volumes' reads and
/// the others. What the store knows is said as it is (never written, every copy lost,
/// holders unreachable); a miss or failure with no other member is `Alone`, the cause a
/// user can act on; anything else ran out of time or tries.
fn miss_why(end: NoData, alone: bool) -> MissWhy {
    match end {
        NoData::NeverWritten => MissWhy::NotFound,
        NoData::Failed(StoreError::Lost) => MissWhy::Lost,
        NoData::Failed(StoreError::Unreachable) => MissWhy::Unreachable,
        _ if alone => MissWhy::Alone,
        NoData::NotFound => MissWhy::NotFound,
        NoData::Failed(_) => MissWhy::TimedOut,
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How an item ended.
enum Answer {
    Put(PutOutcome),
    Get(GetOutcome),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_read_paths_say_a_miss_by_one_rule() {
        // A reader outside a volume that could not reach a replica says so, as a volume's
        // store does (it used to be reported as a timeout).
        assert_eq!(miss_why(NoData::Failed(StoreError::Unreachable), false), MissWhy::Unreachable);
        assert_eq!(miss_why(NoData::Failed(StoreError::Lost), true), MissWhy::Lost);
        assert_eq!(miss_why(NoData::Failed(StoreError::NotSent), true), MissWhy::Alone);
        assert_eq!(miss_why(NoData::Failed(StoreError::NotSent), false), MissWhy::TimedOut);
        // Only the store knows a page was never written; a plain miss alone is being alone.
        assert_eq!(miss_why(NoData::NeverWritten, true), MissWhy::NotFound);
        assert_eq!(miss_why(NoData::NotFound, true), MissWhy::Alone);
        assert_eq!(miss_why(NoData::NotFound, false), MissWhy::NotFound);
    }
}
