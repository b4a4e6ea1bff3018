// SPDX-License-Identifier: GPL-2.0-only
//! A 3-node Global Memory Service cluster in one process on virtual NICs (native
//! firmware, in-process link): node 0 is the client (on one thread), nodes 1 and 2 lend
//! their memory (each with a budget in pages; on a second thread). Node 0 loads a data set
//! larger than one node's budget with putpages (targets by the epoch-based global LRU),
//! then runs a workload — sequential scans with read-ahead depth 0 / 4 / 16, random
//! getpages, and eviction pressure (puts beyond the budgets: the lenders discard the
//! cluster's oldest pages to make room), each phase repeating its passes for a fifth of
//! `--seconds` — verifying every byte (contents are a function of page id and version),
//! and reads every page back to check it once more. It prints a summary whose `verified:`
//! line the tests read. On a terminal it shows a progress bar and a live table of the
//! nodes; otherwise one line per phase. Every wait is bounded in time
//! ([`Cluster::wait_until`]).
//!
//! `cargo run --release -p trapeze-node --bin trapeze-gms-demo [-- --quick | --seconds 20]`

use clap::Parser;
use gms::prelude::*;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use trapeze_node::gms::page_pattern as content;
use trapeze_node::gms::{Cluster, Got, NodeView, ReadInto, Servers, Source};
use trapeze_node::rpc::FRAME_BYTES;

#[derive(Parser, Clone)]
#[command(version, about = "GMS: a 3-node in-process cluster on virtual NICs")]
struct Args {
    /// Pages in the data set (8 KiB each) [default: 4000; 1000 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pages: Option<u64>,
    /// Memory budget of each node, in pages [default: 2048; 600 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    budget: Option<u64>,
    /// Random getpages per pass of the random phase [default: 4000; 1000 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    random: Option<u64>,
    /// Extra pages put beyond the data set per pass of the pressure phase (eviction
    /// pressure) [default: 1000; 300 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pressure: Option<u64>,
    /// How long the workload runs, in seconds: the five timed phases (three scans,
    /// random getpages, pressure) each repeat their passes for a fifth of it (at least
    /// one pass each); the load and the final verification come on top
    /// [default: 20; 0 with --quick].
    #[arg(long, value_parser = seconds)]
    seconds: Option<f64>,
    /// A short run for tests: a small data set and one pass of each phase (a couple of
    /// seconds; explicit sizes still apply).
    #[arg(long)]
    quick: bool,
    /// Drive all three nodes from one thread (default: the client on one thread, the
    /// two servers on another).
    #[arg(long)]
    one_thread: bool,
    /// Putpages kept outstanding (at most the 32 entries of a host's receive ring). Half
    /// the ring leaves room for GMS's own messages: a NIC with a processor of its own (a
    /// flashed image) drops packets that find the ring full, and each costs a timeout.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=32))]
    window: u64,
    /// No progress bar or live table, even on a terminal.
    #[arg(long)]
    plain: bool,
    /// Run this flashed riscv32 firmware image (from `cargo xtask build`) on every NIC's
    /// emulated core instead of the native firmware (needs the `flashed` feature).
    #[arg(long)]
    image: Option<std::path::PathBuf>,
    /// Faults and a modelled wire delay on every node's link, e.g. delay=10us (one way,
    /// as a real network adds), drop=0.1%,seed=7 or corrupt=0.1% (default none: the
    /// in-process switch delivers as fast as the receiver polls).
    #[arg(long, default_value = "none")]
    link_faults: trapeze_vnic::link::FaultConfig,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds from 0 to 3600")),
    }
}

/// The workload's sizes, from the arguments and `--quick`.
struct Sizes {
    pages: u64,
    budget: usize,
    random: u64,
    pressure: u64,
    /// Each timed phase's share of `--seconds`.
    slice: Duration,
    window: usize,
}

impl Sizes {
    fn of(a: &Args) -> Sizes {
        let (pages, budget, random, pressure, secs) =
            if a.quick { (1000, 600, 1000, 300, 0.0) } else { (4000, 2048, 4000, 1000, 20.0) };
        Sizes {
            pages: a.pages.unwrap_or(pages),
            budget: a.budget.unwrap_or(budget) as usize,
            random: a.random.unwrap_or(random),
            pressure: a.pressure.unwrap_or(pressure),
            slice: Duration::from_secs_f64(a.seconds.unwrap_or(secs) / TIMED_PHASES as f64),
            window: a.window as usize,
        }
    }
}

/// Phases that repeat for their share of `--seconds`.
const TIMED_PHASES: u32 = 5;

/// Run `pass` (given its number) once, then again while `slice` lasts; the passes run.
fn repeat(slice: Duration, mut pass: impl FnMut(u32) -> anyhow::Result<()>) -> anyhow::Result<u32> {
    let t = Instant::now();
    let mut n = 0;
    loop {
        pass(n)?;
        n += 1;
        if t.elapsed() >= slice {
            return Ok(n);
        }
    }
}

/// The progress bar and the live table (on a terminal), or plain lines.
struct Ui {
    mp: Option<MultiProgress>,
    bar: ProgressBar,
    rows: Vec<ProgressBar>,
    shown: Instant,
    /// When the current phase started, if it is timed (the bar then shows its time).
    timed: Option<(Instant, Duration)>,
}

/// The live table's header (and the final table's); rows from [`table_row`]. Both fit 80
/// columns. `served (NIC)`: getpages a node served, and of them those its NIC answered
/// from the answer table without its host.
const TABLE_HEAD: &str = "node  held / budget  served (NIC)  puts recv  hit rate  getpage p50  discarded";

impl Ui {
    fn new(live: bool) -> Ui {
        if !live {
            return Ui { mp: None, bar: ProgressBar::hidden(), rows: Vec::new(), shown: Instant::now(), timed: None };
        }
        let mp = MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(10));
        let bar = mp.add(ProgressBar::new(1));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let plain = ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_spinner());
        let rows: Vec<ProgressBar> = (0..4).map(|_| mp.add(ProgressBar::new(1).with_style(plain.clone()))).collect();
        rows[0].set_message(TABLE_HEAD);
        Ui { mp: Some(mp), bar, rows, shown: Instant::now() - Duration::from_secs(1), timed: None }
    }

    /// Phase `name` starts: the bar shows its `slice` of time if it has one, else the
    /// units of each pass.
    fn phase(&mut self, name: &str, slice: Duration) {
        self.bar.set_prefix(name.to_string());
        self.bar.set_message("");
        self.timed = (!slice.is_zero()).then(|| (Instant::now(), slice));
        if let Some((_, d)) = self.timed {
            self.bar.set_length(d.as_millis() as u64);
            self.bar.set_position(0);
        }
    }

    /// A pass of the phase (`pass` counts from 0) over `len` units starts.
    fn pass(&self, pass: u32, len: u64) {
        if self.timed.is_none() {
            self.bar.set_length(len);
            self.bar.set_position(0);
        }
        if pass > 0 || self.timed.is_some() {
            self.bar.set_message(format!("pass {}", pass + 1));
        }
    }

    /// A line above the bar (or on its own without one).
    fn line(&self, s: String) {
        match &self.mp {
            Some(mp) => {
                let _ = mp.println(s);
            }
            None => println!("{s}"),
        }
    }

    /// `n` more units done; refresh the table every 100 ms.
    fn inc(&mut self, n: u64, c: &Cluster, servers: Option<&Servers>) {
        match self.timed {
            Some((t0, d)) => self.bar.set_position(t0.elapsed().min(d).as_millis() as u64),
            None => self.bar.inc(n),
        }
        if self.mp.is_some() && self.shown.elapsed() >= Duration::from_millis(100) {
            self.shown = Instant::now();
            for (row, v) in self.rows[1..].iter().zip(views(c, servers)) {
                row.set_message(table_row(&v));
            }
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
        for r in &self.rows {
            r.finish_and_clear();
        }
    }
}

/// Every node's view: the client's now, the servers' as their thread last published.
fn views(c: &Cluster, servers: Option<&Servers>) -> Vec<NodeView> {
    let mut v: Vec<NodeView> = c.ports.iter().map(|p| p.view()).collect();
    if let Some(s) = servers {
        v.extend(s.views());
    }
    v
}

/// Background directory updates retried so far, over every node (servers as last published).
fn views_retries(c: &Cluster, servers: Option<&Servers>) -> u64 {
    views(c, servers).iter().map(|v| v.task_retries).sum()
}

fn table_row(v: &NodeView) -> String {
    let hit = if v.gets == 0 { "-".to_string() } else { format!("{:.1}%", 100.0 * v.gets_hit as f64 / v.gets as f64) };
    let p50 = v.p50_us.map_or("-".to_string(), |p| format!("{p:.1} µs"));
    let budget = if v.budget == 0 { "client".to_string() } else { format!("{:>5} / {:<5}", v.held, v.budget) };
    let served = format!("{} ({})", v.gets_served + v.nic_answered, v.nic_answered);
    format!(
        "{:>4}  {:<13}  {:>12}  {:>9}  {:>8}  {:>11}  {:>9}",
        v.id, budget, served, v.puts_received, hit, p50, v.discarded
    )
}

const SPACE: u64 = 1;
/// A GMS operation with no answer after this long fails (ns).
const OP_TIMEOUT_NS: u64 = 500_000_000;

/// Per page: newest version put, newest stored.
#[derive(Default)]
struct Model {
    attempted: HashMap<u64, Version>,
    stored: HashMap<u64, Version>,
    wrong: u64,
}

impl Model {
    fn check(&mut self, n: u64, got: &Got) -> bool {
        let Got::Hit { version, data, .. } = got else { return false };
        self.check_bytes(n, *version, data)
    }

    /// Like [`Self::check`] for a read into a buffer (`buf`: the reader's buffer).
    fn check_into(&mut self, n: u64, got: &ReadInto, buf: &[u8]) -> bool {
        let ReadInto::Hit { version, len, .. } = *got else { return false };
        // A page longer than the buffer would be cut short: count it wrong.
        let data = if len <= buf.len() { &buf[..len] } else { &[][..] };
        self.check_bytes(n, version, data)
    }

    fn check_bytes(&mut self, n: u64, version: Version, data: &[u8]) -> bool {
        let ok = self.attempted.get(&n).is_some_and(|&top| version <= top)
            && self.stored.get(&n).is_none_or(|&s| version >= s)
            && data == &content(PageId::new(SPACE, n), version)[..];
        if !ok {
            self.wrong += 1;
        }
        true
    }
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// Put pages from node 0 with `window` outstanding; the model learns what was stored.
fn put_range(
    c: &mut Cluster,
    m: &mut Model,
    pages: impl Iterator<Item = u64>,
    v: Version,
    window: usize,
    ui: &mut Ui,
    servers: Option<&Servers>,
) -> anyhow::Result<u64> {
    let log0 = c.ports[0].put_log.len();
    let mut n_put = 0;
    for n in pages {
        let page = PageId::new(SPACE, n);
        c.wait_until(|| "node 0: room in its window of putpages".into(), |c| c.ports[0].in_flight() < window)?;
        m.attempted.insert(n, v);
        c.ports[0].put(page, v, &content(page, v), None)?;
        n_put += 1;
        ui.inc(1, c, servers);
    }
    c.settle(0)?;
    for &(page, version, r) in &c.ports[0].put_log[log0..] {
        if matches!(r, PutResult::Stored { .. }) && m.stored.get(&page.page).is_none_or(|s| *s <= version) {
            m.stored.insert(page.page, version);
        }
    }
    Ok(n_put)
}

fn run(a: Args) -> anyhow::Result<()> {
    let t_all = Instant::now();
    let z = Sizes::of(&a);
    let image = match &a.image {
        Some(p) => Some(std::fs::read(p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?),
        None => None,
    };
    let mut c = Cluster::with_firmware(
        3,
        z.budget,
        GmsConfig { op_timeout: OP_TIMEOUT_NS, ..GmsConfig::default() },
        image.as_deref(),
        a.link_faults,
    )?;
    // The client lends no memory: the global LRU places pages on nodes 1 and 2.
    c.ports[0].node.set_budget(0);
    let mut m = Model::default();
    let servers = if a.one_thread { None } else { Some(c.spawn_servers(1)?) };
    let sv = servers.as_ref();
    let mb = |pages: u64, secs: f64| pages as f64 * FRAME_BYTES as f64 / secs / 1e6;
    println!(
        "GMS cluster: 3 nodes in-process on virtual NICs ({}{})",
        if a.image.is_some() { "flashed riscv32 firmware on emulated cores" } else { "native firmware" },
        if a.link_faults.is_none() { String::new() } else { format!("; link {}", a.link_faults) },
    );
    println!(
        "budget {} pages ({} MiB) on each of nodes 1 and 2; data set {} pages ({} MiB)",
        z.budget,
        (z.budget * FRAME_BYTES as usize) >> 20,
        z.pages,
        (z.pages * FRAME_BYTES as u64) >> 20
    );
    if !z.slice.is_zero() {
        println!("each of the 5 timed phases repeats its passes for {:.1}s", z.slice.as_secs_f64());
    }
    let mut ui = Ui::new(!a.plain && std::io::stdout().is_terminal());

    // 1. Load.
    ui.phase("load", Duration::ZERO);
    ui.pass(0, z.pages);
    let t = Instant::now();
    put_range(&mut c, &mut m, 0..z.pages, Version(1), z.window, &mut ui, sv)?;
    let load_s = t.elapsed().as_secs_f64();
    let s0 = c.ports[0].stats;
    ui.line(format!(
        "load: {} putpages in {load_s:.2}s ({:.0}/s, {:.0} MB/s): {} stored, {} refused, {} failed; NIC drops: {:?}; directory-update retries: {}",
        z.pages,
        z.pages as f64 / load_s,
        mb(z.pages, load_s),
        s0.puts_stored,
        s0.puts_refused,
        s0.puts_other,
        c.drops(),
        views_retries(&c, sv),
    ));

    // 2. Sequential scans with read-ahead.
    let mut seq = Vec::new();
    // One buffer for every scan: the reader copies each page into it.
    let mut buf = vec![0u8; FRAME_BYTES as usize];
    for depth in [0u32, 4, 16] {
        let name = format!("scan ra {depth}");
        let before = c.ports[0].stats;
        let t = Instant::now();
        let mut hits = 0;
        ui.phase(&name, z.slice);
        let passes = repeat(z.slice, |pass| {
            ui.pass(pass, z.pages);
            let p0 = &mut c.ports[0];
            p0.set_cache_pages(0);
            p0.set_cache_pages(256);
            p0.set_readahead(depth);
            for n in 0..z.pages {
                let g = c.read_into(0, PageId::new(SPACE, n), &mut buf)?;
                if m.check_into(n, &g, &buf) {
                    hits += 1;
                }
                if n % 64 == 63 {
                    ui.inc(64, &c, sv);
                }
            }
            ui.inc(z.pages % 64, &c, sv);
            Ok(())
        })?;
        let secs = t.elapsed().as_secs_f64();
        c.settle(0)?;
        let s = c.ports[0].stats;
        ui.line(format!(
            "scan, read-ahead {depth:>2}: {passes} x {} reads in {secs:.2}s, {hits} hits ({:.0} MB/s), \
             {} prefetches; NIC drops so far: {:?}, directory-update retries: {}",
            z.pages,
            mb(hits, secs),
            s.prefetches - before.prefetches,
            c.drops(),
            views_retries(&c, sv),
        ));
        seq.push((depth, mb(hits, secs)));
    }

    // 3. Random getpages (no cache, no read-ahead).
    c.ports[0].lat_2way.clear();
    c.ports[0].lat_3way.clear();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let t = Instant::now();
    let (mut rhits, mut rmiss, mut local) = (0u64, 0u64, 0u64);
    ui.phase("random", z.slice);
    repeat(z.slice, |pass| {
        ui.pass(pass, z.random);
        for i in 0..z.random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = x % z.pages;
            let g = c.get_wait(0, PageId::new(SPACE, n))?;
            if let Got::Hit { source: Source::Local, .. } = g {
                local += 1;
            }
            if m.check(n, &g) {
                rhits += 1;
            } else {
                rmiss += 1;
            }
            if i % 64 == 63 {
                ui.inc(64, &c, sv);
            }
        }
        ui.inc(z.random % 64, &c, sv);
        Ok(())
    })?;
    let rand_s = t.elapsed().as_secs_f64();
    let gets = rhits + rmiss;
    let (mut l2, mut l3) = (c.ports[0].lat_2way.clone(), c.ports[0].lat_3way.clone());
    ui.line(format!(
        "random getpages: {gets} in {rand_s:.2}s ({:.0}/s): {rhits} hits ({} 2-way, {} 3-way, {local} local), \
         {rmiss} misses",
        gets as f64 / rand_s,
        l2.len(),
        l3.len(),
    ));

    // 4. Eviction pressure: pages beyond the data set, and rewrites of every 7th page,
    // each pass with newer versions.
    let t = Instant::now();
    let before = c.ports[0].stats;
    let discarded0: u64 = views(&c, sv).iter().map(|v| v.discarded).sum();
    let rewrites = z.pages.div_ceil(7);
    ui.phase("pressure", z.slice);
    repeat(z.slice, |pass| {
        ui.pass(pass, z.pressure + rewrites);
        let v = pass as u64 + 1;
        put_range(&mut c, &mut m, z.pages..z.pages + z.pressure, Version(v), z.window, &mut ui, sv)?;
        put_range(&mut c, &mut m, (0..z.pages).step_by(7), Version(v + 1), z.window, &mut ui, sv)?;
        Ok(())
    })?;
    let press_s = t.elapsed().as_secs_f64();
    let s = c.ports[0].stats;
    // The servers publish their counters every VIEW_EVERY_NS (25 ms).
    std::thread::sleep(Duration::from_millis(30));
    let discarded1: u64 = views(&c, sv).iter().map(|v| v.discarded).sum();
    ui.line(format!(
        "pressure: {} putpages in {press_s:.2}s: {} stored, {} refused; the global LRU discarded {} of the \
         cluster's oldest pages",
        s.puts - before.puts,
        s.puts_stored - before.puts_stored,
        s.puts_refused - before.puts_refused,
        discarded1 - discarded0,
    ));

    // 5. Verify every page once more (plain getpages).
    let all = z.pages + z.pressure;
    ui.phase("verify", Duration::ZERO);
    ui.pass(0, all);
    let (mut vh, mut missed) = (0, Vec::new());
    let wrong0 = m.wrong;
    let (t, failed0) = (Instant::now(), c.ports[0].node.stats().get_failures);
    for n in 0..all {
        let g = c.get_wait(0, PageId::new(SPACE, n))?;
        if m.check(n, &g) {
            vh += 1;
        } else {
            missed.push(n);
        }
        if n % 64 == 63 {
            ui.inc(64, &c, sv);
        }
    }
    ui.line(format!(
        "verify: {all} pages read back in {:.2}s: {vh} hits, {} misses ({} failed: no answer in time), {} wrong",
        t.elapsed().as_secs_f64(),
        missed.len(),
        c.ports[0].node.stats().get_failures - failed0,
        m.wrong - wrong0
    ));
    ui.finish();

    // Summary.
    let total_s = t_all.elapsed().as_secs_f64();
    if let Some(s) = servers {
        c.rejoin(s)?;
    }
    // A miss is a page the cluster does not hold (the LRU discarded it), or one whose
    // getpage was lost on a faulty link.
    let unheld =
        missed.iter().filter(|&&n| c.ports.iter().all(|p| p.node.held(&PageId::new(SPACE, n)).is_none())).count();
    let s = c.ports[0].stats;
    let g = c.ports[0].node.stats();
    let ops = s.puts + g.gets + s.cache_hits;
    let bytes: u64 = c.ports.iter().map(|p| p.stats.bytes_out).sum();
    let refused: u64 = c.ports.iter().map(|p| p.node.stats().puts_refused).sum();
    let dropped: u64 = c.ports.iter().map(|p| p.node.host.pages_dropped).sum();
    let discarded: u64 = c.ports.iter().map(|p| p.pages_discarded()).sum();
    let lru = c.ports[0].lru.stats;
    println!();
    println!("{TABLE_HEAD}");
    for p in &c.ports {
        println!("{}", table_row(&p.view()));
    }
    println!();
    println!("== summary ({}) ==", if a.one_thread { "one thread" } else { "client thread + server thread" });
    println!(
        "ops:              {ops} in {total_s:.2}s = {:.0}/s ({} putpages, {} getpages, {} cache hits)",
        ops as f64 / total_s,
        s.puts,
        g.gets,
        s.cache_hits,
    );
    for (name, l) in [("2-way", &mut l2), ("3-way", &mut l3)] {
        if l.is_empty() {
            // The client knew every holder from its put's answer: no get went through
            // the directory.
            println!("getpage {name}:    none among the random gets (each went straight to the holder its put named)");
        } else {
            println!(
                "getpage {name}:    p50 {:.1} µs  p99 {:.1} µs  ({} random gets)",
                pct(l, 0.5),
                pct(l, 0.99),
                l.len()
            );
        }
    }
    let answered: u64 = c.ports.iter().map(|p| p.view().nic_answered).sum();
    let served: u64 = c.ports.iter().map(|p| p.view().gets_served).sum::<u64>() + answered;
    println!("getpages served: {served} by the servers, {answered} of them answered by their NICs alone");
    // A getpage with no answer within the operation timeout fails (a miss); its server may
    // still serve it, and the reply then finds its frame disarmed (the client's NIC drops
    // its payload as `rx_bad_token`). Only on a loaded machine or a lossy link.
    let late = c.ports[0].node.host.frames.ep.counter(trapeze_firmware::iface::layout::Counter::RxBadToken);
    println!(
        "getpages failed:  {} (no answer within the {:.0} ms operation timeout); {late} replies came after it",
        g.get_failures,
        OP_TIMEOUT_NS as f64 / 1e6,
    );
    println!(
        "hit rate:         {:.1}% of getpages hit network memory ({} of {}); {:.1}% of reads from the cache",
        100.0 * s.gets_hit as f64 / (s.gets_hit + s.gets_miss).max(1) as f64,
        s.gets_hit,
        s.gets_hit + s.gets_miss,
        100.0 * s.cache_hits as f64 / s.reads.max(1) as f64
    );
    println!("bytes moved:      {:.1} MB of page payload on the wire", bytes as f64 / 1e6);
    println!(
        "memory use:       node1 {} / node2 {} pages held of {} each",
        c.ports[1].node.held_count(),
        c.ports[2].node.held_count(),
        z.budget
    );
    println!(
        "global LRU:       {} epochs, putpage targets {} by plan / {} least-loaded; {discarded} discarded",
        lru.epochs_started, lru.puts_by_plan, lru.puts_fallback
    );
    println!("pages refused:    {refused} (budget)   copies dropped: {dropped} (superseded / lost directory)");
    for (d, bw) in &seq {
        println!("sequential read:  read-ahead {d:>2}: {bw:.0} MB/s");
    }
    let list = |v: Vec<(&str, u64)>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
        }
    };
    println!("NIC drops:        {}", list(c.drops()));
    let retries: u64 = c.ports.iter().map(|p| p.node.stats().task_retries).sum();
    println!("directory-update retries: {retries} (an update with no answer in time is sent again)");
    println!("link faults:      {} (injected by --link-faults)", list(c.injected_faults()));
    println!(
        "longest wait:     {:.1} ms for one operation (a wait fails after {:.0} s)",
        c.longest_wait.as_secs_f64() * 1e3,
        c.wait_limit.as_secs_f64()
    );
    // Every frame back where it belongs once the last operations and transmits end.
    let audits_ok = |c: &mut Cluster| {
        c.ports.iter().all(|p| {
            let f = p.frame_audit();
            f.balanced() && f.in_flight == 0
        })
    };
    if c.wait_until(|| "every node's frames to come back".into(), audits_ok).is_err() {
        for p in &c.ports {
            eprintln!("node {}: {:?}", p.id(), p.frame_audit());
        }
        anyhow::bail!("frames not accounted for (audits above)");
    }
    // The line tests look for: every page read back, and checked. A page held by no node
    // was discarded by the global LRU to make room (the pressure phase's purpose).
    println!(
        "verified:         {} of {all} pages read back and checked: {vh} hits with the right bytes, {} misses \
         ({unheld} held by no node: discarded by the global LRU), {} wrong",
        vh + missed.len() as u64,
        missed.len(),
        m.wrong
    );
    anyhow::ensure!(m.wrong == 0, "{} reads returned wrong or stale data", m.wrong);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    trapeze_node::gms::on_big_stack(move || run(a))?
}
