// SPDX-License-Identifier: GPL-2.0-only
//! `repair_mb_s` of `cargo xtask bench gms`: how fast `gmsd` makes lost copies again.
//!
//! Four daemons over UDP on 127.0.0.1, `--replicas 2`. A client writes `--mib` MiB
//! through node 0, which puts each page's two copies on two of nodes 1–3. Node 3 is
//! `kill -9`ed; once node 0 has declared it failed (its members are 0–2), node 0 makes
//! again every copy node 3 held, on whichever of nodes 1 and 2 lacks it. The rate is the
//! bytes of those copies over the time from the declaration to the last one made
//! (`re_replicate_pending` 0), polled every millisecond. Then every page is read back
//! through node 0 (its store) and node 1 (a reader, through the directory), and checked
//! byte for byte: a miss or a wrong byte fails the run.
//!
//! `cargo bench -p trapeze-gmsd --bench repair -- [--mib N] [--json]`

#[path = "../tests/support/daemons.rs"]
mod daemons;

use anyhow::{bail, ensure, Context};
use clap::Parser;
use daemons::{over_udp, poll_until, put_pages, stat, udp_ports, Daemons};
use gms::prelude::{PageId, Version};
use gmsd::client::Client;
use gmsd::proto::{GetOutcome, PutOutcome, PAGE_BYTES};
use serde_json::json;
use std::time::{Duration, Instant};
use trapeze_node::gms::page_pattern;

const VOL: u64 = 13;
const NODES: u16 = 4;
/// The daemon killed.
const VICTIM: u16 = 3;
/// Pages per `get_many`.
const BATCH: usize = 256;

#[derive(Parser)]
#[command(about = "gmsd re-replication rate after a kill -9 (repair_mb_s)")]
struct Args {
    /// MiB written (two copies each) before the kill.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=2048))]
    mib: u64,
    /// One JSON object (the row) on stdout.
    #[arg(long)]
    json: bool,
    /// Ignored: `cargo bench` passes it to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Poll `f` every `every` until it gives a value, at most `limit`.
fn wait_for<T>(limit: Duration, every: Duration, what: &str, f: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    poll_until(limit, every, what, f).map_err(anyhow::Error::msg)
}

fn content(page: u64) -> Vec<u8> {
    page_pattern(PageId::new(VOL, page), Version(0))
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    // After the kill nodes 1 and 2 hold both copies of everything, with a quarter to spare.
    let budget_mb = (a.mib * 5 / 4 + 4).to_string();
    let ports = udp_ports(NODES)?;
    let mut d = Daemons::new("bench-repair", NODES, move |n| {
        over_udp(&ports, n, &["--budget-mb", &budget_mb, "--dead-after-ms", "1000", "--replicas", "2"])
    })?;
    for n in 0..NODES {
        d.spawn(n).context("spawning gmsd")?;
    }
    let r = run(&a, &mut d);
    if r.is_err() {
        d.print_logs();
    }
    r
}

fn run(a: &Args, d: &mut Daemons) -> anyhow::Result<()> {
    let pages = (a.mib << 20) / PAGE_BYTES as u64;
    let ms = Duration::from_millis(1);
    d.wait_all_up(Duration::from_secs(20)).map_err(anyhow::Error::msg)?;
    let mut c = Client::connect(&d.sock(0)).context("connecting to gmsd 0")?;

    let t_write = Instant::now();
    let mut on_victim = 0u64;
    let all: Vec<u64> = (0..pages).collect();
    for (&i, r) in all.iter().zip(put_pages(&mut c, VOL, &all, content)?) {
        match r {
            PutOutcome::Stored { targets, .. } => on_victim += u64::from(targets.as_slice().contains(&VICTIM)),
            other => bail!("page {i}: put ended {other:?} with every daemon up"),
        }
    }
    let write_secs = t_write.elapsed().as_secs_f64();

    let t_kill = Instant::now();
    d.kill(VICTIM).context("kill -9 gmsd")?;
    let before = stat(&d.sock(0)).context("gmsd 0's stat")?;
    wait_for(Duration::from_secs(10), ms, &format!("gmsd 0 to declare node {VICTIM} failed"), || {
        stat(&d.sock(0)).filter(|s| s.members == [0, 1, 2])
    })?;
    let t_declared = Instant::now();
    let s = wait_for(Duration::from_secs(120), ms, "gmsd 0 to make the lost copies again", || {
        stat(&d.sock(0)).filter(|s| s.re_replicate_pending == 0 && s.re_replicated > before.re_replicated)
    })?;
    let repair_secs = t_declared.elapsed().as_secs_f64();
    let remade = s.re_replicated - before.re_replicated;
    // And the copies of the volume's meta pages (its label and floor map) node 3 held.
    let meta = gms::store::volume::meta_pages(gmsd::volumes::VOLUME_PAGES, PAGE_BYTES as u32);
    ensure!(
        (on_victim..=on_victim + meta).contains(&remade),
        "{remade} copies made again, but node {VICTIM} held {on_victim}"
    );

    // Every page reads back through its writer and through a reader.
    let mut reader = Client::connect(&d.sock(1))?;
    for (who, c) in [("node 0", &mut c), ("node 1", &mut reader)] {
        for batch in all.chunks(BATCH) {
            let ids: Vec<PageId> = batch.iter().map(|&i| PageId::new(VOL, i)).collect();
            for (&i, g) in batch.iter().zip(c.get_many(&ids, true)?) {
                match g {
                    GetOutcome::Hit { data, .. } if data == content(i) => {}
                    GetOutcome::Hit { .. } => bail!("page {i} through {who}: wrong bytes after the repair"),
                    GetOutcome::Miss(why) => bail!("page {i} through {who} missed after the repair: {why}"),
                }
            }
        }
    }
    let mb = remade as f64 * PAGE_BYTES as f64 / 1e6;
    let repair_mb_s = mb / repair_secs;
    eprintln!(
        "repair: {} MiB written with two copies through node 0 of {NODES} gmsd over UDP in {write_secs:.2} s; \
         kill -9 of node {VICTIM} (holding {on_victim} copies), declared failed after {:.2} s; {remade} copies \
         ({mb:.1} MB) made again in {repair_secs:.3} s: {repair_mb_s:.1} MB/s; every page read back through its writer and a reader",
        a.mib,
        (t_declared - t_kill).as_secs_f64(),
    );
    if a.json {
        println!(
            "{}",
            json!({"row": "repair", "source": "gmsd", "nodes": NODES, "mib": a.mib, "copies_remade": remade,
                   "declare_secs": (t_declared - t_kill).as_secs_f64(), "repair_secs": repair_secs,
                   "repair_mb_s": repair_mb_s})
        );
    }
    Ok(())
}
