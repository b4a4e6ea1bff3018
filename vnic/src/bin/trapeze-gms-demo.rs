// SPDX-License-Identifier: GPL-2.0-only
//! A 3-node Global Memory Service cluster in one process on virtual NICs (native
//! firmware, in-process link): node 0 is the client (on one thread), nodes 1 and 2 lend
//! their memory (each with a budget in pages; on a second thread). Node 0 loads a data set
//! larger than one node's budget with putpages (targets by the epoch-based global LRU),
//! then runs a workload — sequential scans with read-ahead depth 0 / 4 / 16, random
//! getpages, and eviction pressure (puts beyond the budgets: the lenders discard the
//! cluster's oldest pages to make room) — verifying every byte (contents are a function of
//! page id and version), and prints a summary. On a terminal it shows a progress bar and a
//! live table of the nodes; otherwise one line per phase.
//!
//! `cargo run --release -p trapeze-vnic --features demo --bin trapeze-gms-demo [-- --pages 4000 --budget 2048]`

use clap::Parser;
use gms::prelude::*;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use trapeze_vnic::gms::page_pattern as content;
use trapeze_vnic::gms::{Cluster, Got, NodeView, ReadInto, Servers, Source};
use trapeze_vnic::rpc::FRAME_BYTES;

#[derive(Parser, Clone)]
#[command(about = "GMS: a 3-node in-process cluster on virtual NICs")]
struct Args {
    /// Pages in the data set (8 KiB each).
    #[arg(long, default_value_t = 4000)]
    pages: u64,
    /// Memory budget of each node, in pages.
    #[arg(long, default_value_t = 2048)]
    budget: usize,
    /// Random getpages.
    #[arg(long, default_value_t = 4000)]
    random: u64,
    /// Extra pages put beyond the data set (eviction pressure).
    #[arg(long, default_value_t = 1000)]
    pressure: u64,
    /// Drive all three nodes from one thread (default: the client on one thread, the
    /// two servers on another).
    #[arg(long)]
    one_thread: bool,
    /// Putpages kept outstanding.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// No progress bar or live table, even on a terminal.
    #[arg(long)]
    plain: bool,
    /// Run this flashed riscv32 firmware image (from `cargo xtask build`) on every NIC's
    /// emulated core instead of the native firmware (needs the `flashed` feature).
    #[arg(long)]
    image: Option<std::path::PathBuf>,
    /// Faults and a modelled wire delay on every node's link, e.g. delay=10us (one way,
    /// as a real network adds) or drop=0.1%,seed=7 (default none: the in-process switch
    /// delivers as fast as the receiver polls).
    #[arg(long, default_value = "none")]
    link_faults: trapeze_vnic::link::FaultConfig,
}

/// The progress bar and the live table (on a terminal), or plain lines.
struct Ui {
    mp: Option<MultiProgress>,
    bar: ProgressBar,
    rows: Vec<ProgressBar>,
    shown: Instant,
}

const TABLE_HEAD: &str = "node   held / budget   gets served   puts recv   hit rate   getpage p50   discarded";

impl Ui {
    fn new(total: u64, live: bool) -> Ui {
        if !live {
            return Ui { mp: None, bar: ProgressBar::hidden(), rows: Vec::new(), shown: Instant::now() };
        }
        let mp = MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(10));
        let bar = mp.add(ProgressBar::new(total));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:40}] {percent:>3}% {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let plain = ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_spinner());
        let rows: Vec<ProgressBar> = (0..4).map(|_| mp.add(ProgressBar::new(1).with_style(plain.clone()))).collect();
        rows[0].set_message(TABLE_HEAD);
        Ui { mp: Some(mp), bar, rows, shown: Instant::now() - Duration::from_secs(1) }
    }

    fn phase(&self, name: &str) {
        self.bar.set_prefix(name.to_string());
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
        self.bar.inc(n);
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

fn table_row(v: &NodeView) -> String {
    let hit = if v.gets == 0 { "-".to_string() } else { format!("{:.1}%", 100.0 * v.gets_hit as f64 / v.gets as f64) };
    let p50 = v.p50_us.map_or("-".to_string(), |p| format!("{p:.1} µs"));
    let budget = if v.budget == 0 { "client".to_string() } else { format!("{:>5} / {:<5}", v.held, v.budget) };
    format!(
        "{:>4}   {:<13}   {:>11}   {:>9}   {:>8}   {:>11}   {:>9}",
        v.id, budget, v.gets_served, v.puts_received, hit, p50, v.discarded
    )
}

const SPACE: u64 = 1;

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
        while c.ports[0].in_flight() >= window {
            c.poll();
        }
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
    let image = match &a.image {
        Some(p) => Some(std::fs::read(p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?),
        None => None,
    };
    let mut c = Cluster::with_firmware(
        3,
        a.budget,
        GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() },
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
        "GMS cluster: 3 nodes in-process on virtual NICs ({}{}), budget {} pages ({} MiB) on each of nodes 1 and 2; data set {} pages ({} MiB)",
        if a.image.is_some() { "flashed riscv32 firmware on emulated cores" } else { "native firmware" },
        if a.link_faults.is_none() { String::new() } else { format!("; link {}", a.link_faults) },
        a.budget,
        (a.budget * FRAME_BYTES as usize) >> 20,
        a.pages,
        (a.pages * FRAME_BYTES as u64) >> 20
    );
    let rewrites = a.pages.div_ceil(7);
    let total = a.pages + 3 * a.pages + a.random + a.pressure + rewrites + a.pages + a.pressure;
    let mut ui = Ui::new(total, !a.plain && std::io::stdout().is_terminal());

    // 1. Load.
    ui.phase("load");
    let t = Instant::now();
    put_range(&mut c, &mut m, 0..a.pages, Version(1), a.window, &mut ui, sv)?;
    let load_s = t.elapsed().as_secs_f64();
    let s0 = c.ports[0].stats;
    ui.line(format!(
        "load: {} putpages in {:.2}s ({:.0} puts/s, {:.0} MB/s): stored {}, refused {}",
        a.pages,
        load_s,
        a.pages as f64 / load_s,
        mb(a.pages, load_s),
        s0.puts_stored,
        s0.puts_refused,
    ));

    // 2. Sequential scans with read-ahead.
    let mut seq = Vec::new();
    for depth in [0u32, 4, 16] {
        ui.phase(&format!("scan ra {depth}"));
        let p0 = &mut c.ports[0];
        p0.set_cache_pages(0);
        p0.set_cache_pages(256);
        p0.set_readahead(depth);
        let before = p0.stats;
        let t = Instant::now();
        let mut hits = 0;
        // One buffer for the whole scan: the reader copies each page into it.
        let mut buf = vec![0u8; FRAME_BYTES as usize];
        for n in 0..a.pages {
            let g = c.read_into(0, PageId::new(SPACE, n), &mut buf)?;
            if m.check_into(n, &g, &buf) {
                hits += 1;
            }
            if n % 64 == 63 {
                ui.inc(64, &c, sv);
            }
        }
        ui.inc(a.pages % 64, &c, sv);
        let secs = t.elapsed().as_secs_f64();
        c.settle(0)?;
        let s = c.ports[0].stats;
        ui.line(format!(
            "seq scan, read-ahead {depth:>2}: {:.2}s, {:.0} MB/s of hits ({hits} hits / {} reads), prefetches {}, waited on pending {}",
            secs,
            mb(hits, secs),
            a.pages,
            s.prefetches - before.prefetches,
            s.waited_pending - before.waited_pending
        ));
        seq.push((depth, mb(hits, secs)));
    }

    // 3. Random getpages (no cache, no read-ahead).
    ui.phase("random");
    c.ports[0].lat_2way.clear();
    c.ports[0].lat_3way.clear();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let t = Instant::now();
    let (mut rhits, mut rmiss) = (0u64, 0u64);
    let mut local = 0;
    for i in 0..a.random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = x % a.pages;
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
    ui.inc(a.random % 64, &c, sv);
    let rand_s = t.elapsed().as_secs_f64();
    let (mut l2, mut l3) = (c.ports[0].lat_2way.clone(), c.ports[0].lat_3way.clone());
    ui.line(format!(
        "random getpages: {} in {:.2}s ({:.0} ops/s): {} hits ({} 2-way, {} 3-way, {} local), {} misses",
        a.random,
        rand_s,
        a.random as f64 / rand_s,
        rhits,
        l2.len(),
        l3.len(),
        local,
        rmiss
    ));

    // 4. Eviction pressure: more pages beyond the budgets, and rewrites.
    ui.phase("pressure");
    let t = Instant::now();
    let before = c.ports[0].stats;
    let discarded0: u64 = views(&c, sv).iter().map(|v| v.discarded).sum();
    put_range(&mut c, &mut m, a.pages..a.pages + a.pressure, Version(1), a.window, &mut ui, sv)?;
    put_range(&mut c, &mut m, (0..a.pages).step_by(7), Version(2), a.window, &mut ui, sv)?;
    let press_s = t.elapsed().as_secs_f64();
    let s = c.ports[0].stats;
    // The servers publish their counters every VIEW_EVERY_NS (25 ms).
    std::thread::sleep(Duration::from_millis(30));
    let discarded1: u64 = views(&c, sv).iter().map(|v| v.discarded).sum();
    ui.line(format!(
        "pressure: {} putpages in {:.2}s: stored {}, refused {}; the global LRU discarded {} of the cluster's oldest pages",
        s.puts - before.puts,
        press_s,
        s.puts_stored - before.puts_stored,
        s.puts_refused - before.puts_refused,
        discarded1 - discarded0,
    ));
    // Verify everything once more (plain getpages).
    ui.phase("verify");
    let (mut vh, mut vm) = (0, 0);
    for n in 0..a.pages + a.pressure {
        let g = c.get_wait(0, PageId::new(SPACE, n))?;
        if m.check(n, &g) {
            vh += 1;
        } else {
            vm += 1;
        }
        if n % 64 == 63 {
            ui.inc(64, &c, sv);
        }
    }
    ui.line(format!("verify: {} pages read back: {vh} hits, {vm} misses, {} wrong", a.pages + a.pressure, m.wrong));
    ui.finish();

    // Summary.
    let total_s = t_all.elapsed().as_secs_f64();
    if let Some(s) = servers {
        c.rejoin(s)?;
    }
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
        "ops:              {ops} ({} putpages, {} getpages, {} cache hits) in {:.2}s = {:.0} ops/s",
        s.puts,
        g.gets,
        s.cache_hits,
        total_s,
        ops as f64 / total_s
    );
    println!(
        "getpage 2-way:    p50 {:.1} us  p99 {:.1} us  ({} random gets)",
        pct(&mut l2, 0.5),
        pct(&mut l2, 0.99),
        l2.len()
    );
    println!(
        "getpage 3-way:    p50 {:.1} us  p99 {:.1} us  ({} random gets)",
        pct(&mut l3, 0.5),
        pct(&mut l3, 0.99),
        l3.len()
    );
    println!(
        "hit rate:         {:.1}% of getpages hit network memory ({} of {}); {:.1}% of reads served by the local cache",
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
        a.budget
    );
    println!(
        "global LRU:       {} epochs, putpage targets {} by plan / {} least-loaded; pages discarded: {discarded} (the cluster's oldest, to make room)",
        lru.epochs_started, lru.puts_by_plan, lru.puts_fallback
    );
    println!("pages refused:    {refused} (budget)   copies dropped: {dropped} (replaced by a newer version / superseded / lost directory)");
    for (d, bw) in &seq {
        println!("sequential read:  read-ahead {d:>2}: {bw:.0} MB/s");
    }
    for _ in 0..1000 {
        c.poll();
    }
    for p in &c.ports {
        let f = p.frame_audit();
        anyhow::ensure!(f.balanced() && f.in_flight == 0, "node {}: frames not accounted for: {f:?}", p.id());
    }
    anyhow::ensure!(m.wrong == 0, "{} reads returned wrong or stale data", m.wrong);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    // GMS nodes are large const-generic tables: run on a thread with a big stack.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || run(a))?
        .join()
        .map_err(|_| anyhow::anyhow!("panicked"))?
}
