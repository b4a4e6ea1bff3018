// SPDX-License-Identifier: GPL-2.0-only
//! The `gmsd` node daemon: one GMS node ([`GmsPort`]) on a virtual NIC whose firmware is
//! driven inline over one of the vNIC's link backends (UDP or raw Ethernet, [`crate::link`]),
//! the GMS heartbeat on the same link
//! ([`crate::peers`]), and the control socket ([`crate::control`]), all polled from
//! one loop.
//!
//! The loop spins while there is work (a wakeup costs 25–45 µs on this kind of machine, more
//! than a whole 8 KiB getpage) and, after [`IDLE_SPIN`] without any (`--idle-spin-us`),
//! sleeps in `poll(2)` on the link's socket and the control sockets until the next
//! deadline of the protocol cores: the next heartbeat to send or peer that may be declared
//! failed or reported never heard ([`Peers::deadline`]), NetRPC's and GMS's timers and the global LRU's epochs
//! ([`GmsPort::poll_timeout`]), a lost replica's repair ([`Control::poll_timeout`]). A
//! message or a client wakes it at once. Heartbeats and global-LRU messages, which come on
//! their periods whatever the load, are handled but do not restart the spin: an idle
//! daemon wakes only for them and its deadlines.

use crate::control::Control;
use crate::link::{LinkAddr, PeerAddr};
use crate::peers::{absent_cause, Change, Notice, Peers};
use crate::proto::{NodeMem, PeerState, Stat};
use crate::units::Human;
use anyhow::{bail, Context};
use gms::prelude::*;
use gms::replica::MAX_REPLICAS;
use gms::store::liveness::Event;
use gms::store::nodes::{NodeSet, MAX_NODE};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_host::endpoint::EndpointConfig;
use trapeze_host::iface::layout::LinkCounter;
use trapeze_node::gms::{GmsPort, CACHE_PAGES};
use trapeze_node::host::DEFAULT_REGION_BASE;
use trapeze_node::rpc::FRAME_BYTES;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::shm::Mapping;

/// How long the loop keeps spinning after its last work, by default (`--idle-spin-us`).
pub const IDLE_SPIN: Duration = Duration::from_millis(2);
/// The largest `--budget-mb`: 64 GiB of pages.
pub const MAX_BUDGET_MB: u64 = 65_536;
/// Most members a node supports (the node's member table).
pub const MAX_MEMBERS: usize = 16;
/// A peer is declared failed only after silence of at least this many heartbeat intervals
/// (`--dead-after-ms` ≥ 2 × `--heartbeat-ms`): a shorter timeout fails live peers between
/// two of their heartbeats, and each such false failure drops directory entries.
pub const MIN_DEAD_AFTER_BEATS: u32 = 2;

/// Everything `gmsd` is started with.
#[derive(Clone, Debug)]
pub struct Options {
    pub node: u16,
    /// This node's end of the link: a UDP address or an Ethernet interface (heartbeats
    /// ride the link too).
    pub link: LinkAddr,
    /// The other nodes' link addresses (of the link's kind: [`crate::link::parse_peers`]).
    pub peers: Vec<(u16, PeerAddr)>,
    pub budget_pages: usize,
    /// Pages this node can be the directory node for (live entries and tombstones).
    pub dir_entries: usize,
    pub socket: PathBuf,
    pub heartbeat: Duration,
    pub dead_after: Duration,
    /// A getpage/putpage not answered after this long completes as a miss/failure.
    pub op_timeout: Duration,
    /// The local page cache (reads through the cache only; 0: off).
    pub cache_pages: usize,
    /// Client operations kept in flight at most.
    pub window: usize,
    /// Faults and wire delay injected on this node's link sends.
    pub faults: FaultConfig,
    /// The cluster key the link's packets are authenticated under (`None`: unauthenticated).
    pub key: Option<trapeze_vnic::key::ClusterKey>,
    /// Copies of each page put through this daemon, on distinct other nodes (1..=[`MAX_REPLICAS`]).
    pub replicas: u8,
    /// Pages of each volume this daemon writes ([`crate::volumes`]).
    pub volume_pages: u64,
    /// How long the loop spins after its last work (a client's request, a message other
    /// than a heartbeat or a global-LRU message, a membership change) before it sleeps.
    pub idle_spin: Duration,
}

impl Options {
    /// Check what clap cannot: ids, duplicates, the budget against the node's capacity.
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut ids = vec![self.node];
        for &(n, a) in &self.peers {
            if n == self.node {
                bail!("peer {n}={a}: that is this node's own id (--node {n})");
            }
            if ids.contains(&n) {
                bail!("peer {n} is given twice");
            }
            ids.push(n);
        }
        crate::link::check_peers(&self.link, &self.peers)?;
        if let Some(n) = ids.iter().find(|&&n| NodeSet::check(n).is_err()) {
            let which = if *n == self.node { "--node" } else { "--peer" };
            bail!("{which} {n}: node ids are 0..={MAX_NODE} (the ids the cluster's liveness table covers)");
        }
        if ids.len() > MAX_MEMBERS {
            bail!("{} nodes given; a cluster has at most {MAX_MEMBERS}", ids.len());
        }
        if self.budget_pages == 0 {
            bail!("--budget-mb must give at least one page ({FRAME_BYTES} bytes)");
        }
        let max_pages = (MAX_BUDGET_MB << 20) as usize / FRAME_BYTES as usize;
        if self.budget_pages > max_pages {
            bail!("--budget-mb: {} pages is more than {MAX_BUDGET_MB} MiB", self.budget_pages);
        }
        if self.dir_entries == 0 || self.dir_entries > 2 * max_pages {
            bail!("--directory-mb: {} pages is not in 1..={} MiB", self.dir_entries, 2 * MAX_BUDGET_MB);
        }
        if self.window == 0 || self.window > trapeze_node::gms::OPS / 2 {
            bail!("--window {}: must be 1..={}", self.window, trapeze_node::gms::OPS / 2);
        }
        let others = ids.len() - 1;
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            bail!("--replicas {}: must be 1..={MAX_REPLICAS}", self.replicas);
        }
        if self.replicas > 1 && usize::from(self.replicas) > others {
            bail!(
                "--replicas {}: each copy of a page goes to a distinct node other than this one, and the cluster has \
                 {others} other node{} (--peer); give more peers or a lower --replicas",
                self.replicas,
                if others == 1 { "" } else { "s" }
            );
        }
        if self.heartbeat.is_zero() || self.dead_after < self.heartbeat * MIN_DEAD_AFTER_BEATS {
            let (hb, dead) = (self.heartbeat.as_millis(), self.dead_after.as_millis());
            let min = hb * MIN_DEAD_AFTER_BEATS as u128;
            bail!(
                "--dead-after-ms {dead} with --heartbeat-ms {hb}: the failure timeout must be at least \
                 {MIN_DEAD_AFTER_BEATS} × the heartbeat interval ({min} ms), or live peers are declared failed \
                 between two heartbeats; raise --dead-after-ms or lower --heartbeat-ms"
            );
        }
        Ok(())
    }
}

/// Counters the daemon keeps beside the port's.
#[derive(Default)]
pub struct DaemonStats {
    pub failures_detected: u64,
    /// Longest time between two passes of the loop (a stalled or descheduled daemon); an
    /// idle sleep counts only for how long past its deadline the loop woke.
    pub max_pass_gap: Duration,
    pub rejoins: u64,
    /// The directory-full count last warned about, and when.
    pub dir_full_warned: (u64, Option<Instant>),
}

/// A running node.
pub struct Daemon {
    pub opts: Options,
    pub port: GmsPort,
    pub live: Peers,
    pub control: Control,
    /// The link's medium in one line (`udp 127.0.0.1:7000 (2 peers)`, `ether veth0 02:…`).
    pub medium: String,
    link_fd: OwnedFd,
    /// The NIC (driven inline by the port), for its counters.
    nic: Arc<Nic>,
    started: Instant,
    pub stats: DaemonStats,
    changes: Vec<Change>,
    notices: Vec<Notice>,
    /// When [`Self::liveness`] must run next (it runs too whenever heartbeats arrived).
    live_at: Instant,
}

impl Daemon {
    /// Open the link, the NIC, the node, the heartbeat and the control socket.
    pub fn open(opts: Options) -> anyhow::Result<Daemon> {
        opts.validate()?;
        let backend = crate::link::open(&opts.link, &opts.peers)?;
        let link_fd = backend.readable_fd().context("the link backend has no descriptor")?.try_clone_to_owned()?;
        let medium = backend.describe();
        let live = Peers::new(
            opts.node,
            &opts.peers.iter().map(|p| p.0).collect::<Vec<_>>(),
            opts.heartbeat,
            opts.dead_after,
            Instant::now(),
        )?;
        let control = Control::bind(&opts.socket, opts.replicas, opts.volume_pages)
            .with_context(|| format!("control socket (--socket) {}", opts.socket.display()))?;
        let mut link = Link::new(opts.node, backend, opts.faults);
        link.set_key(opts.key.as_ref());
        let nic = Arc::new(Nic::new(&format!("gmsd{}", opts.node), link, Duration::ZERO)?);
        let inline = nic.start_inline()?;
        let frames = opts.budget_pages + CACHE_PAGES.max(opts.cache_pages) + 2 * 64 + 512 + 4 * opts.window;
        let bytes = (frames * FRAME_BYTES as usize).next_power_of_two();
        let region = Arc::new(Mapping::create_memfd("gmsd-frames", bytes).with_context(|| {
            format!(
                "allocating the {} MiB frame region for --budget-mb, --cache-pages {} and --window {}",
                bytes >> 20,
                opts.cache_pages,
                opts.window
            )
        })?);
        nic.shared()
            .dma
            .register("gms", DEFAULT_REGION_BASE, region.clone(), 0, bytes as u64)
            .map_err(|e| anyhow::anyhow!("registering the frame region: {e}"))?;
        // A `GETPAGES` reply to a guest gathers up to eight of its 4 KiB pages: 32 KiB.
        let cfg = EndpointConfig { node_id: opts.node, mtu: 4 * FRAME_BYTES, ..EndpointConfig::default() };
        let op_ns = opts.op_timeout.as_nanos() as u64;
        let rcfg = netrpc::rpc::Config { call_timeout: 4 * op_ns, nonblocking_timeout: Some(4 * op_ns) };
        // Background directory updates retry after half an operation timeout (the default
        // 20 ms turns a few drops on a busy machine into a retry storm).
        let gcfg = GmsConfig {
            budget: opts.budget_pages,
            op_timeout: op_ns,
            task_timeout: op_ns / 2,
            retry_delay: op_ns / 10,
            ..GmsConfig::default()
        };
        // IPT keys and call generations from the OS's random source: a node on the link
        // that knows our id and roughly when we started must not be able to guess them.
        let at = trapeze_node::rpc::Attach::inline(nic.mem(), region, cfg, trapeze_node::host::random_seed(), inline);
        let mut port = GmsPort::new(at, gcfg, rcfg, opts.dir_entries)?;
        port.set_cache_pages(opts.cache_pages);
        // Peers become members when first heard (a peer never heard is never put to).
        let ids = [opts.node];
        port.set_members(live.view(&ids), &ids)?;
        let peers: Vec<u16> = opts.peers.iter().map(|p| p.0).collect();
        tracing::info!(node = opts.node, link = %medium, peers = ?peers, budget = opts.budget_pages, socket = %opts.socket.display(), "gmsd up");
        Ok(Daemon {
            opts,
            port,
            live,
            control,
            medium,
            link_fd,
            nic,
            started: Instant::now(),
            stats: DaemonStats::default(),
            changes: Vec::new(),
            notices: Vec::new(),
            live_at: Instant::now(),
        })
    }

    /// Run until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        let mut last_work = Instant::now();
        let mut last_pass = Instant::now();
        let mut seen = self.port.foreground_messages();
        while !stop.load(Ordering::Relaxed) {
            let pass = Instant::now();
            self.stats.max_pass_gap = self.stats.max_pass_gap.max(pass.saturating_duration_since(last_pass));
            last_pass = pass;
            let polled = self.port.poll();
            let served = self.control.step(&mut self.port, self.opts.window, pass);
            if self.control.wants_stat() {
                let s = self.stat();
                self.control.answer_stat(&s);
            }
            let now = Instant::now();
            let mut changed = false;
            if now >= self.live_at || !self.port.node.host.heartbeats.is_empty() {
                changed = self.liveness(now);
                self.live_at = self.live.deadline();
            }
            // Work restarts the spin: a client, a membership change, any message but the
            // periodic heartbeats and global-LRU messages (an idle cluster exchanges tens
            // of those a second, and a spin after each kept every daemon on a core).
            let fg = self.port.foreground_messages();
            if served || changed || fg != seen {
                last_work = now;
                seen = fg;
            }
            if polled || served || changed {
                continue;
            }
            // Answers in flight wake the loop through the link; their timeouts are the
            // port's deadlines.
            if now.duration_since(last_work) > self.opts.idle_spin && !self.control.has_work() {
                let until = [self.port.poll_timeout(), self.control.poll_timeout(&self.port)]
                    .into_iter()
                    .flatten()
                    .fold(self.live_at, Instant::min);
                self.sleep(until)?;
                // The sleep itself is no gap; waking late is.
                last_pass = Instant::now().min(until);
            } else {
                // Nothing this pass: let another process have the core (on a machine with
                // fewer cores than spinning daemons, a descheduled daemon's 32-entry receive
                // ring overflows), but come straight back if none wants it.
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Heartbeats due, heard and missed, packets failing the key check; whether the
    /// membership changed.
    fn liveness(&mut self, now: Instant) -> bool {
        self.warn_dir_full(now);
        let held = self.port.node.held_count() as u32;
        let budget = self.port.node.budget() as u32;
        if let Some(hb) = self.live.due(now, held, budget) {
            for &(n, _) in &self.opts.peers {
                // A full NetRPC transmit queue drops this one; the next is 100 ms away.
                if let Err(e) = self.port.send_heartbeat(n, &hb) {
                    tracing::debug!("{e}");
                }
            }
        }
        for (_, hb) in std::mem::take(&mut self.port.node.host.heartbeats) {
            if self.live.heard(now, &hb) {
                self.control.heard(hb.node, hb.held, hb.budget);
            }
        }
        self.port.publish_link_stats();
        let rejects = trapeze_vnic::nic::link_stats(&self.nic).mac_rejected_by;
        self.live.check(now, &rejects, &mut self.changes, &mut self.notices);
        for notice in std::mem::take(&mut self.notices) {
            self.notice(notice, now);
        }
        let changed = !self.changes.is_empty();
        for change in std::mem::take(&mut self.changes) {
            self.change(change, now);
        }
        if changed {
            let mut ids = self.live.members();
            ids.push(self.opts.node);
            ids.sort_unstable();
            // The same set and incarnations give the same number on every node (GMS only
            // compares views for equality): nodes that agree on who is alive agree on the
            // view without a membership service, and a view of an earlier run never matches.
            if let Err(e) = self.port.set_members(self.live.view(&ids), &ids) {
                tracing::error!("membership: {e}");
            }
        }
        changed
    }

    /// Act on a membership change (the new member set is given to the port after).
    fn change(&mut self, change: Change, now: Instant) {
        let me = self.opts.node;
        match change {
            Change::Joined(n) => {
                tracing::info!(node = me, peer = n, "peer heard: a member");
                self.control.member(self.port.now(), Event::Joined(n));
            }
            Change::Failed(n) => {
                let heard = self.live.row(n, now).map_or(0, |r| r.last_heard_ms);
                tracing::warn!(
                    node = me,
                    peer = n,
                    "peer silent for over {} (last heard {} ago; this loop's longest pass gap {}): failed",
                    Human(self.opts.dead_after),
                    Human(Duration::from_millis(heard)),
                    Human(self.stats.max_pass_gap)
                );
                self.stats.failures_detected += 1;
                self.port.node_failed(n);
                self.control.member(self.port.now(), Event::Failed(n));
            }
            Change::Rejoined(n) | Change::Restarted(n) => {
                let how = if matches!(change, Change::Restarted(_)) { "restarted" } else { "heard again" };
                tracing::info!(node = me, peer = n, "peer {how}: rejoins");
                self.stats.rejoins += 1;
                self.port.member_back(n);
                // The stores: a restarted peer lost every copy it held; one heard again
                // after it was declared failed kept them (it may only have been suspected).
                let event = if matches!(change, Change::Restarted(_)) { Event::Restarted(n) } else { Event::Joined(n) };
                self.control.member(self.port.now(), event);
            }
        }
    }

    /// Log a notice about a peer, naming its address, the cause and the fix.
    fn notice(&self, notice: Notice, now: Instant) {
        let me = self.opts.node;
        let addr = |n: u16| self.opts.peers.iter().find(|p| p.0 == n).map_or(String::new(), |p| p.1.to_string());
        match notice {
            Notice::KeyMismatch { node, packets } => tracing::warn!(
                node = me,
                peer = node,
                "packets claiming to be node {node} ({}) fail the cluster key check ({packets} dropped so far): {}",
                addr(node),
                crate::peers::KEY_FIX
            ),
            Notice::NeverHeard { node } => {
                let cause = self.live.row(node, now).and_then(|r| absent_cause(&r)).unwrap_or_default();
                tracing::warn!(
                    node = me,
                    peer = node,
                    "peer {node} ({}) not heard in {} since start: not a member, no puts go to it; {cause}",
                    addr(node),
                    Human(crate::peers::NEVER_HEARD_AFTER)
                );
            }
        }
    }

    /// Say so when this node's directory refused registrations for want of room (at most
    /// every 10 s): every put of a page it is the directory node for is then refused, which
    /// a client sees only as `Refused`.
    fn warn_dir_full(&mut self, now: Instant) {
        let full = self.port.node.stats().dir_full;
        let (warned, at) = self.stats.dir_full_warned;
        if full > warned && at.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
            tracing::warn!(
                node = self.opts.node,
                "the directory is full ({} entries): {} registrations refused, and their puts with them; \
                 give this node a larger --directory-mb",
                self.port.node.dir_capacity(),
                full - warned
            );
            self.stats.dir_full_warned = (full, Some(now));
        }
    }

    /// Sleep until something is readable (a frame on the link, a client) or `until`.
    fn sleep(&mut self, until: Instant) -> anyhow::Result<()> {
        let wait = until.saturating_duration_since(Instant::now());
        if wait.is_zero() || !self.port.prepare_wait() {
            return Ok(());
        }
        let ts = Timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as _ };
        let mut fds = vec![PollFd::new(&self.link_fd, PollFlags::IN)];
        self.control.poll_fds(&mut fds);
        let r = rustix::event::poll(&mut fds, Some(&ts));
        let client = fds.get(1).is_some_and(|l| !l.revents().is_empty());
        drop(fds);
        self.port.end_wait();
        self.control.woke(client);
        match r {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e).context("poll"),
        }
    }

    /// The `stat` answer.
    pub fn stat(&self) -> Stat {
        let mut s = stat(&self.port, &self.live, &self.control, &self.stats, self.opts.node, self.started);
        self.port.publish_link_stats();
        s.nic = nic_counters(&self.nic);
        let link = trapeze_vnic::nic::link_stats(&self.nic);
        s.link_refused = LinkCounter::ALL.iter().map(|&c| (c.name().to_string(), link.counter(c))).collect();
        s
    }
}

/// The NIC's firmware counters and link counters that are not zero (drops show up here).
pub fn nic_counters(nic: &Nic) -> std::collections::BTreeMap<String, u64> {
    let mut out: std::collections::BTreeMap<String, u64> =
        nic.status().counters.into_iter().filter(|c| c.1 != 0).collect();
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(trapeze_vnic::nic::link_stats(nic)) {
        out.extend(m.into_iter().filter_map(|(k, v)| Some((format!("link_{k}"), v.as_u64().filter(|&x| x != 0)?))));
    }
    out
}

/// Build a [`Stat`] from the pieces (the control socket calls this with the loop's state).
pub fn stat(port: &GmsPort, live: &Peers, control: &Control, ds: &DaemonStats, me: u16, started: Instant) -> Stat {
    let gs = port.node.stats();
    let ps = port.stats;
    let now = Instant::now();
    let mut nodes = vec![NodeMem {
        node: me,
        alive: true,
        state: PeerState::Alive,
        mac_rejected: 0,
        held: port.node.held_count() as u64,
        budget: port.node.budget() as u64,
        last_heard_ms: 0,
    }];
    nodes.extend(live.rows(now));
    nodes.sort_by_key(|n| n.node);
    let c = &control.counters();
    Stat {
        node: me,
        uptime_s: started.elapsed().as_secs_f64(),
        members: port.node.members().ids().to_vec(),
        view: port.node.members().view(),
        nodes,
        gets: c.gets,
        hits: c.hits(),
        misses: c.misses,
        hits_cache: c.hits_by[0],
        hits_local: c.hits_by[1],
        hits_2way: c.hits_by[2],
        hits_3way: c.hits_by[3],
        puts: c.puts,
        puts_stored: c.puts_stored,
        retries: c.retries,
        puts_refused: ps.puts_refused,
        refused_here: gs.puts_refused,
        dir_full: gs.dir_full,
        pages_dropped: port.node.host.pages_dropped,
        reregistered: gs.reregistered,
        op_timeouts: gs.op_timeouts,
        failures_detected: ds.failures_detected,
        rejoins: ds.rejoins,
        max_pass_gap_ms: ds.max_pass_gap.as_secs_f64() * 1e3,
        get_latency: control.lat_all.report(),
        get_latency_2way: control.lat_2way.report(),
        get_latency_3way: control.lat_3way.report(),
        nic: Default::default(),
        puts_by_plan: port.lru.stats.puts_by_plan,
        puts_fallback: port.lru.stats.puts_fallback,
        puts_kept: c.puts_kept,
        lru_plans: port.lru.stats.plans,
        lru_epochs_started: port.lru.stats.epochs_started,
        lru_rejected: port.lru.stats.rejected,
        pages_discarded: port.pages_discarded(),
        unentitled: gs.unentitled(),
        refused: [
            ("rejected_gets", gs.rejected_gets),
            ("rejected_puts", gs.rejected_puts),
            ("rejected_putdones", gs.rejected_putdones),
            ("rejected_updates", gs.rejected_updates),
            ("rejected_removes", gs.rejected_removes),
            ("rejected_discards", gs.rejected_discards),
            ("rejected_drops", gs.rejected_drops),
            ("rejected_heartbeats", gs.rejected_heartbeats),
        ]
        .iter()
        .map(|&(k, v)| (k.to_string(), v))
        .collect(),
        link_refused: Vec::new(),
        foreign_rpc: port.rpc.stats().foreign_replies + port.rpc.stats().foreign_requests,
        stale_incarnations: live.stale_incarnations(),
        plan_weights: port.lru.plan().map_or(Vec::new(), |p| {
            let n = p.weights().iter().rposition(|&w| w > 0).map_or(0, |i| i + 1);
            p.weights()[..n].to_vec()
        }),
        replicas: control.replicas(),
        replica_fallbacks: c.replica_fallbacks,
        re_replicated: c.re_replicated,
        re_replicate_pending: control.re_replicate_pending() as u64,
        reregister_pending: port.node.reregistrations_pending() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(s: &str) -> PeerAddr {
        PeerAddr::Udp(s.parse().unwrap())
    }

    fn opts() -> Options {
        Options {
            node: 0,
            link: LinkAddr::Udp("127.0.0.1:7000".parse().unwrap()),
            peers: vec![(1, udp("127.0.0.1:7010")), (2, udp("127.0.0.1:7020"))],
            budget_pages: 1024,
            dir_entries: 8192,
            socket: PathBuf::from("/nonexistent/gmsd.sock"),
            heartbeat: Duration::from_millis(100),
            dead_after: Duration::from_secs(1),
            op_timeout: Duration::from_millis(500),
            cache_pages: 0,
            window: 8,
            idle_spin: IDLE_SPIN,
            faults: FaultConfig::NONE,
            key: None,
            replicas: 2,
            volume_pages: 1024,
        }
    }

    #[test]
    fn bad_options_are_clear_errors() {
        assert!(opts().validate().is_ok());
        let err = |f: fn(&mut Options)| {
            let mut o = opts();
            f(&mut o);
            format!("{:#}", o.validate().unwrap_err())
        };
        assert!(err(|o| o.peers.push((0, udp("127.0.0.1:7030")))).contains("this node's own id"));
        assert!(err(|o| o.peers.push((1, udp("127.0.0.1:7030")))).contains("given twice"));
        assert!(err(|o| o.peers.push((3, udp("127.0.0.1:7000")))).contains("own --listen address"));
        assert!(err(|o| o.peers.push((3, udp("127.0.0.1:7010")))).contains("same address"));
        assert!(err(|o| o.peers.push((3, udp("127.0.0.1:0")))).contains("port 0"));
        assert!(err(|o| o.link = LinkAddr::Udp("127.0.0.1:0".parse().unwrap())).contains("port 0"));
        assert!(err(|o| o.budget_pages = 0).contains("at least one page"));
        assert!(err(|o| o.budget_pages = (8 << 30) + 1).contains("more than 65536 MiB"));
        assert!(err(|o| o.dir_entries = 0).contains("--directory-mb"));
        assert!(err(|o| o.window = 0).contains("--window"));
        assert!(err(|o| o.node = 64).contains("--node 64: node ids are 0..=63"));
        assert!(err(|o| o.peers.push((100, udp("127.0.0.1:7030")))).contains("--peer 100"));
        assert!(err(|o| o.replicas = 0).contains("--replicas 0: must be 1..=4"));
        assert!(err(|o| o.replicas = 9).contains("--replicas 9: must be 1..=4"));
        let three = err(|o| o.replicas = 3);
        assert!(three.contains("--replicas 3") && three.contains("2 other nodes"), "{three}");
        let hb = err(|o| o.dead_after = Duration::from_millis(150));
        assert!(hb.contains("--dead-after-ms 150") && hb.contains("--heartbeat-ms 100"), "{hb}");
        let mut o = opts();
        o.dead_after = 2 * o.heartbeat;
        assert!(o.validate().is_ok(), "exactly twice the heartbeat is enough");
        assert!(err(|o| o.peers = (1..20).map(|n| (n, udp(&format!("127.0.0.1:{}", 8000 + 2 * n)))).collect())
            .contains("at most 16"));
    }
}
