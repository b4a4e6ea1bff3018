// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench rpc`: NetRPC over virtual NICs in the shape of the RPC-variants
//! paper's Table 1, with raw-NIC and UDP/TCP loopback baselines from the same run
//! (`vnic/examples/bench_rpc.rs`, release build). Run it on a quiet machine. The
//! nonblocking-vs-raw bandwidth ratio is the median over `--bw-reps` interleaved pairs of
//! runs moving the same payload kind (each side's best run printed beside it). Socket
//! baselines are placed like the NetRPC figure they are compared with: the table rows
//! (two threads, one per core) against sockets with an end on each core, the one-thread
//! round trip against sockets both on one core; the scheduler's own placement is reported
//! too (`*_unpinned`).

#[derive(clap::Args)]
pub struct RpcArgs {
    /// One JSON object per row (variant, ways, payload, kind, p50_us, p99_us, mb_s,
    /// udp_8k_p50_us, tcp_8k_p50_us for sockets placed like the rows, and their
    /// *_unpinned figures), then a summary object.
    #[arg(long)]
    json: bool,
    /// Calls per latency measurement.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    calls: u32,
    /// Calls per bandwidth measurement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    bw_calls: u32,
    /// Interleaved (raw NIC, NetRPC) pairs per payload kind in the nonblocking-bandwidth
    /// comparison; the median of the per-pair ratios is the headline, each side's best run
    /// is printed beside it.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=101))]
    bw_reps: u32,
    /// 8 KB replies per run in that comparison.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1000..=10_000_000))]
    bw_pair_calls: u32,
}

pub fn run(a: RpcArgs) -> anyhow::Result<()> {
    let (c, b) = (a.calls.to_string(), a.bw_calls.to_string());
    let (r, p) = (a.bw_reps.to_string(), a.bw_pair_calls.to_string());
    let mut args = vec![
        "run", "--quiet", "--locked", "--release", "-p", "trapeze-vnic", "--example", "bench_rpc", "--",
        "--calls", &c, "--bw-calls", &b, "--bw-reps", &r, "--bw-pair-calls", &p,
    ];
    if a.json {
        args.push("--json");
    }
    crate::cargo(&args)
}
