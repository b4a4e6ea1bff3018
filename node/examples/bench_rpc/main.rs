// SPDX-License-Identifier: GPL-2.0-only
//! The NetRPC benchmark run by `cargo xtask bench rpc`: the shape of Table 1 of the GMS
//! RPC-variants paper over virtual NICs (native firmware, in-process link), with the
//! baselines measured in the same run.
//!
//! Each node drives its host API, its NetRPC and its NIC's firmware (inline) from one
//! thread; the client is one thread, pinned to CPU 0, and the server nodes (one, or
//! directory + holder in 3-way runs) share another, pinned to CPU 1: on this 2-core
//! machine a thread per NIC and per host would measure the scheduler, and so would two
//! spinning threads it sometimes put on one core. Rows: 2-way (node 0 → node 1) and 3-way (node 0 → directory node 1 →
//! holder node 2 → node 0) × wait / cont (nonblocking continuation) / defer (the
//! continuation finds its "lock" held once and runs from the deferred queue) × reply
//! payload 0 / 4 KB / 8 KB × solicited (IPT, zero-copy) / unsolicited (receive buffer
//! detached) / unsolicited + copy. Latency: one call at a time, p50/p99. Bandwidth: one
//! call at a time for wait; `--window` calls outstanding for cont/defer. Baselines: raw
//! Trapeze with the same request / 8 KB reply traffic and window but no NetRPC (the NIC
//! path's ceiling, same execution model), and a 16 B request / 8 KB reply over
//! UDP and TCP (NODELAY) loopback with blocking sockets (the usual way) and busy-polled
//! non-blocking sockets (the same no-sleep model as ours), and a raw Trapeze round trip
//! (0 B and 8 KB reply, one at a time) that splits NetRPC's latency into the NIC path's
//! share and the RPC layer's.
//!
//! Two ratios are measured apart from the table, each between two setups that live side
//! by side and take turns in short stretches on the one client thread and the one server
//! thread (`SharedServer`): nonblocking NetRPC against raw Trapeze bandwidth
//! (`--bw-chunks` pairs of stretches of `--bw-chunk-calls` replies) and 3-way against
//! 2-way latency (`--ways-blocks` pairs of `--ways-block-calls` calls). This VM moves
//! between phases tens of percent apart that last about a second; stretches of a few
//! milliseconds, alternating, put both sides of a ratio in the same phases. The spread
//! of the per-pair ratios is printed beside each headline. The same-core socket
//! comparison takes turns the same way (`--same-stretches` rounds of NetRPC, UDP and TCP,
//! `--same-stretch-calls` round trips each).

use anyhow::Context;
use netrpc::prelude::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_host::endpoint::{EndpointConfig, SendMsg};
use trapeze_node::host::DEFAULT_REGION_BASE;
use trapeze_node::rpc::{Frame, Frames, RpcPort, Service, FRAME_BYTES};
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::shm::Mapping;

mod bw;
mod echo;
mod mac;
mod paper;
mod place;
mod raw;
mod same_core;
mod same_thread;
mod servers;
mod service;
mod sockets;
mod table;
mod ways;

use bw::*;
use echo::*;
use mac::*;
use paper::*;
use place::*;
use raw::*;
use same_core::*;
use same_thread::*;
use servers::*;
use service::*;
use sockets::*;
use table::*;
use ways::*;

#[derive(clap::Parser)]
#[command(about = "NetRPC benchmark over virtual NICs (Table 1 of the RPC-variants paper)")]
struct Args {
    #[arg(long)]
    json: bool,
    /// Calls per latency measurement.
    #[arg(long, default_value_t = 2000)]
    calls: u32,
    /// Calls in each bandwidth measurement.
    #[arg(long, default_value_t = 5000)]
    bw_calls: u32,
    /// Calls outstanding in the nonblocking bandwidth runs.
    #[arg(long, default_value_t = 16)]
    window: u32,
    /// Pairs of stretches (NetRPC, raw NIC) per payload kind in the nonblocking-bandwidth
    /// comparison (the two setups take turns; see `BwSeries`).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    bw_chunks: u32,
    /// 8 KB replies per stretch in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    bw_chunk_calls: u32,
    /// Pairs of stretches (2-way, 3-way) in the 3-way / 2-way latency comparison.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    ways_blocks: u32,
    /// Blocking 8 KB calls per stretch in that comparison.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    ways_block_calls: u32,
    /// Rounds of the same-core comparison (NetRPC on one thread, UDP and TCP on CPU 0,
    /// taking turns).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    same_stretches: u32,
    /// Round trips per side per round in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    same_stretch_calls: u32,
    /// Rounds of the equal-terms comparison (NetRPC over the UDP link and over the
    /// in-process link against busy-polled UDP and TCP echoes, each end on its own core,
    /// taking turns; `EchoSeries`).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    echo_rounds: u32,
    /// Round trips per side per round in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    echo_calls: u32,
    /// Only run `--case` (`--calls` calls) with every node polled by this thread, and print
    /// its time per call: the mode to profile (or count instructions of) a path with.
    #[arg(long)]
    same_thread_only: bool,
    /// What `--same-thread-only` runs.
    #[arg(long, value_enum, default_value = "wait2")]
    case: SameThreadCase,
    /// Only run the nonblocking-NetRPC / raw-NIC bandwidth comparison and print it: the
    /// mode to profile the nonblocking path with.
    #[arg(long)]
    bw_only: bool,
    /// Only run the 3-way / 2-way latency comparison and print it: the mode to profile
    /// delegation with.
    #[arg(long)]
    ways_only: bool,
    /// Pairs of stretches (key off, key on) in each link-MAC cost comparison (UDP
    /// loopback: `mac_cost`; in-process link: `mac_cost_memory`).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    mac_blocks: u32,
    /// Blocking 8 KB calls per stretch in those comparisons.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    mac_block_calls: u32,
    /// Only run the link-MAC cost comparisons and print them (with --json, one object).
    #[arg(long)]
    mac_only: bool,
    /// Only run the equal-terms comparison (`--echo-rounds` x `--echo-calls`) and print
    /// it (with --json, its object and the headline ratios): the mode to measure the UDP
    /// link against the busy-polled echo with, before and after a change.
    #[arg(long)]
    echo_only: bool,
}
fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(a) {
        eprintln!("bench_rpc: error: {e:#}");
        std::process::exit(1);
    }
}

/// `q`-quantile of `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len().max(1) - 1) as f64 * q).round() as usize).copied().unwrap_or(f64::NAN)
}

/// The bandwidth comparison for both payload kinds.
fn bw_compare(a: &Args) -> anyhow::Result<[BwSeries; 2]> {
    Ok([
        BwSeries::measure(Kind::Solicited, a.bw_chunks, a.bw_chunk_calls, a.window)?,
        BwSeries::measure(Kind::Unsolicited, a.bw_chunks, a.bw_chunk_calls, a.window)?,
    ])
}

/// One line per payload kind of the bandwidth comparison.
fn print_bw(bw: &[BwSeries; 2]) {
    for (name, s) in ["solicited", "unsolicited"].iter().zip(bw) {
        let r = s.pair_ratios();
        println!(
            "    {name}: NetRPC {:.0} MB/s, raw {:.0} MB/s: {:.2} (pairs of stretches: median {:.2}, p10 {:.2}, p90 {:.2}, min {:.2}, max {:.2})",
            s.rpc_mb_s(),
            s.raw_mb_s(),
            s.ratio(),
            median(&r),
            quantile(&r, 0.1),
            quantile(&r, 0.9),
            r.first().copied().unwrap_or(f64::NAN),
            r.last().copied().unwrap_or(f64::NAN),
        );
    }
}

/// The 3-way / 2-way comparison's line.
fn print_ways(ways: &mut WaysSeries, a: &Args) {
    println!(
        "3-way / 2-way (wait, 8 KB solicited, {} pairs of interleaved stretches of {} calls): {:.2} (p50 {:.2} / {:.2} µs; per pair median {:.2}, p10 {:.2}, p90 {:.2})",
        a.ways_blocks,
        a.ways_block_calls,
        ways.ratio(),
        pct(&mut ways.second, 0.5),
        pct(&mut ways.first, 0.5),
        median(&ways.pair_ratios),
        quantile(&ways.pair_ratios, 0.1),
        quantile(&ways.pair_ratios, 0.9),
    );
}

fn run(a: Args) -> anyhow::Result<()> {
    start_cpus();
    if a.same_thread_only {
        Placement::SameCore.pin(false)?;
        let r = same_thread_on(a.case, a.calls, a.window);
        Placement::unpin()?;
        let what = match a.case {
            SameThreadCase::Wait2 | SameThreadCase::Wait3 | SameThreadCase::Wait2Udp | SameThreadCase::Wait2UdpKey => {
                "p50"
            }
            SameThreadCase::Cont | SameThreadCase::Raw => "per call",
        };
        println!("same thread {:?} 8 KB solicited: {what} {:.2} us ({} calls)", a.case, r?, a.calls);
        return Ok(());
    }
    if a.bw_only {
        let bw = bw_compare(&a)?;
        println!(
            "nonblocking 8 KB bandwidth, NetRPC / raw NIC ({} pairs of stretches of {} replies):",
            a.bw_chunks, a.bw_chunk_calls
        );
        print_bw(&bw);
        return Ok(());
    }
    if a.ways_only {
        let mut ways = WaysSeries::ways(a.ways_blocks, a.ways_block_calls)?;
        print_ways(&mut ways, &a);
        return Ok(());
    }
    if a.echo_only {
        let mut echo = EchoSeries::measure(a.echo_rounds, a.echo_calls)?;
        if a.json {
            let (rpc_udp, rpc_mem, udp_echo) = (echo.p50(0), echo.p50(1), echo.p50(2));
            println!(
                "{}",
                json!({ "rpc_udp_over_udp_echo": rpc_udp / udp_echo, "rpc_over_udp_echo": rpc_mem / udp_echo,
                        "equal_terms": echo.json(a.echo_rounds, a.echo_calls) })
            );
        } else {
            echo.print(a.echo_rounds, a.echo_calls);
        }
        return Ok(());
    }
    if a.mac_only {
        let (mut udp, mut memory) = mac_compare(&a)?;
        if a.json {
            let (cost, cost_memory) = (udp.ratio(), memory.ratio());
            println!(
                "{}",
                json!({ "mac_cost": cost, "mac_cost_memory": cost_memory,
                        "mac_udp": udp.mac_json(a.mac_blocks, a.mac_block_calls),
                        "mac_memory": memory.mac_json(a.mac_blocks, a.mac_block_calls) })
            );
        } else {
            udp.mac_print(MacLink::Udp, a.mac_blocks, a.mac_block_calls);
            memory.mac_print(MacLink::Memory, a.mac_blocks, a.mac_block_calls);
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for ways in [2u32, 3] {
        with_servers(ways, |client| {
            for variant in ["wait", "cont", "defer"] {
                rows.push(run_row(client, ways, variant, 0, Kind::None, &a)?);
                for payload in [4096u32, 8192] {
                    for kind in [Kind::Solicited, Kind::Unsolicited, Kind::Copy] {
                        let r = run_row(client, ways, variant, payload, kind, &a).with_context(|| {
                            format!(
                                "{ways}-way {variant} {payload} B kind {}: frames free {}, starved {}, stats {:?}",
                                kind as u8,
                                client.node.frames.available(),
                                client.node.frames.stats.starved,
                                client.rpc.stats()
                            )
                        })?;
                        rows.push(r);
                    }
                }
            }
            Ok(())
        })?;
    }
    let bw = bw_compare(&a)?;
    let [sol, unsol] = &bw;
    let (sol_ratios, unsol_ratios) = (sol.pair_ratios(), unsol.pair_ratios());
    let mut ways = WaysSeries::ways(a.ways_blocks, a.ways_block_calls)?;
    let three_over_two = ways.ratio();
    let (mut mac_udp, mut mac_memory) = mac_compare(&a)?;
    let mut echo = EchoSeries::measure(a.echo_rounds, a.echo_calls)?;
    let rels = relations(&rows, sol.ratio());
    let raw_rt0 = raw_round_trip(a.calls, 0)?;
    let raw_rt8 = raw_round_trip(a.calls, FRAME_BYTES)?;
    let udp = pct(&mut udp_baseline(a.calls, false, Placement::Unpinned)?, 0.5);
    let tcp = pct(&mut tcp_baseline(a.calls, false, Placement::Unpinned)?, 0.5);
    let udp_spin = pct(&mut udp_baseline(a.calls, true, Placement::Unpinned)?, 0.5);
    let tcp_spin = pct(&mut tcp_baseline(a.calls, true, Placement::Unpinned)?, 0.5);
    // Matched placements: NetRPC with both nodes on one thread against blocking sockets
    // with both ends on CPU 0; NetRPC's usual two threads against sockets on CPU 0 / 1.
    let mut same = SameCore::measure(a.same_stretches, a.same_stretch_calls)?;
    let (rpc_same, udp_same, tcp_same) = (pct(&mut same.rpc, 0.5), pct(&mut same.udp, 0.5), pct(&mut same.tcp, 0.5));
    let (same_over_udp, same_over_tcp) = (rpc_same / udp_same, rpc_same / tcp_same);
    let mut udp_cross_lat = udp_baseline(a.calls, false, Placement::CrossCore)?;
    let mut tcp_cross_lat = tcp_baseline(a.calls, false, Placement::CrossCore)?;
    let (udp_cross, tcp_cross) = (pct(&mut udp_cross_lat, 0.5), pct(&mut tcp_cross_lat, 0.5));
    let find = |v: &str, w: u32, p: u32, k: &str| {
        rows.iter().find(|r| r.variant == v && r.ways == w && r.payload == p && r.kind == k)
    };
    let two = find("wait", 2, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let three = find("wait", 3, 8192, "solicited").map_or(f64::NAN, |r| r.p50);
    let cont_bw = find("cont", 2, 8192, "solicited").map_or(f64::NAN, |r| r.mb_s);
    if a.json {
        for r in &rows {
            println!(
                "{}",
                json!({ "variant": r.variant, "ways": r.ways, "payload": r.payload, "kind": r.kind,
                        "p50_us": (r.p50 * 10.0).round() / 10.0, "p99_us": (r.p99 * 10.0).round() / 10.0,
                        "mb_s": (r.mb_s * 10.0).round() / 10.0, "calls_s": r.calls_s.round(), "cdf_us": r.cdf,
                        // The rows' nodes run on two threads, one per core: their like is
                        // sockets with an end on each core. Unpinned, the scheduler often puts
                        // both socket ends on one core instead (see the summary).
                        "udp_8k_p50_us": (udp_cross * 10.0).round() / 10.0, "tcp_8k_p50_us": (tcp_cross * 10.0).round() / 10.0,
                        "udp_8k_unpinned_p50_us": (udp * 10.0).round() / 10.0, "tcp_8k_unpinned_p50_us": (tcp * 10.0).round() / 10.0,
                        "paper_latency_us": table_1(r).map(|t| t.0), "paper_bandwidth": table_1(r).map(|t| t.1) })
            );
        }
        let mut summary = json!({ "summary": true, "udp_8k_unpinned_p50_us": udp, "tcp_8k_unpinned_p50_us": tcp,
                    "udp_8k_spin_unpinned_p50_us": udp_spin, "tcp_8k_spin_unpinned_p50_us": tcp_spin, "raw_rt_0_p50_us": raw_rt0, "raw_rt_8k_p50_us": raw_rt8,
                    "wait_2way_8k_solicited_p50_us": two, "wait_3way_8k_solicited_p50_us": three,
                    // Headline: the interleaved stretches (`WaysSeries`); the table rows
                    // were measured seconds apart.
                    "three_over_two": three_over_two, "three_over_two_table_rows": three / two,
                    "ways_3way_p50_us": pct(&mut ways.second, 0.5), "ways_2way_p50_us": pct(&mut ways.first, 0.5),
                    "three_over_two_pairs": { "median": median(&ways.pair_ratios), "p10": quantile(&ways.pair_ratios, 0.1),
                                              "p90": quantile(&ways.pair_ratios, 0.9), "pairs": a.ways_blocks, "calls_each": a.ways_block_calls },
                    "cont_2way_8k_solicited_mb_s": cont_bw,
                    // Headline: NetRPC / raw over all interleaved stretches (`BwSeries`).
                    "raw_nic_8k_mb_s": sol.raw_mb_s(), "rpc_cont_8k_mb_s": sol.rpc_mb_s(), "cont_over_raw": sol.ratio(),
                    "raw_nic_8k_unsolicited_mb_s": unsol.raw_mb_s(), "rpc_cont_8k_unsolicited_mb_s": unsol.rpc_mb_s(),
                    "cont_unsolicited_over_raw_unsolicited": unsol.ratio(),
                    "cont_over_raw_pairs": { "median": median(&sol_ratios), "p10": quantile(&sol_ratios, 0.1), "p90": quantile(&sol_ratios, 0.9),
                                             "pairs": a.bw_chunks, "replies_each": a.bw_chunk_calls },
                    "cont_unsolicited_over_raw_pairs": { "median": median(&unsol_ratios), "p10": quantile(&unsol_ratios, 0.1),
                                                         "p90": quantile(&unsol_ratios, 0.9), "pairs": a.bw_chunks, "replies_each": a.bw_chunk_calls },
                    "over_udp_unpinned": two / udp, "over_tcp_unpinned": two / tcp,
                    "same_core": { "rpc_2way_8k_p50_us": rpc_same, "udp_8k_p50_us": udp_same, "tcp_8k_p50_us": tcp_same,
                                   "over_udp": same_over_udp, "over_tcp": same_over_tcp,
                                   "rounds": a.same_stretches, "calls_each": a.same_stretch_calls,
                                   "over_udp_rounds": { "median": median(&same.over_udp), "p10": quantile(&same.over_udp, 0.1), "p90": quantile(&same.over_udp, 0.9) },
                                   "over_tcp_rounds": { "median": median(&same.over_tcp), "p10": quantile(&same.over_tcp, 0.1), "p90": quantile(&same.over_tcp, 0.9) } },
                    "cross_core": { "rpc_2way_8k_p50_us": two, "udp_8k_p50_us": udp_cross, "tcp_8k_p50_us": tcp_cross,
                                    "over_udp": two / udp_cross, "over_tcp": two / tcp_cross },
                    // Each placement compared with its like: one third or less of both
                    // socket baselines on one core and across two.
                    "third_of_sockets_in_matched_placements": same_over_udp <= 1.0 / 3.0 && same_over_tcp <= 1.0 / 3.0
                        && two / udp_cross <= 1.0 / 3.0 && two / tcp_cross <= 1.0 / 3.0 });
        // The latency distributions behind the socket comparisons, as quantiles (`cdf`).
        summary["cdf_quantiles"] = json!(CDF_Q);
        summary["same_core"]["rpc_2way_8k_cdf_us"] = json!(cdf(&mut same.rpc));
        summary["same_core"]["udp_8k_cdf_us"] = json!(cdf(&mut same.udp));
        summary["same_core"]["tcp_8k_cdf_us"] = json!(cdf(&mut same.tcp));
        summary["cross_core"]["udp_8k_cdf_us"] = json!(cdf(&mut udp_cross_lat));
        summary["cross_core"]["tcp_8k_cdf_us"] = json!(cdf(&mut tcp_cross_lat));
        // The link MAC's cost, key on / off, interleaved: over UDP loopback (the deployed
        // configuration) and over the in-process link (where it protects nothing).
        summary["mac_cost"] = json!(mac_udp.ratio());
        summary["mac_cost_memory"] = json!(mac_memory.ratio());
        summary["mac_udp"] = mac_udp.mac_json(a.mac_blocks, a.mac_block_calls);
        summary["mac_memory"] = mac_memory.mac_json(a.mac_blocks, a.mac_block_calls);
        // The headline on equal terms: busy-polled echoes, each end on its own core.
        let (rpc_udp, rpc_mem, udp_echo) = (echo.p50(0), echo.p50(1), echo.p50(2));
        summary["rpc_udp_over_udp_echo"] = json!(rpc_udp / udp_echo);
        summary["rpc_over_udp_echo"] = json!(rpc_mem / udp_echo);
        summary["equal_terms"] = echo.json(a.echo_rounds, a.echo_calls);
        summary["paper_relations"] = relations_json(&rels);
        println!("{summary}");
        return Ok(());
    }
    println!("NetRPC over virtual NICs (native firmware, in-process link; one thread per node)");
    println!("(paper: Table 1 of the RPC-variants seed, AlphaStations over Myrinet, 1998: MB/s, or msgs/s for 0 B)");
    println!(
        "{:<6} {:<6} {:>8} {:<18} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11}",
        "ways", "mode", "payload", "kind", "p50 µs", "p99 µs", "MB/s", "calls/s", "paper µs", "paper bw"
    );
    for r in &rows {
        let (pl, pb) = table_1(r).unwrap_or((f64::NAN, f64::NAN));
        println!(
            "{:<6} {:<6} {:>8} {:<18} {:>9.1} {:>9.1} {:>10.1} {:>10.0} {:>11.1} {:>11.1}",
            format!("{}-way", r.ways),
            r.variant,
            r.payload,
            r.kind,
            r.p50,
            r.p99,
            r.mb_s,
            r.calls_s,
            pl,
            pb
        );
    }
    println!("\nthe paper's relations, on this run:");
    for r in &rels {
        let verdict = if r.holds { "holds" } else { "DOES NOT HOLD" };
        println!("  {}: {:.3} against {} — {verdict} ({})", r.name, r.ours, r.bound, r.what);
    }
    echo.print(a.echo_rounds, a.echo_calls);
    println!("\nbaselines (same run): 16 B request / 8 KB reply, p50");
    println!("  UDP loopback {udp:.1} µs (busy-polled {udp_spin:.1} µs), TCP NODELAY {tcp:.1} µs (busy-polled {tcp_spin:.1} µs)");
    println!("  raw Trapeze round trip (no NetRPC), one at a time: 0 B {raw_rt0:.1} µs, 8 KB reply {raw_rt8:.1} µs");
    println!(
        "\n2-way wait 8 KB solicited p50 {two:.1} µs against sockets placed by the scheduler: {:.2}x UDP, {:.2}x TCP (busy-polled: {:.2}x, {:.2}x)",
        two / udp,
        two / tcp,
        two / udp_spin,
        two / tcp_spin
    );
    println!("matched placements, 2-way 8 KB p50 (blocking sockets):");
    println!(
        "  same core (NetRPC: both nodes on one thread; sockets: both ends on CPU 0): NetRPC {rpc_same:.2} µs, UDP {udp_same:.1} µs ({same_over_udp:.2}x), TCP {tcp_same:.1} µs ({same_over_tcp:.2}x)"
    );
    println!(
        "    (p50 of all calls of {} rounds in which the three take turns, {} calls each; per round NetRPC/UDP p10 {:.2} median {:.2} p90 {:.2}, NetRPC/TCP p10 {:.2} median {:.2} p90 {:.2})",
        a.same_stretches,
        a.same_stretch_calls,
        quantile(&same.over_udp, 0.1),
        median(&same.over_udp),
        quantile(&same.over_udp, 0.9),
        quantile(&same.over_tcp, 0.1),
        median(&same.over_tcp),
        quantile(&same.over_tcp, 0.9)
    );
    println!(
        "  two cores (NetRPC: a thread per side; sockets: CPU 0 / CPU 1): NetRPC {two:.1} µs, UDP {udp_cross:.1} µs ({:.2}x), TCP {tcp_cross:.1} µs ({:.2}x)",
        two / udp_cross,
        two / tcp_cross
    );
    print_ways(&mut ways, &a);
    println!("  (table rows alone: {:.2})", three / two);
    println!(
        "nonblocking 8 KB bandwidth, NetRPC cont / raw NIC, same payload kind, {} outstanding ({} pairs of interleaved stretches of {} replies; table row alone {:.2}):",
        a.window,
        a.bw_chunks,
        a.bw_chunk_calls,
        cont_bw / sol.raw_mb_s()
    );
    print_bw(&bw);
    mac_udp.mac_print(MacLink::Udp, a.mac_blocks, a.mac_block_calls);
    mac_memory.mac_print(MacLink::Memory, a.mac_blocks, a.mac_block_calls);
    Ok(())
}

/// The link MAC's cost on UDP loopback and on the in-process link.
fn mac_compare(a: &Args) -> anyhow::Result<(MacSeries, MacSeries)> {
    let udp = mac_series(MacLink::Udp, a.mac_blocks, a.mac_block_calls)?;
    let memory = mac_series(MacLink::Memory, a.mac_blocks, a.mac_block_calls)?;
    Ok((udp, memory))
}
