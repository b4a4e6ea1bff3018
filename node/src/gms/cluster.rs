// SPDX-License-Identifier: GPL-2.0-only
//! An in-process GMS cluster: [`Cluster`] holds several [`GmsPort`]s on one in-process
//! switch and drives them from the calling thread (every blocking operation polls every
//! live node until it completes); [`Cluster::spawn_servers`] moves the lending nodes to a
//! thread of their own ([`Servers`]), which publishes [`NodeView`]s for live tables. The
//! main command, the GMS bench and the tests run on it.

use super::*;
use std::time::Duration;
use trapeze_firmware::iface::mem::NicMemory;

/// What the servers' thread gives back: its nodes, whether each is alive, and the
/// inline NICs it ran for other nodes (by index).
type ServersState = (Vec<GmsPort>, Vec<bool>, Vec<(usize, InlineNative)>);

/// Nodes polled by a thread of their own (see [`Cluster::spawn_servers`]).
pub struct Servers {
    handle: std::thread::JoinHandle<ServersState>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    views: Arc<std::sync::Mutex<Vec<NodeView>>>,
}

impl Servers {
    /// The server nodes as their thread last published them (every [`VIEW_EVERY_NS`]).
    pub fn views(&self) -> Vec<NodeView> {
        self.views.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// How often the servers' thread publishes its nodes' [`NodeView`]s.
pub const VIEW_EVERY_NS: u64 = 25_000_000;
/// Idle passes a server thread spins before yielding its core.
const SPIN_PASSES: u32 = 256;
/// The RPC call timeout of every node (ns): a call whose request or reply was lost is
/// failed (and its GMS operation retried or given up) after it.
pub const CALL_TIMEOUT_NS: u64 = 2_000_000_000;
/// A blocking operation fails after this many times the longest protocol timeout...
pub const WAIT_FACTOR: u32 = 5;
/// ...or this long, if that is longer.
pub const MIN_WAIT: Duration = Duration::from_secs(10);
/// Polls between two looks at the clock while a blocking operation waits.
const CLOCK_EVERY: u64 = 256;

/// One node at a glance (the main command's live table).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeView {
    pub id: u16,
    /// Pages held for the cluster, and the budget.
    pub held: usize,
    pub budget: usize,
    /// Getpages this node served as a caching site (its host).
    pub gets_served: u64,
    /// Getpages its NIC answered from the answer table, its host never seeing them.
    pub nic_answered: u64,
    /// Putpages it stored.
    pub puts_received: u64,
    /// As a client: getpages that hit / all its getpages.
    pub gets_hit: u64,
    pub gets: u64,
    /// As a client: getpage latency p50 over the recent ones (µs), if any.
    pub p50_us: Option<f64>,
    /// Pages discarded by the global LRU.
    pub discarded: u64,
    /// Background directory updates it retried (no answer in time).
    pub task_retries: u64,
}

/// Several GMS nodes driven from one thread (an in-process cluster on one switch).
pub struct Cluster {
    pub ports: Vec<GmsPort>,
    /// Nodes still polled (a dead node is never polled again).
    pub alive: Vec<bool>,
    /// How long a blocking operation may wait before it fails ([`Self::wait_limit_for`]
    /// of the protocol's timeouts: a hang becomes an error naming the operation).
    pub wait_limit: Duration,
    /// The longest a blocking operation has waited so far (for reports).
    pub longest_wait: Duration,
    view: u64,
    _switch: trapeze_vnic::link::backend::InProcSwitch,
    _nics: Vec<Arc<trapeze_vnic::nic::Nic>>,
}

impl Cluster {
    /// `n` nodes on an in-process switch, each with `budget` pages of memory for GMS.
    pub fn new(n: u16, budget: usize, gms_cfg: GmsConfig) -> anyhow::Result<Self> {
        Self::with_firmware(n, budget, gms_cfg, None, trapeze_vnic::link::FaultConfig::NONE)
    }

    /// Like [`Self::new`]; with `image`, every NIC runs that flashed riscv32 firmware
    /// image on its emulated core (a processor thread per NIC, woken by a doorbell)
    /// instead of the native firmware driven inline. Every link injects `faults` (and
    /// its wire delay) on send.
    pub fn with_firmware(
        n: u16,
        budget: usize,
        gms_cfg: GmsConfig,
        image: Option<&[u8]>,
        faults: trapeze_vnic::link::FaultConfig,
    ) -> anyhow::Result<Self> {
        use trapeze_vnic::link::Link;
        let sw = trapeze_vnic::link::backend::InProcSwitch::new();
        let port = sw.clone();
        Self::with_links(n, budget, gms_cfg, image, sw, |id| Link::new(id, Box::new(port.port(id)), faults))
    }

    /// Like [`Self::with_firmware`], each node's NIC on the link `link(id)` makes (on
    /// `sw`, which the cluster keeps alive): a keyed link, or one whose frames a test
    /// records.
    pub fn with_links(
        n: u16,
        budget: usize,
        gms_cfg: GmsConfig,
        image: Option<&[u8]>,
        sw: trapeze_vnic::link::backend::InProcSwitch,
        mut link: impl FnMut(u16) -> trapeze_vnic::link::Link,
    ) -> anyhow::Result<Self> {
        use crate::host::DEFAULT_REGION_BASE;
        use trapeze_vnic::nic::Nic;
        // One clock origin for every node, so the global LRU compares their page ages.
        let origin = Instant::now();
        let frames = budget + CACHE_PAGES + 2 * RECV_RING_ENTRIES as usize + 512;
        let bytes = (frames * FRAME_BYTES as usize).next_power_of_two();
        let mut ports = Vec::new();
        let mut nics = Vec::new();
        for id in 0..n {
            let nic = Arc::new(Nic::new(&format!("g{id}"), link(id), Duration::ZERO)?);
            let (inline, doorbell) = match image {
                None => (Some(nic.start_inline()?), None),
                Some(img) => {
                    nic.load_image(img)?;
                    let db = Arc::new(trapeze_vnic::engines::new_eventfd()?);
                    nic.shared().wakers.add_doorbell(db.clone());
                    (None, Some(db))
                }
            };
            let region = Arc::new(Mapping::create_memfd("gms-frames", bytes)?);
            nic.shared()
                .dma
                .register("gms", DEFAULT_REGION_BASE, region.clone(), 0, bytes as u64)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            // Four pages in one reply, as gmsd's: a `GETPAGES` of four (`gms::store::group`).
            let cfg =
                EndpointConfig { node_id: id, mtu: u32::from(GROUP_PAGES) * FRAME_BYTES, ..EndpointConfig::default() };
            let rcfg = Config { call_timeout: CALL_TIMEOUT_NS, nonblocking_timeout: Some(CALL_TIMEOUT_NS) };
            let gcfg = GmsConfig { budget, ..gms_cfg };
            let seed = [id as u64 + 1, 77];
            let at = Attach { mem: nic.mem(), region, base: DEFAULT_REGION_BASE, cfg, seed, cpu: inline, doorbell };
            ports.push(GmsPort::new(at, gcfg, rcfg, super::default_dir_entries(budget))?);
            // An inline NIC lives as long as its driver holds it; a NIC with its own
            // processor, as long as the cluster.
            nics.push(nic);
        }
        let ids: Vec<u16> = (0..n).collect();
        for p in ports.iter_mut() {
            p.epoch = origin;
            p.set_members(1, &ids)?;
        }
        Ok(Cluster {
            alive: vec![true; n as usize],
            ports,
            wait_limit: Self::wait_limit_for(&gms_cfg),
            longest_wait: Duration::ZERO,
            view: 1,
            _switch: sw,
            _nics: nics,
        })
    }

    /// How long a blocking operation may wait: [`WAIT_FACTOR`] times the longest of the
    /// protocol's timeouts (a GMS operation's `op_timeout`, the RPC call timeout that
    /// recovers a lost frame), and at least [`MIN_WAIT`]. Every operation ends by one of
    /// those timeouts at the latest, so a wait past the limit is a hang, not a slow run
    /// (a loaded machine, emulated NIC cores, a lossy link).
    pub fn wait_limit_for(gms_cfg: &GmsConfig) -> Duration {
        let longest = Duration::from_nanos(gms_cfg.op_timeout.max(CALL_TIMEOUT_NS));
        (longest * WAIT_FACTOR).max(MIN_WAIT)
    }

    /// One pass over the live nodes.
    pub fn poll(&mut self) -> bool {
        let mut busy = false;
        for (p, &a) in self.ports.iter_mut().zip(&self.alive) {
            if a {
                busy |= p.poll();
            }
        }
        busy
    }

    /// Poll until `done` says so, for at most [`Self::wait_limit`] (see [`Self::wait_until`]).
    pub fn poll_until(&mut self, done: impl FnMut(&mut Self) -> bool) -> anyhow::Result<()> {
        self.wait_until(|| "a wait".into(), done)
    }

    /// Poll until `done` says so; after [`Self::wait_limit`] fail with an error naming the
    /// operation (`what`, made only then) and the time it waited.
    pub fn wait_until(
        &mut self,
        what: impl FnOnce() -> String,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> anyhow::Result<()> {
        if done(self) {
            return Ok(());
        }
        let t0 = Instant::now();
        let mut polls = 0u64;
        loop {
            self.poll();
            if done(self) {
                self.longest_wait = self.longest_wait.max(t0.elapsed());
                return Ok(());
            }
            polls += 1;
            // An idle pass costs about as much as a clock read: look at the clock now and then.
            if polls.is_multiple_of(CLOCK_EVERY) {
                let waited = t0.elapsed();
                if waited > self.wait_limit {
                    bail!(
                        "cluster: {} did not finish in {:.1} s ({polls} polls; the limit is {:.0} s, \
                         {WAIT_FACTOR} times the longest protocol timeout)",
                        what(),
                        waited.as_secs_f64(),
                        self.wait_limit.as_secs_f64()
                    );
                }
            }
        }
    }

    /// Poll until no client operation is in flight at node `i`.
    pub fn settle(&mut self, i: usize) -> anyhow::Result<()> {
        self.wait_until(|| format!("node {i}: the end of its operations in flight"), |c| c.ports[i].in_flight() == 0)
    }

    /// Blocking putpage from node `i`: the result.
    pub fn put_wait(&mut self, i: usize, page: PageId, version: Version, data: &[u8]) -> anyhow::Result<PortStats> {
        self.ports[i].put(page, version, data, None)?;
        self.settle(i)?;
        Ok(self.ports[i].stats)
    }

    /// Blocking discard of `page` up to `version` from node `i`: whether the directory
    /// forgot it.
    pub fn discard_wait(&mut self, i: usize, page: PageId, version: Version) -> anyhow::Result<bool> {
        let op = self.ports[i].discard_start(page, version)?;
        let mut out = None;
        self.wait_until(
            || format!("node {i}: discard of {page:?}"),
            |c| {
                out = c.ports[i].discard_poll(op);
                out.is_some()
            },
        )?;
        Ok(out == Some(true))
    }

    /// Blocking plain getpage from node `i`.
    pub fn get_wait(&mut self, i: usize, page: PageId) -> anyhow::Result<Got> {
        let op = self.ports[i].get_start(page)?;
        let mut out = None;
        self.wait_until(
            || format!("node {i}: getpage of page {}:{}", page.space, page.page),
            |c| {
                out = c.ports[i].get_poll(op);
                out.is_some()
            },
        )?;
        Ok(out.unwrap_or(Got::Miss))
    }

    /// Blocking read from node `i` through its cache and read-ahead into `buf` (see
    /// [`GmsPort::read_start_into`]).
    pub fn read_into(&mut self, i: usize, page: PageId, buf: &mut [u8]) -> anyhow::Result<ReadInto> {
        if let Some(g) = self.ports[i].read_start_into(page, buf) {
            return Ok(g);
        }
        let mut out = None;
        self.wait_until(
            || format!("node {i}: read of page {}:{}", page.space, page.page),
            |c| {
                out = c.ports[i].read_poll_into(page, buf);
                c.ports[i].stats.read_wait_polls += out.is_none() as u64;
                out.is_some()
            },
        )?;
        Ok(out.unwrap_or(ReadInto::Miss(gms::reader::Heard::NoAnswer)))
    }

    /// Blocking read from node `i` through its cache and read-ahead.
    pub fn read(&mut self, i: usize, page: PageId) -> anyhow::Result<Got> {
        if let Some(g) = self.ports[i].read_start(page) {
            return Ok(g);
        }
        let mut out = None;
        self.wait_until(
            || format!("node {i}: read of page {}:{}", page.space, page.page),
            |c| {
                out = c.ports[i].read_poll(page);
                c.ports[i].stats.read_wait_polls += out.is_none() as u64;
                out.is_some()
            },
        )?;
        Ok(out.unwrap_or(Got::Miss))
    }

    /// Move nodes `from..` to a thread of their own that polls them until
    /// [`Self::rejoin`] (the client's blocking operations then poll only the nodes left).
    /// Two threads on two cores: the servers answer while the client works.
    pub fn spawn_servers(&mut self, from: usize) -> anyhow::Result<Servers> {
        self.spawn_servers_with(from, false)
    }

    /// Like [`Self::spawn_servers`]; with `nics`, the servers' thread also runs the
    /// firmware of the remaining nodes' inline NICs, as a NIC's own processor would (the
    /// client thread then does host work only; its sends wait for that thread to poll).
    pub fn spawn_servers_with(&mut self, from: usize, nics: bool) -> anyhow::Result<Servers> {
        let mut ports = self.ports.split_off(from);
        let alive = self.alive.split_off(from);
        let mut cpus: Vec<(usize, InlineNative)> = Vec::new();
        if nics {
            for (i, p) in self.ports.iter_mut().enumerate() {
                if let Some(c) = p.cpu.take() {
                    cpus.push((i, c));
                }
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let views = Arc::new(std::sync::Mutex::new(ports.iter().map(GmsPort::view).collect::<Vec<_>>()));
        let shown = views.clone();
        let handle = std::thread::Builder::new().name("gms-servers".into()).stack_size(64 << 20).spawn(move || {
            let (mut idle, mut passes) = (0u32, 0u32);
            let mut shown_at = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let mut busy = false;
                for (_, c) in cpus.iter_mut() {
                    busy |= c.poll();
                }
                for (p, &a) in ports.iter_mut().zip(&alive) {
                    if a {
                        busy |= p.poll();
                    }
                }
                // Spin while work is likely to come (a wakeup on the other core costs tens
                // of µs), then give the core away.
                idle = if busy { 0 } else { idle + 1 };
                if idle >= SPIN_PASSES {
                    idle = 0;
                    std::thread::yield_now();
                }
                passes = passes.wrapping_add(1);
                if passes % 1024 == 0 && shown_at.elapsed().as_nanos() as u64 >= VIEW_EVERY_NS {
                    shown_at = Instant::now();
                    let v: Vec<NodeView> = ports.iter().map(GmsPort::view).collect();
                    *shown.lock().unwrap_or_else(|e| e.into_inner()) = v;
                }
            }
            (ports, alive, cpus)
        })?;
        Ok(Servers { handle, stop, views })
    }

    /// Take the nodes of [`Self::spawn_servers`] back.
    pub fn rejoin(&mut self, s: Servers) -> anyhow::Result<()> {
        s.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (ports, alive, cpus) = s.handle.join().map_err(|_| anyhow::anyhow!("server thread panicked"))?;
        for (i, c) in cpus {
            self.ports[i].cpu = Some(c);
        }
        self.ports.extend(ports);
        self.alive.extend(alive);
        Ok(())
    }

    /// Packets the NICs' firmware dropped, summed over the nodes by cause (its drop
    /// counters in NIC memory, always current), and frames the switch dropped:
    /// `(cause, count)` for every nonzero cause. (Faults a link injects on send are not
    /// here: an inline NIC's link publishes its statistics only when it parks.)
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        use trapeze_firmware::iface::layout::Counter;
        let causes = [
            Counter::RxDropCrc,
            Counter::RxDropMalformed,
            Counter::RxBadToken,
            Counter::RxNoFrame,
            Counter::TxMalformed,
        ];
        let mut out: Vec<(&'static str, u64)> =
            causes.iter().map(|c| (c.name(), self._nics.iter().map(|n| n.mem().load_u64(c.offset())).sum())).collect();
        out.push(("switch_dropped_frames", self._switch.dropped_frames()));
        out.retain(|&(_, v)| v > 0);
        out
    }

    /// Faults the nodes' links injected (`--link-faults`), summed (the inline NICs'
    /// statistics published first): `(kind, count)`, nonzero.
    pub fn injected_faults(&self) -> Vec<(&'static str, u64)> {
        for p in &self.ports {
            if let Some(c) = &p.cpu {
                c.publish_link_stats();
            }
        }
        let stats: Vec<_> = self._nics.iter().map(|n| trapeze_vnic::nic::link_stats(n)).collect();
        let sum = |f: fn(&trapeze_vnic::link::LinkStats) -> u64| stats.iter().map(f).sum::<u64>();
        let mut out = vec![
            ("dropped", sum(|s| s.injected_drops)),
            ("duplicated", sum(|s| s.injected_duplicates)),
            ("reordered", sum(|s| s.injected_reorders)),
            ("corrupted", sum(|s| s.injected_corruptions)),
        ];
        out.retain(|&(_, v)| v > 0);
        out
    }

    /// Node `i`'s link statistics now (its inline NIC publishes them first).
    pub fn link_stats(&self, i: usize) -> trapeze_vnic::link::LinkStats {
        if let Some(c) = &self.ports[i].cpu {
            c.publish_link_stats();
        }
        trapeze_vnic::nic::link_stats(&self._nics[i])
    }

    /// Node `dead` stops (never polled again); the survivors are told it failed.
    pub fn kill(&mut self, dead: usize) {
        self.alive[dead] = false;
        self.view += 1;
        for (k, p) in self.ports.iter_mut().enumerate() {
            if self.alive[k] {
                p.node_failed(dead as u16);
            }
        }
    }
}
