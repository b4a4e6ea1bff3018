// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench rpc`: NetRPC over virtual NICs in the shape of the RPC-variants
//! paper's Table 1, with raw-NIC and UDP/TCP loopback baselines from the same run
//! (`node/examples/bench_rpc/`, release build). Run it on a quiet machine. The
//! nonblocking-vs-raw bandwidth ratio and the 3-way / 2-way latency ratio come from setups
//! that live side by side and take turns in short stretches (`--bw-chunks`,
//! `--ways-blocks`), so this VM's fast and slow phases fall on both sides alike. Socket
//! baselines are placed like the NetRPC figure they are compared with: the table rows
//! (two threads, one per core) against sockets with an end on each core, the one-thread
//! round trip against sockets both on one core; the scheduler's own placement is reported
//! too (`*_unpinned`). The link MAC's cost (`mac_cost`: 2-way 8 KB p50 with a cluster
//! key on / off, two NICs on UDP loopback; `mac_cost_memory` on the in-process link) comes
//! from key-on and key-off setups taking turns the same way (`--mac-blocks`). The headline
//! on equal terms (`rpc_udp_over_udp_echo`, and `rpc_over_udp_echo` for the in-process
//! link) is NetRPC against a UDP and a TCP echo whose ends both busy-poll, each end on its
//! own core as NetRPC's are, taking turns round by round (`--echo-rounds`); the table
//! prints the paper's Table 1 beside ours and checks its relations (solicited no dearer
//! than unsolicited, copy within 7 %, nonblocking bandwidth ≥ 87 % of raw) in the same run.

#[derive(clap::Args)]
pub struct RpcArgs {
    /// One JSON object per row (variant, ways, payload, kind, p50_us, p99_us, mb_s,
    /// udp_8k_p50_us, tcp_8k_p50_us for sockets placed like the rows, and their
    /// *_unpinned figures, paper_latency_us), then a summary object (mac_cost,
    /// mac_cost_memory, rpc_udp_over_udp_echo, rpc_over_udp_echo, equal_terms,
    /// paper_relations).
    #[arg(long)]
    json: bool,
    /// Also draw the figure into DIR/rpc.svg (and keep the JSON lines it was drawn from
    /// in DIR/rpc.json); stdout then carries the JSON lines, as with --json.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Calls per latency measurement.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    calls: u32,
    /// Calls per bandwidth measurement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    bw_calls: u32,
    /// Pairs of stretches (NetRPC, raw NIC) per payload kind in the nonblocking-bandwidth
    /// comparison: the two setups live side by side and take turns on the client and
    /// server threads; NetRPC / raw over all stretches is the headline.
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    bw_chunks: u32,
    /// 8 KB replies per stretch in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    bw_chunk_calls: u32,
    /// Pairs of stretches (2-way, 3-way) in the 3-way / 2-way latency comparison, taking
    /// turns the same way; p50 of all 3-way calls over p50 of all 2-way calls.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    ways_blocks: u32,
    /// Blocking 8 KB calls per stretch in that comparison.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    ways_block_calls: u32,
    /// Pairs of stretches (cluster key off, on) in each link-MAC cost comparison, taking
    /// turns the same way: mac_cost on UDP loopback, mac_cost_memory in process.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    mac_blocks: u32,
    /// Blocking 8 KB calls per stretch in those comparisons.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    mac_block_calls: u32,
    /// Rounds of the equal-terms comparison (NetRPC over the UDP link and the in-process
    /// link, a busy-polled UDP echo and TCP echo, taking turns).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    echo_rounds: u32,
    /// Round trips per side per round in that comparison.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    echo_calls: u32,
}

pub fn run(a: RpcArgs) -> anyhow::Result<()> {
    let (c, b) = (a.calls.to_string(), a.bw_calls.to_string());
    let (bc, bn) = (a.bw_chunks.to_string(), a.bw_chunk_calls.to_string());
    let (wb, wn) = (a.ways_blocks.to_string(), a.ways_block_calls.to_string());
    let (mb, mn) = (a.mac_blocks.to_string(), a.mac_block_calls.to_string());
    let (eb, en) = (a.echo_rounds.to_string(), a.echo_calls.to_string());
    let mut args = vec![
        "run",
        "--quiet",
        "--locked",
        "--release",
        "-p",
        "trapeze-node",
        "--example",
        "bench_rpc",
        "--",
        "--calls",
        &c,
        "--bw-calls",
        &b,
        "--bw-chunks",
        &bc,
        "--bw-chunk-calls",
        &bn,
        "--ways-blocks",
        &wb,
        "--ways-block-calls",
        &wn,
        "--mac-blocks",
        &mb,
        "--mac-block-calls",
        &mn,
        "--echo-rounds",
        &eb,
        "--echo-calls",
        &en,
    ];
    if a.json || a.plot.is_some() {
        args.push("--json");
    }
    if a.plot.is_some() {
        return super::cargo_json(&args, a.plot.as_deref(), "rpc", super::plot::rpc::write);
    }
    crate::cargo(&args)
}
