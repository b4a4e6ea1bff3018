// SPDX-License-Identifier: GPL-2.0-only
//! `gms`: put, get and stat against a `gmsd` daemon's control socket.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use gmsd::client::{default_socket, Client};
use gmsd::peers::{absent_cause, absent_causes};
use gmsd::proto::{GetOutcome, HistReport, NodeMem, PageRef, PutOutcome, Stat, PAGE_BYTES};
use gmsd::units::Human;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gms",
    version,
    about = "Put, get and stat pages through a GMS node daemon (gmsd) on this machine",
    after_help = "Exit status: 0 done; 1 an error (daemon not running or not answering, page not stored, \
                  bad file); 2 a bad command line; 3 `get` missed."
)]
struct Args {
    /// The daemon's control socket [default: node --node's default socket,
    /// $XDG_RUNTIME_DIR/trapeze/gmsd-N.sock or /tmp/trapeze-UID/gmsd-N.sock].
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Which node's default socket to use when --socket is not given.
    #[arg(long, global = true, default_value_t = 0)]
    node: u16,
    /// Give up when the daemon makes no progress on a request for this many seconds (1-86400).
    #[arg(long, global = true, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout_s: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Store a file of 1 to 8192 bytes as one page on other nodes (a shorter file is padded
    /// with zeros to 8192; `get` returns the whole page). The first put into volume VOL
    /// makes this daemon its writer: another daemon's puts into it are refused.
    Put {
        /// The page: VOL:PAGE, each a decimal or 0x-hex unsigned 64-bit number (e.g. 1:42).
        #[arg(long)]
        page: PageRef,
        /// The file whose bytes (1 to 8192) become the page; `-` reads standard input.
        /// Anything longer is refused after reading 8193 bytes.
        #[arg(long)]
        file: PathBuf,
    },
    /// Get a page: its bytes go to --out (or to stdout when that is a pipe or a file, never
    /// a terminal), where it came from to stderr; a miss says why and exits with status 3.
    Get {
        /// The page: VOL:PAGE, each a decimal or 0x-hex unsigned 64-bit number (e.g. 1:42).
        #[arg(long)]
        page: PageRef,
        /// Write the page's bytes to this file instead of stdout (needed when stdout is a
        /// terminal).
        #[arg(long)]
        out: Option<PathBuf>,
        /// A plain getpage over the network (bypass the daemon's page cache and read-ahead).
        #[arg(long)]
        network_only: bool,
    },
    /// Show every node's memory use, hits and misses, and getpage latency.
    Stat {
        /// Print the daemon's answer as JSON instead of a table.
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

/// What a put that did not store its page means, in words. `nodes`: the daemon's nodes as
/// its `stat` gave them after the put (`None`: it did not answer), to name the nodes that
/// are not members and why (never heard, dead, a cluster-key mismatch) with their fix.
fn not_stored(o: PutOutcome, nodes: Option<&[NodeMem]>) -> String {
    let causes = nodes.and_then(absent_causes);
    let see_stat = "`gms stat` shows each node's state";
    match o {
        PutOutcome::Stored { targets, .. } => format!("stored at {targets}"),
        PutOutcome::NoTarget => format!(
            "not stored: no other node is a member, and GMS keeps a page on another node; {}",
            causes.unwrap_or_else(|| match nodes {
                Some(n) if n.len() <= 1 =>
                    "the daemon has no peers: give its gmsd a --peer ID=ADDR for each other node".to_string(),
                _ => see_stat.to_string(),
            })
        ),
        PutOutcome::Refused => {
            "not stored: every node refused it, round after round (their memory budgets are full)".into()
        }
        PutOutcome::Superseded => "not stored: a newer version of the page is already recorded".into(),
        PutOutcome::WrongView => "not stored: the cluster's membership changed meanwhile; try again".into(),
        PutOutcome::Failed { targets } => {
            let who = if targets.is_empty() { "the target node".to_string() } else { targets.to_string() };
            // The silent target is usually declared failed by the time the put ends.
            let now = nodes
                .into_iter()
                .flatten()
                .filter(|n| targets.contains(n.node))
                .filter_map(absent_cause)
                .map(|c| format!(" Now {c}."))
                .collect::<String>();
            format!(
                "outcome unknown: no answer from {who} within the write's window (the daemon retries a put for \
                 12 s); lost packets or a failing node — the page may or may not be stored.{now}"
            )
        }
        PutOutcome::Error => "not stored: the daemon could not issue the putpage (see its log)".into(),
        PutOutcome::TooFewTargets { replicas, live } => {
            let live = match live.len() {
                0 => "no other node is a member".to_string(),
                1 => format!("only 1 other node is a member ({live})"),
                n => format!("only {n} other nodes are members ({live})"),
            };
            let why = causes
                .unwrap_or_else(|| format!("start more nodes ({see_stat}) or run the daemons with a lower --replicas"));
            format!(
                "not stored: the daemon keeps {replicas} copies of each page on distinct other nodes (gmsd \
                 --replicas) and {live}; {why}"
            )
        }
        PutOutcome::NotOwner { owner } => format!(
            "not stored: this volume is written by the daemon on node {owner} (a volume has one writer); put it \
             through that daemon, or use another volume number"
        ),
        PutOutcome::OutOfRange { pages } => {
            format!("not stored: past the end of the volume, which has {pages} pages (gmsd --volume-pages)")
        }
    }
}

/// The bytes of a page to put from `file` (`-`: standard input). At most a page and one
/// byte is ever read, so an endless or huge input (`/dev/zero`, a disk image) is refused
/// after 8193 bytes instead of being read whole into memory.
fn read_page(file: &Path) -> anyhow::Result<Vec<u8>> {
    let (name, input): (String, Box<dyn Read>) = if file == Path::new("-") {
        ("standard input".into(), Box::new(std::io::stdin().lock()))
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
        (file.display().to_string(), Box::new(f))
    };
    let mut data = Vec::with_capacity(PAGE_BYTES + 1);
    input.take(PAGE_BYTES as u64 + 1).read_to_end(&mut data).with_context(|| format!("reading {name}"))?;
    if data.is_empty() {
        bail!("{name} is empty; a page holds 1 to {PAGE_BYTES} bytes");
    }
    if data.len() > PAGE_BYTES {
        bail!(
            "{name} has more than {PAGE_BYTES} bytes; a page holds 1 to {PAGE_BYTES} (split the data into pages \
             and put each under its own VOL:PAGE)"
        );
    }
    Ok(data)
}

fn run(a: Args) -> anyhow::Result<()> {
    // What can be refused without the daemon is refused before connecting to it; `data`
    // is the page a put stores (empty for the other commands).
    let data = match &a.cmd {
        Cmd::Put { file, .. } => read_page(file)?,
        Cmd::Get { out: None, .. } if std::io::stdout().is_terminal() => bail!(
            "not writing a page's raw bytes to a terminal: give --out FILE, or redirect standard output \
             (gms get ... > FILE, or | a program)"
        ),
        _ => Vec::new(),
    };
    let path = a.socket.unwrap_or_else(|| default_socket(a.node));
    let mut c = Client::connect(&path)?;
    c.set_timeout(Duration::from_secs(a.timeout_s))?;
    match a.cmd {
        Cmd::Put { page, .. } => match c.put(page.0, &data)? {
            PutOutcome::Stored { targets, version } => println!("{page}: stored at {targets}, version {version}"),
            other => {
                let nodes = c.stat().ok().map(|s| s.nodes);
                bail!("{page}: {}", not_stored(other, nodes.as_deref()))
            }
        },
        Cmd::Get { page, out, network_only } => match c.get_many(&[page.0], network_only)?.remove(0) {
            GetOutcome::Hit { version, source, data } => {
                match out {
                    Some(f) => std::fs::write(&f, &data).with_context(|| format!("writing {}", f.display()))?,
                    None => std::io::stdout().write_all(&data)?,
                }
                eprintln!("{page}: hit ({}), version {version}, {} bytes", source.name(), data.len());
            }
            GetOutcome::Miss(why) => {
                eprintln!("{page}: miss: {why}");
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
    if h.count == 0 {
        return format!("  {name:<28} {:>8} {:>10} {:>10} {:>10}\n", 0, "—", "—", "—");
    }
    format!("  {name:<28} {:>8} {:>10.1} {:>10.1} {:>10.1}\n", h.count, h.p50_us, h.p99_us, h.max_us)
}

/// The readable form of `stat`.
fn table(s: &Stat) -> String {
    let mib = |pages: u64| pages as f64 * PAGE_BYTES as f64 / (1 << 20) as f64;
    let mut o =
        format!("gmsd node {} — up {:.1} s, members {:?} (view {:#x})\n\n", s.node, s.uptime_s, s.members, s.view);
    o += "  node  state        held pages   budget   held MiB   use    last heard\n";
    for n in &s.nodes {
        let heard = match n.last_heard_ms {
            0 if n.node == s.node => "self".to_string(),
            u64::MAX => "never".to_string(),
            ms => format!("{} ago", Human(Duration::from_millis(ms))),
        };
        let use_pct = if n.budget > 0 { 100.0 * n.held as f64 / n.budget as f64 } else { 0.0 };
        o += &format!(
            "  {:>4}  {:<11} {:>11} {:>8} {:>10.1} {:>5.1}%  {}\n",
            n.node,
            n.state.name(),
            n.held,
            n.budget,
            mib(n.held),
            use_pct,
            heard
        );
    }
    // Why each node that is not a member is not, and packets failing the key check from
    // members (someone else claiming their id, or a key changed while they ran).
    for n in &s.nodes {
        if let Some(cause) = absent_cause(n) {
            o += &format!("  ! {cause}\n");
        } else if n.mac_rejected > 0 {
            o += &format!(
                "  ! {} packets claiming to be node {} failed the cluster key check: {}\n",
                n.mac_rejected,
                n.node,
                gmsd::peers::KEY_FIX
            );
        }
    }
    let rate = if s.gets > 0 { 100.0 * s.hits as f64 / s.gets as f64 } else { 0.0 };
    o += &format!(
        "\n  gets {} — hits {} ({rate:.1}%: cache {}, local {}, 2-way {}, 3-way {}), misses {}\n",
        s.gets, s.hits, s.hits_cache, s.hits_local, s.hits_2way, s.hits_3way, s.misses
    );
    o += &format!(
        "  copy puts {} ({} copies of each page put here) — pages stored {}, refused by targets {}, \
         sent again {}\n",
        s.puts, s.replicas, s.puts_stored, s.puts_refused, s.retries
    );
    o += &format!(
        "  as a target: puts refused here {}, registrations refused (directory full) {}, pages dropped {}\n",
        s.refused_here, s.dir_full, s.pages_dropped
    );
    o += &format!(
        "  operations timed out {}; peers declared failed {}, rejoined {}\n  pages re-registered after a \
         membership change {} ({} still to go)\n",
        s.op_timeouts, s.failures_detected, s.rejoins, s.reregistered, s.reregister_pending
    );
    o += &format!(
        "  reads that went on to the next copy {}; copies put again after a failure {} ({} still to go)\n",
        s.replica_fallbacks, s.re_replicated, s.re_replicate_pending
    );
    o += &format!(
        "  global LRU: plans {}, epochs started {}, pages discarded {}; put targets: its plan {}, least \
         loaded {}, kept {}\n",
        s.lru_plans, s.lru_epochs_started, s.pages_discarded, s.puts_by_plan, s.puts_fallback, s.puts_kept
    );
    if !s.plan_weights.is_empty() {
        let w: Vec<String> = s.plan_weights.iter().enumerate().map(|(n, w)| format!("node {n}: {w}")).collect();
        o += &format!(
            "  LRU weights (each node's count of the epoch's oldest pages: where puts go): {}\n",
            w.join(", ")
        );
    }
    o += &format!(
        "  refused from senders not entitled: GMS messages {}, NetRPC replies/requests {}; old-incarnation \
         heartbeats {}\n",
        s.unentitled, s.foreign_rpc, s.stale_incarnations
    );
    let named = |v: &[(String, u64)]| v.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(" ");
    if !s.refused.is_empty() {
        o += &format!("    GMS messages by kind: {}\n", named(&s.refused));
    }
    if !s.link_refused.is_empty() {
        o += &format!("  refused by the link before GMS saw them: {}\n", named(&s.link_refused));
    }
    o += "\n";
    o += "  getpage                       samples    p50 µs     p99 µs     max µs\n";
    o += &hist_line("request to answer, all", &s.get_latency);
    o += &hist_line("  GMS operation, 2-way", &s.get_latency_2way);
    o += &hist_line("  GMS operation, 3-way", &s.get_latency_3way);
    if !s.nic.is_empty() {
        o += "\n  NIC counters:\n";
        let items: Vec<String> = s.nic.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for line in items.chunks(4) {
            o += &format!("    {}\n", line.join("  "));
        }
    }
    if !s.get_latency.buckets.is_empty() {
        o += "\n  histogram (all gets): ≤ µs  count\n";
        for (ub, c) in &s.get_latency.buckets {
            o += &format!("  {ub:>12.1}  {c}\n");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand and every option says what it is for.
    #[test]
    fn every_option_has_help() {
        let cmd = Args::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
            if c.get_about().is_none() {
                missing.push(format!("command {}", c.get_name()));
            }
            for a in c.get_arguments().filter(|a| !["help", "version"].contains(&a.get_id().as_str())) {
                if a.get_help().is_none() {
                    missing.push(format!("{} --{}", c.get_name(), a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help: {missing:?}");
        let put = cmd.find_subcommand("put").unwrap().get_about().unwrap().to_string();
        assert!(put.contains("padded with zeros") && put.contains("its writer"), "{put}");
    }

    /// `stat` reads as a user needs: short lines, empty rows as dashes, copy puts named
    /// as copies, the plan's weights shown, the NIC counters by name; JSON's view in hex.
    #[test]
    fn stat_reads_plainly() {
        let hist = |count| HistReport { count, p50_us: 100.0, p99_us: 120.0, max_us: 130.0, buckets: vec![] };
        let mut s = Stat {
            node: 0,
            members: vec![0, 1, 2],
            view: 0x37f1_1cf1_d36d_7aff,
            puts: 2,
            puts_stored: 2,
            replicas: 2,
            get_latency: hist(1),
            get_latency_2way: hist(1),
            get_latency_3way: hist(0),
            plan_weights: vec![86, 85, 85],
            ..Stat::default()
        };
        s.nic = (0..9).map(|i| (format!("counter_{i}"), 1000 + i)).collect();
        let t = table(&s);
        assert!(t.lines().all(|l| l.chars().count() <= 120), "{t}");
        assert!(t.contains("copy puts 2 (2 copies of each page put here)"), "{t}");
        assert!(t.contains("node 0: 86, node 1: 85, node 2: 85"), "{t}");
        let three = t.lines().find(|l| l.contains("operation, 3-way")).unwrap();
        assert!(three.contains('—') && !three.contains("0.0"), "{three}");
        assert!(t.contains("counter_0=1000") && !t.contains("(\""), "{t}");
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["view"], "0x37f11cf1d36d7aff");
        assert_eq!(j["nic"]["counter_8"], 1008);
        assert_eq!(serde_json::from_value::<Stat>(j).unwrap(), s);
    }
}
