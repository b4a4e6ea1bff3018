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
use crate::repair::Repair;
use crate::targets::Targets;
use crate::written::Written;
use anyhow::{bail, Context};
use clients::{queue, request_ready, Conn};
use gms::prelude::*;
use rustix::event::{PollFd, PollFlags};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trapeze_node::gms::{read_step, replica, GmsPort, Got, ReadStep, ReplicaWrite, MAX_REPLICAS};

/// Most clients served at once; a further connection is answered with an error and closed.
pub const MAX_CLIENTS: usize = 64;

/// A client's next request is not started while this many bytes of its answers are still
/// unwritten (it does not read them): what one client makes the daemon hold is bounded.
pub const MAX_UNWRITTEN: usize = MAX_FRAME_BYTES;

/// Times an item is issued at most (a timed-out operation is retried once).
const MAX_TRIES: u8 = 2;
/// How often the loop looks for new clients. Linux makes a socket for every `accept`
/// before it finds none pending: tried on every pass of the spinning loop, `accept4` was
/// 13–22 % of a lender's perf samples while it served getpages. A client waits at most
/// this long to be taken.
const ACCEPT_EVERY: Duration = Duration::from_millis(1);

/// Passes a read of a page this daemon wrote makes at most while every replica misses
/// with a holder not known to have failed, half an operation timeout apart.
const MISS_TRIES: u8 = 6;

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
    pub puts: u64,
    pub puts_stored: u64,
    /// Operations issued again: puts that failed, network-only gets that timed out into a
    /// miss, and reads of a page this daemon wrote that missed with a holder alive.
    pub retries: u64,
    /// Reads that went on to the next replica (the one before missed or was stale).
    pub replica_fallbacks: u64,
    /// Replicas put again from a surviving copy after their holder failed.
    pub re_replicated: u64,
}

impl Counters {
    pub fn hits(&self) -> u64 {
        self.hits_by.iter().sum()
    }
}

enum Items {
    /// `writes[i]`: item `i`'s replicas (made when its first replica is issued).
    Put {
        items: Vec<(PageId, Vec<u8>)>,
        res: Vec<Option<PutOutcome>>,
        writes: Vec<Option<ReplicaWrite>>,
    },
    Get {
        network_only: bool,
        pages: Vec<PageId>,
        res: Vec<Option<GetOutcome>>,
    },
}

struct Job {
    conn: u64,
    items: Items,
    /// (item, replica) to issue, in order (a retried one goes to the back, a read's next
    /// replica to the front).
    queue: VecDeque<(usize, u8)>,
    /// Times each item's replica was issued (a get: its passes, counted at replica 0).
    tries: Vec<[u8; MAX_REPLICAS as usize]>,
    /// Times each item's replica was refused by a target (it then goes to another).
    refusals: Vec<[u8; MAX_REPLICAS as usize]>,
    /// Items without a result.
    left: usize,
    deadline: Instant,
    /// Reads to issue again (from replica 0) at a time: (when, item).
    later: Vec<(Instant, usize)>,
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
    /// Putpages in flight: (replica's page, version) → (job, item, replica, target).
    put_wait: HashMap<(PageId, u64), (u64, usize, u8, u16)>,
    targets: Targets,
    get_wait: HashMap<OpId, Waiter>,
    read_wait: HashMap<PageId, Vec<Waiter>>,
    last_version: u64,
    /// Copies of each page put (`--replicas`).
    replicas: u8,
    /// The pages this daemon's clients wrote: version, holders, which failed.
    written: Written,
    /// Replicas lost with a failed node being put again.
    repair: Repair,
    /// This node is its only member (no live peer).
    alone: bool,
    /// The membership view as of the last step.
    view: u64,
    /// A miss that took at least this long was a timeout.
    retry_after: Duration,
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
    pub fn bind(path: &Path, op_timeout: Duration, replicas: u8) -> anyhow::Result<Control> {
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
            put_wait: HashMap::new(),
            targets: Targets::default(),
            get_wait: HashMap::new(),
            read_wait: HashMap::new(),
            last_version: 0,
            replicas,
            written: Written::default(),
            repair: Repair::default(),
            alone: false,
            view: 0,
            retry_after: op_timeout / 2,
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
        self.replicas
    }

    /// Replicas lost with a failed node still to be put again: waiting, or being read and
    /// put now (0 only once every repair started has finished).
    pub fn re_replicate_pending(&self) -> usize {
        self.written.lost_pending() + self.repair.busy()
    }

    /// Work a pass can do without waiting for anything: operations of a job still to
    /// issue, replicas to repair, replies still to write, requests read whole but not
    /// started (the loop must not sleep while it has these). A job whose operations are
    /// all issued waits for their answers, which wake the loop, or for a time that
    /// [`Self::poll_timeout`] gives.
    pub fn has_work(&self) -> bool {
        self.jobs.values().any(|j| !j.queue.is_empty())
            || self.repair.busy() > 0
            || self.conns.values().any(|c| c.wpos < c.wbuf.len() || request_ready(c))
    }

    /// When [`Self::step`] must run again although no client speaks and no answer
    /// comes, if ever: a job's deadline or a read to issue again at a time, and lost
    /// replicas waiting to be put again ([`Repair::poll_timeout`]).
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let jobs = self.jobs.values().flat_map(|j| j.later.iter().map(|l| l.0).chain([j.deadline])).min();
        [jobs, self.repair.poll_timeout(self.written.lost_pending(), self.view, now)].into_iter().flatten().min()
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
        self.targets.heard(node, held, budget);
    }

    /// Node `n` failed or restarted: the replicas this daemon stored there are gone.
    pub fn node_failed(&mut self, n: u16) {
        self.written.node_failed(n);
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
        let Control { repair, targets, written, last_version, counters, .. } = self;
        busy |= repair.poll(port, targets, written, window, || Version(next_version(last_version)));
        busy |= repair.start(port, written, window);
        counters.re_replicated = repair.done;
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
                Items::Put { items, res: vec![None; n], writes: vec![None; n] }
            }
            Request::Get { network_only, pages } => {
                let n = pages.len();
                Items::Get { network_only, pages, res: vec![None; n] }
            }
        };
        self.next_job += 1;
        c.job = Some(self.next_job);
        let left = match &items {
            Items::Put { res, .. } => res.len(),
            Items::Get { res, .. } => res.len(),
        };
        let replicas = match &items {
            Items::Put { .. } => self.replicas,
            Items::Get { .. } => 1,
        };
        let job = Job {
            conn: id,
            items,
            queue: (0..left).flat_map(|i| (0..replicas).map(move |k| (i, k))).collect(),
            tries: vec![[0; MAX_REPLICAS as usize]; left],
            refusals: vec![[0; MAX_REPLICAS as usize]; left],
            left,
            deadline: now + JOB_TIMEOUT,
            later: Vec::new(),
        };
        self.jobs.insert(self.next_job, job);
        true
    }

    /// Issue pages of the jobs, oldest job first, while the window has room.
    fn issue(&mut self, port: &mut GmsPort, window: usize) -> bool {
        let mut any = false;
        let mut answered = Vec::new();
        let r = self.replicas;
        let Control { jobs, put_wait, get_wait, read_wait, counters, last_version, targets, written, .. } = self;
        'jobs: for (&jid, job) in jobs.iter_mut() {
            let now = Instant::now();
            job.later.retain(|&(at, idx)| {
                let due = at <= now;
                if due {
                    job.queue.push_back((idx, 0));
                }
                !due
            });
            while port.in_flight() < window {
                let Some(&(idx, k)) = job.queue.front() else { break };
                let now = Instant::now();
                match &mut job.items {
                    // Another replica of the page ended its write already (a failure).
                    Items::Put { res, .. } if res[idx].is_some() => {}
                    Items::Put { items, res, writes } => {
                        let (page, data) = &items[idx];
                        let page = *page;
                        let me = port.id();
                        let members: Vec<u16> =
                            port.node.members().ids().iter().copied().filter(|&n| n != me).collect();
                        // A page is stored with its own length (at most PAGE_BYTES, checked
                        // when the request was decoded) and read back with exactly that
                        // length; GMS carries no empty page.
                        if members.is_empty() || data.is_empty() {
                            res[idx] = Some(if members.is_empty() { PutOutcome::NoTarget } else { PutOutcome::Error });
                            job.left -= 1;
                        } else if members.len() < usize::from(r) {
                            // Fewer copies than asked would be a silent loss of safety.
                            res[idx] = Some(PutOutcome::TooFewTargets { replicas: r, live: Nodes::new(&members) });
                            job.left -= 1;
                        } else {
                            let w = writes[idx].get_or_insert_with(|| {
                                ReplicaWrite::new(r, Version(next_version(last_version))).over(written.sites(&page))
                            });
                            let c = port.coordinator();
                            let Some(target) =
                                targets.pick(&mut port.lru, c, &members, window, now, &w.avoid(k, &members))
                            else {
                                break 'jobs;
                            };
                            let version = w.version_for(k, || Version(next_version(last_version)));
                            let rpage = replica(page, k);
                            match port.put(rpage, version, data, Some(target)) {
                                Ok(_) => {
                                    w.issued(k, target, version);
                                    put_wait.insert((rpage, version.0), (jid, idx, k, target));
                                    counters.puts += 1;
                                }
                                Err(e) if port.in_flight() > 0 => {
                                    targets.done(target, None, now);
                                    tracing::trace!("put {} deferred: {e:#}", PageRef(page));
                                    break 'jobs;
                                }
                                Err(e) => {
                                    targets.done(target, None, now);
                                    tracing::warn!("put {}: {e:#}", PageRef(page));
                                    res[idx] = Some(PutOutcome::Error);
                                    job.left -= 1;
                                }
                            }
                        }
                    }
                    Items::Get { network_only, pages, .. } => {
                        let page = replica(pages[idx], k);
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
                                    answered.push((jid, idx, k, Got::Miss, now));
                                }
                            }
                        } else if let Some(w) = read_wait.get_mut(&page) {
                            w.push((jid, idx, k, now));
                        } else if let Some(got) = port.read_start(page) {
                            answered.push((jid, idx, k, got, now));
                        } else {
                            read_wait.insert(page, vec![(jid, idx, k, now)]);
                        }
                    }
                }
                job.queue.pop_front();
                job.tries[idx][usize::from(k)] = job.tries[idx][usize::from(k)].saturating_add(1);
                any = true;
            }
        }
        for (jid, idx, k, got, t0) in answered {
            self.deliver(jid, idx, k, got, t0);
        }
        any
    }

    /// Take finished operations from the port.
    fn collect(&mut self, port: &mut GmsPort) -> bool {
        let mut any = false;
        for (rpage, version, r) in port.put_log.drain(..).collect::<Vec<_>>() {
            any = true;
            if self.repair.put_done(rpage, version, &r, &mut self.targets, &mut self.written) {
                continue;
            }
            let Some((jid, idx, k, target)) = self.put_wait.remove(&(rpage, version.0)) else {
                continue;
            };
            let now = Instant::now();
            let elsewhere = self.targets.done(target, Some(&r), now);
            let out = match r {
                PutResult::Stored { .. } => {
                    self.counters.puts_stored += 1;
                    None
                }
                PutResult::Refused => Some(PutOutcome::Refused),
                PutResult::Superseded => Some(PutOutcome::Superseded),
                PutResult::WrongView => Some(PutOutcome::WrongView),
                PutResult::Failed => Some(PutOutcome::Failed { targets: Nodes::new(&[target]) }),
            };
            let Some(job) = self.jobs.get_mut(&jid) else { continue };
            let Items::Put { items, res, writes } = &mut job.items else { continue };
            let Some(w) = writes[idx].as_mut() else { continue };
            w.done(k, version, &r);
            if res[idx].is_some() {
                continue;
            }
            let ki = usize::from(k);
            let me = port.id();
            let members = port.node.members().ids().iter().filter(|&&n| n != me).count();
            match out {
                None if w.complete() => {
                    let holders = w.holders();
                    let live = port.node.members();
                    self.written.record(items[idx].0, w.version(), &holders, |n| live.contains(n));
                    res[idx] = Some(PutOutcome::Stored { targets: Nodes::new(&holders), version: w.version().0 });
                    job.left -= 1;
                }
                // Stored; the other replicas are still under way.
                None => {}
                Some(PutOutcome::Refused) if usize::from(job.refusals[idx][ki]) < members && elsewhere => {
                    // A full target: another that has room takes the replica.
                    job.refusals[idx][ki] += 1;
                    job.tries[idx][ki] = job.tries[idx][ki].saturating_sub(1);
                    job.queue.push_back((idx, k));
                }
                // No answer in time (a dropped packet, a dead target), or a target whose
                // view of the members differs (views converge as heartbeats are heard):
                // again, as a newer version (to another target if this one died).
                Some(PutOutcome::Failed { .. } | PutOutcome::WrongView) if job.tries[idx][ki] < MAX_TRIES => {
                    self.counters.retries += 1;
                    job.queue.push_back((idx, k));
                }
                Some(out) => {
                    // The write is not done: every replica was not stored.
                    res[idx] = Some(out);
                    job.left -= 1;
                }
            }
        }
        if !self.get_wait.is_empty() {
            let ops: Vec<OpId> = self.get_wait.keys().copied().collect();
            for op in ops {
                if let Some(got) = port.get_poll(op) {
                    let (jid, idx, k, t0) = self.get_wait.remove(&op).expect("key taken from the map");
                    self.deliver(jid, idx, k, got, t0);
                    any = true;
                }
            }
        }
        if !self.read_wait.is_empty() {
            let pages: Vec<PageId> = self.read_wait.keys().copied().collect();
            for page in pages {
                if let Some(got) = port.read_poll(page) {
                    for (jid, idx, k, t0) in self.read_wait.remove(&page).unwrap_or_default() {
                        self.deliver(jid, idx, k, got.clone(), t0);
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

    /// Replica `k` of job `jid`'s item `idx` answered `got`.
    fn deliver(&mut self, jid: u64, idx: usize, k: u8, got: Got, t0: Instant) {
        let took = t0.elapsed();
        self.lat_all.record(took.as_nanos() as u64);
        let Some(job) = self.jobs.get_mut(&jid) else { return };
        let Items::Get { network_only, pages, res } = &job.items else { return };
        if res[idx].is_some() {
            return;
        }
        let page = pages[idx];
        let hit = match &got {
            Got::Hit { version, .. } => Some(*version),
            Got::Miss => None,
        };
        // A copy older than this daemon's last write of the page is stale.
        let take = match read_step(self.replicas, k, hit, self.written.version(&page)) {
            ReadStep::Next(n) => {
                self.counters.replica_fallbacks += 1;
                job.queue.push_front((idx, n));
                return;
            }
            ReadStep::Take => true,
            ReadStep::Miss => false,
        };
        let timed_out = hit.is_none() && took >= self.retry_after;
        // A miss that took this long was a timeout, not a "not cached" answer: a dropped
        // packet or a dead node. Once more from replica 0 (the failure may be known by now).
        if timed_out && *network_only && job.tries[idx][0] < MAX_TRIES {
            self.counters.retries += 1;
            job.queue.push_back((idx, 0));
            return;
        }
        // A page this daemon wrote, with a holder not known to have failed, that no
        // replica had current: after a membership change the survivors re-register their
        // copies with the pages' new directory nodes (a few calls over a lossy link), and a
        // getpage through the directory misses until then. Asked again a little later.
        let held = self.written.get(&page).is_some_and(|r| !r.all_lost());
        if !take && held && job.tries[idx][0] < MISS_TRIES {
            self.counters.retries += 1;
            job.later.push((Instant::now() + self.retry_after, idx));
            return;
        }
        self.counters.gets += 1;
        let out = match got {
            Got::Hit { version, data, source } if take => {
                let s = Served::from(source);
                self.counters.hits_by[s as usize] += 1;
                GetOutcome::Hit { version: version.0, source: s, data }
            }
            _ => {
                self.counters.misses += 1;
                GetOutcome::Miss(match self.written.get(&page) {
                    Some(r) if r.all_lost() => {
                        MissWhy::HolderFailed { node: r.holders.as_slice().first().copied().unwrap_or(0) }
                    }
                    _ if self.alone => MissWhy::Alone,
                    _ if timed_out => MissWhy::TimedOut,
                    _ => MissWhy::NotFound,
                })
            }
        };
        if let Items::Get { res, .. } = &mut job.items {
            res[idx] = Some(out);
            job.left -= 1;
        }
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
            if let Items::Put { items, res, writes } = &job.items {
                // Writes that did not complete still moved their pages.
                for ((item, r), w) in items.iter().zip(res).zip(writes) {
                    let (Some(w), false) = (w, matches!(r, Some(PutOutcome::Stored { .. }))) else { continue };
                    self.written.partial(item.0, &w.stored(), w.sites());
                }
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

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A version newer than any this daemon gave before and, across daemons, ordered by
/// wall-clock time (ns since the epoch).
fn next_version(last: &mut u64) -> u64 {
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    *last = wall.max(*last + 1);
    *last
}
