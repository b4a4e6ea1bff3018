// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask run`: the main demonstration — the most complete real run that exists.
//!
//! First, a three-node Global Memory Service cluster on virtual NICs in one process
//! (`node/src/bin/trapeze-gms-demo.rs`, native firmware — or with `--flashed` the riscv32
//! image on every NIC's emulated core — in-process link): node 0 loads a data set larger
//! than one node's memory budget into network memory (targets by the epoch-based global
//! LRU), scans it with read-ahead 0/4/16, issues random getpages (2-way: to the holder its
//! put named, most answered by that holder's NIC alone), applies eviction pressure (the LRU discards the cluster's oldest
//! pages) — each of those five phases repeating for a fifth of `--seconds` (20) — and
//! verifies every byte, with a progress bar and a live table of the nodes on a terminal;
//! it prints a summary. `--quick` makes it a couple of seconds (tests).
//!
//! Then the firmware in the timing model: a three-node cluster running the real firmware on every
//! NIC. Node 0 is a client that demand-fetches 8 KB pages from page servers on nodes 1
//! and 2 (the cut-through paper's demand-fetch experiment, section 4.5): for each page
//! it arms an IPT frame, sends a request carrying the payload token, and the server's
//! reply payload is DMA'd straight into that frame. It then fetches with several
//! requests outstanding (prefetching) to show bandwidth. Every page is checked against
//! the server's copy. The run repeats under each DMA policy and ends with the policy
//! table of `cargo xtask bench dma`.

use anyhow::{bail, ensure, Context};
use trapeze_firmware::iface::entry::rx_flags;
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_firmware::iface::layout::{Counter, Policy};
use trapeze_firmware::sim::measure::cfg;
use trapeze_firmware::sim::{Cluster, Faults, OutMsg, Params, US};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Pages fetched one at a time (demand faults), per policy [default: 200; 20 with
    /// --quick].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pages: Option<u32>,
    /// Pages fetched with requests outstanding (prefetch), per policy [default: 400; 40
    /// with --quick].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    prefetch_pages: Option<u32>,
    /// Requests kept outstanding during prefetch.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    depth: u32,
    /// Skip the closing DMA-policy table.
    #[arg(long)]
    no_table: bool,
    /// Skip the GMS cluster on virtual NICs (run only the timing-model part).
    #[arg(long)]
    no_gms: bool,
    /// Run the GMS cluster's NICs on the flashed riscv32 firmware image (emulated cores)
    /// instead of the native firmware. Builds the image and the emulator (unicorn: needs
    /// cmake and libclang-dev; about 70 s the first time) and runs a smaller data set
    /// (the emulated cores are slower).
    #[arg(long)]
    flashed: bool,
    /// Faults and a modelled wire delay on the GMS cluster's links, e.g. delay=10us (one
    /// way), drop=0.1%,seed=7, corrupt=0.1%, dup=0.1% or reorder=0.1% (passed to the
    /// demo; default none).
    #[arg(long)]
    link_faults: Option<String>,
    /// How long the GMS cluster's workload runs, in seconds (default 20: long enough to
    /// watch its live table).
    #[arg(long, value_parser = seconds)]
    seconds: Option<f64>,
    /// A short run (for tests): the GMS cluster with a small data set and one pass of
    /// each phase, and the timing model with 20 + 40 pages per policy (unless
    /// --pages/--prefetch-pages say otherwise).
    #[arg(long)]
    quick: bool,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds from 0 to 3600")),
    }
}

const PAGE: u32 = 8192;
/// Real time a fetch phase of the timing model may take (a phase of the default run
/// takes about a second).
const WALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);
const OP_GETPAGE: u32 = 1;

/// Page contents: a function of the page id, so every byte can be verified.
fn page_bytes(page: u64) -> Vec<u8> {
    let mut x = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..PAGE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn request(page: u64, token: PayloadToken) -> Vec<u8> {
    let mut m = Vec::with_capacity(20);
    m.extend_from_slice(&OP_GETPAGE.to_le_bytes());
    m.extend_from_slice(&page.to_le_bytes());
    m.extend_from_slice(&token.0.to_le_bytes());
    m
}

struct Outcome {
    demand_us: Vec<f64>,
    prefetch_mb_s: f64,
    verified: u64,
    ipt_delivered: u64,
    host_dma: u64,
    link_tx: u64,
}

/// Serve: answer every new request that reached a server host.
fn serve(c: &mut Cluster, seen: &mut [usize]) -> anyhow::Result<()> {
    let now = c.now_ps();
    for (node, seen) in seen.iter_mut().enumerate().take(c.len()).skip(1) {
        let new: Vec<_> = c.host(node).delivered[*seen..].to_vec();
        *seen += new.len();
        for req in new {
            ensure!(req.ctrl.len() == 20, "server {node}: malformed request");
            let op = u32::from_le_bytes(req.ctrl[0..4].try_into()?);
            ensure!(op == OP_GETPAGE, "server {node}: unknown op {op}");
            let page = u64::from_le_bytes(req.ctrl[4..12].try_into()?);
            let token = PayloadToken(u64::from_le_bytes(req.ctrl[12..20].try_into()?));
            c.host_mut(node).post(
                now,
                OutMsg {
                    peer: req.src,
                    ctrl: page.to_le_bytes().to_vec(),
                    payload: page_bytes(page),
                    token,
                    ..Default::default()
                },
            );
        }
    }
    Ok(())
}

/// Fetch `pages` pages keeping `depth` requests outstanding. `seen[n]` counts the
/// requests server `n` has already answered (kept across phases).
fn fetch_phase(
    c: &mut Cluster,
    seen: &mut [usize],
    pages: u32,
    depth: u32,
    first_page: u64,
) -> anyhow::Result<(Vec<f64>, u64, f64)> {
    let mut client_seen = c.host(0).delivered.len();
    let mut issued = 0u32;
    let mut outstanding: Vec<(u64, u64, u64)> = Vec::new(); // (page, frame addr, issue time)
    let mut lat = Vec::new();
    let mut verified = 0u64;
    let t0 = c.now_ps();
    let deadline = t0 + 60_000_000 * US;
    // The model's minute takes hours of real time: a stalled exchange must fail sooner.
    let wall = std::time::Instant::now();
    while verified < pages as u64 {
        while issued < pages && outstanding.len() < depth as usize {
            let page = first_page + issued as u64;
            let (token, addr) = c.host_mut(0).arm(PAGE, 1).context("client: no free IPT entry")?;
            let server = 1 + (page as usize % (c.len() - 1));
            let now = c.now_ps();
            c.host_mut(0).post(now, OutMsg { peer: server as u16, ctrl: request(page, token), ..Default::default() });
            outstanding.push((page, addr, now));
            issued += 1;
        }
        c.step();
        serve(c, seen)?;
        let got: Vec<_> = c.host(0).delivered[client_seen..].to_vec();
        client_seen += got.len();
        for d in got {
            ensure!(
                d.flags & rx_flags::IPT != 0,
                "client: reply without IPT delivery (flags {:#x}, token {:#x})",
                d.flags,
                d.token.0
            );
            let page = u64::from_le_bytes(d.ctrl[0..8].try_into()?);
            let i = outstanding.iter().position(|o| o.0 == page).context("client: reply for a page not requested")?;
            let (_, _, t) = outstanding.swap_remove(i);
            ensure!(d.payload == page_bytes(page), "page {page}: data differs from the server's copy");
            lat.push((d.at_ps - t) as f64 / US as f64);
            verified += 1;
        }
        if c.now_ps() > deadline {
            bail!("fetches did not complete within a minute of model time ({verified}/{pages})");
        }
        if wall.elapsed() > WALL_LIMIT {
            bail!(
                "fetches did not complete in {:.0} s ({verified}/{pages} verified, {:.1} ms of model time)",
                wall.elapsed().as_secs_f64(),
                (c.now_ps() - t0) as f64 / (1000 * US) as f64
            );
        }
    }
    let span = (c.now_ps() - t0) as f64 / US as f64;
    Ok((lat, verified, pages as f64 * PAGE as f64 / span))
}

fn run_policy(params: Params, policy: Policy, a: &RunArgs) -> anyhow::Result<Outcome> {
    let (s, r) = match policy {
        Policy::Eager => (384, 512),
        Policy::FixedPulse => (1280, 1280),
        Policy::StoreAndForward => (PAGE, PAGE),
    };
    let mut c = Cluster::with_host_mem(params, 3, cfg(policy, s, r), Faults::default(), 4 << 20);
    let mut seen = vec![0usize; c.len()];
    let (pages, prefetch) = if a.quick { (20, 40) } else { (200, 400) };
    let (demand_us, v1, _) = fetch_phase(&mut c, &mut seen, a.pages.unwrap_or(pages), 1, 0)?;
    let (_, v2, mb_s) = fetch_phase(&mut c, &mut seen, a.prefetch_pages.unwrap_or(prefetch), a.depth, 1 << 20)?;
    let fw = c.firmware(0);
    let sum = |k: Counter| (0..c.len()).map(|n| c.firmware(n).counter(k)).sum::<u64>();
    Ok(Outcome {
        demand_us,
        prefetch_mb_s: mb_s,
        verified: v1 + v2,
        ipt_delivered: fw.counter(Counter::RxIptDelivered),
        host_dma: sum(Counter::HostDmaTransfers),
        link_tx: sum(Counter::LinkTxTransfers),
    })
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    if !a.no_gms {
        let mut args = vec!["run", "--quiet", "--locked", "--release", "-p", "trapeze-node"];
        // The demo's own arguments (after `--`).
        let mut demo: Vec<&str> = Vec::new();
        let image;
        if a.flashed {
            crate::prereq::ensure_emulator_build_deps()?;
            crate::build::build_image(&crate::build::defmt_filter(None))?;
            image = crate::build::image_path()?.display().to_string();
            println!(
                "== Global Memory Service: 3 nodes on virtual NICs (flashed firmware {image}, in-process link) =="
            );
            args.extend(["--features", "demo", "--bin", "trapeze-gms-demo"]);
            demo.extend(["--image", &image]);
            if !a.quick {
                // The emulated cores are slower: a smaller data set for each pass.
                demo.extend(["--pages", "1200", "--budget", "700", "--random", "1000", "--pressure", "300"]);
            }
        } else {
            println!("== Global Memory Service: 3 nodes on virtual NICs (native firmware, in-process link) ==");
            args.extend(["--no-default-features", "--features", "demo", "--bin", "trapeze-gms-demo"]);
        }
        if let Some(f) = &a.link_faults {
            demo.extend(["--link-faults", f.as_str()]);
        }
        let secs = a.seconds.map(|s| s.to_string());
        if let Some(s) = &secs {
            demo.extend(["--seconds", s.as_str()]);
        }
        if a.quick {
            demo.push("--quick");
        }
        if !demo.is_empty() {
            args.push("--");
            args.extend(demo);
        }
        crate::cargo(&args)?;
        println!("\n== The firmware in the timing model ==");
    }
    let params = Params::alpha500();
    println!("Trapeze-rs demonstration: 3 NICs running the real firmware in the timing model");
    println!("(AlphaStation 500 + Myrinet parameters). Node 0 demand-fetches 8 KB pages from");
    println!("page servers on nodes 1 and 2 through IPT payload tokens; every page is verified.\n");
    println!(
        "{:<20} {:>12} {:>12} {:>16} {:>10} {:>10} {:>10}",
        "policy",
        "fetch p50",
        "fetch p99",
        format!("prefetch x{}", a.depth),
        "verified",
        "host DMAs",
        "link txs"
    );
    let mut p50s = Vec::new();
    for (name, policy) in [
        ("store-and-forward", Policy::StoreAndForward),
        ("fixed pulses 1280", Policy::FixedPulse),
        ("eager DMA 384/512", Policy::Eager),
    ] {
        let mut o = run_policy(params, policy, &a)?;
        ensure!(o.ipt_delivered == o.verified, "IPT deliveries {} != verified pages {}", o.ipt_delivered, o.verified);
        let p50 = pct(&mut o.demand_us, 0.5);
        let p99 = pct(&mut o.demand_us, 0.99);
        p50s.push(p50);
        println!(
            "{name:<20} {:>12} {:>12} {:>16} {:>10} {:>10} {:>10}",
            format!("{p50:.1} µs"),
            format!("{p99:.1} µs"),
            format!("{:.1} MB/s", o.prefetch_mb_s),
            o.verified,
            o.host_dma,
            o.link_tx
        );
    }
    println!(
        "\ndemand fetch, eager vs store-and-forward: {:.1} vs {:.1} µs ({:.2}x); paper: 201 vs 310 µs",
        p50s[2],
        p50s[0],
        p50s[2] / p50s[0]
    );
    if !a.no_table {
        println!();
        crate::bench::dma_table()?;
    }
    Ok(())
}
