// SPDX-License-Identifier: GPL-2.0-only
//! `gms`: put, get and stat against a `gmsd` daemon's control socket.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use gmsd::client::{default_socket, Client};
use gmsd::proto::{GetOutcome, HistReport, PageRef, PutOutcome, Stat, PAGE_BYTES};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "gms", about = "Talk to a GMS node daemon (gmsd)")]
struct Args {
    /// The daemon's control socket (default: node --node's default socket).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Which node's default socket to use when --socket is not given.
    #[arg(long, global = true, default_value_t = 0)]
    node: u16,
    /// Give up on the daemon after this many seconds.
    #[arg(long, global = true, default_value_t = 30)]
    timeout_s: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Put a file (at most one 8 KiB page; shorter is zero-padded) into network memory.
    Put {
        /// The page: VOL:PAGE.
        #[arg(long)]
        page: PageRef,
        #[arg(long)]
        file: PathBuf,
    },
    /// Get a page: the data goes to --out (or stdout); where it came from to stderr.
    Get {
        #[arg(long)]
        page: PageRef,
        #[arg(long)]
        out: Option<PathBuf>,
        /// A plain getpage over the network (bypass the daemon's page cache).
        #[arg(long)]
        network_only: bool,
    },
    /// Memory use, hits and misses, getpage latency.
    Stat {
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("gms: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> anyhow::Result<()> {
    let path = a.socket.unwrap_or_else(|| default_socket(a.node));
    let mut c = Client::connect(&path)?;
    c.set_timeout(Duration::from_secs(a.timeout_s.max(1)))?;
    match a.cmd {
        Cmd::Put { page, file } => {
            let data = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            if data.is_empty() {
                bail!("{} is empty; a page holds 1 to {PAGE_BYTES} bytes", file.display());
            }
            if data.len() > PAGE_BYTES {
                bail!("{} has {} bytes; a page holds {PAGE_BYTES}", file.display(), data.len());
            }
            match c.put(page.0, &data)? {
                PutOutcome::Stored { target, version } => {
                    println!("{page}: stored at node {target}, version {version}")
                }
                other => bail!("{page}: not stored ({other:?})"),
            }
        }
        Cmd::Get { page, out, network_only } => match c.get_many(&[page.0], network_only)?.remove(0) {
            GetOutcome::Hit { version, source, data } => {
                match out {
                    Some(f) => std::fs::write(&f, &data).with_context(|| format!("writing {}", f.display()))?,
                    None => std::io::stdout().write_all(&data)?,
                }
                eprintln!("{page}: hit ({}), version {version}, {} bytes", source.name(), data.len());
            }
            GetOutcome::Miss => {
                eprintln!("{page}: miss");
                std::process::exit(3);
            }
        },
        Cmd::Stat { json } => {
            let s = c.stat()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", table(&s));
            }
        }
    }
    Ok(())
}

fn hist_line(name: &str, h: &HistReport) -> String {
    format!("  {name:<10} {:>8} {:>10.1} {:>10.1} {:>10.1}\n", h.count, h.p50_us, h.p99_us, h.max_us)
}

/// The readable form of `stat`.
fn table(s: &Stat) -> String {
    let mib = |pages: u64| pages as f64 * PAGE_BYTES as f64 / (1 << 20) as f64;
    let mut o =
        format!("gmsd node {} — up {:.1} s, members {:?} (view {:#x})\n\n", s.node, s.uptime_s, s.members, s.view);
    o += "  node  state   held pages   budget   held MiB   use    last heard\n";
    for n in &s.nodes {
        let heard = match n.last_heard_ms {
            0 if n.node == s.node => "self".to_string(),
            u64::MAX => "never".to_string(),
            ms => format!("{ms} ms ago"),
        };
        let use_pct = if n.budget > 0 { 100.0 * n.held as f64 / n.budget as f64 } else { 0.0 };
        o += &format!(
            "  {:>4}  {:<6} {:>11} {:>8} {:>10.1} {:>5.1}%  {}\n",
            n.node,
            if n.alive { "alive" } else { "dead" },
            n.held,
            n.budget,
            mib(n.held),
            use_pct,
            heard
        );
    }
    let rate = if s.gets > 0 { 100.0 * s.hits as f64 / s.gets as f64 } else { 0.0 };
    o += &format!(
        "\n  gets {} — hits {} ({rate:.1}%: cache {}, local {}, 2-way {}, 3-way {}), misses {}\n",
        s.gets, s.hits, s.hits_cache, s.hits_local, s.hits_2way, s.hits_3way, s.misses
    );
    o += &format!(
        "  puts {} — stored {}, refused by targets {}; refused here {}; pages dropped {}; op timeouts {} (retried {}); peer failures {}\n\n",
        s.puts, s.puts_stored, s.puts_refused, s.refused_here, s.pages_dropped, s.op_timeouts, s.retries, s.failures_detected
    );
    o += "  getpage    samples    p50 µs     p99 µs     max µs\n";
    o += &hist_line("all", &s.get_latency);
    o += &hist_line("2-way", &s.get_latency_2way);
    o += &hist_line("3-way", &s.get_latency_3way);
    if !s.nic.is_empty() {
        o += "\n  NIC counters:";
        for (k, v) in &s.nic {
            o += &format!(" {k}={v}");
        }
        o += "\n";
    }
    if !s.get_latency.buckets.is_empty() {
        o += "\n  histogram (all gets): ≤ µs  count\n";
        for (ub, c) in &s.get_latency.buckets {
            o += &format!("  {ub:>12.1}  {c}\n");
        }
    }
    o
}
