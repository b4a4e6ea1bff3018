// SPDX-License-Identifier: GPL-2.0-only
//! The virtual NIC benchmark run by `cargo xtask bench nic`: what the virtual NIC costs, native firmware vs the flashed
//! riscv32 image on the emulated core, NIC to NIC over the in-process link.
//!
//! * messages/s — node 0's host streams control-only messages to node 1's host, with a
//!   credit window (a slow host back-pressures the link: the NIC holds what its full ring
//!   cannot take);
//! * 8 KB streaming MB/s — the same with 8 KB unsolicited payloads;
//! * one-way 8 KB latency — one message in flight: node 0 stamps the send time, node 1's
//!   host records its receive time (same process, same clock) and acknowledges with a
//!   control message before the next one is sent. p50 and p99 over the run.
//!
//! Both modes run in the same invocation; ratios are flashed / native.

use anyhow::{bail, Context};
use serde_json::json;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_node::testbed::{cluster, LinkKind, Mode, Node, Options};

#[derive(clap::Parser)]
#[command(about = "Virtual NIC benchmark: native firmware vs the flashed riscv32 image")]
pub struct NicArgs {
    /// The flashable firmware image (ELF), as built by `cargo xtask build`.
    #[arg(long, value_name = "PATH")]
    image: std::path::PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Control-only messages streamed per mode.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    messages: u32,
    /// 8 KB messages per mode (streamed, and again one at a time for latency).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(20..=1_000_000))]
    payloads: u32,
}

struct Result {
    msgs_per_s: f64,
    mb_s: f64,
    p50_us: f64,
    p99_us: f64,
}

const SPIN: Duration = Duration::from_micros(500);

fn recv_or_fail(n: &mut Node, what: &str) -> anyhow::Result<trapeze_node::host::Received> {
    n.host.recv(Duration::from_secs(10)).with_context(|| format!("{what}: no message within 10 s"))
}

/// Messages the sender may have unacknowledged (less than the 32-entry receive ring:
/// Trapeze drops what the receiving host cannot take, so users flow-control end to end).
const WINDOW: u32 = 24;
/// The receiver acknowledges every ACK_EVERY messages.
const ACK_EVERY: u32 = 8;

/// Stream `count` messages of `len` bytes from a to b under a credit window; returns
/// messages/s delivered at b.
fn stream(nodes: &mut [Node], count: u32, len: usize) -> anyhow::Result<f64> {
    let (a, b) = nodes.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let payload = vec![0xA5u8; len];
    let t0 = Instant::now();
    let res = std::thread::scope(|s| {
        let rx = s.spawn(|| -> anyhow::Result<Instant> {
            for i in 0..count {
                let m = recv_or_fail(b, "stream")?;
                if m.payload.len() != len || m.ctrl[..4] != i.to_le_bytes() {
                    bail!("stream: message {i} arrived out of order or damaged");
                }
                if (i + 1) % ACK_EVERY == 0 {
                    b.host.send(0, b"credit", &[], PayloadToken::NONE, 0)?;
                }
            }
            Ok(Instant::now())
        });
        let mut acked = 0;
        for i in 0..count {
            while i - acked >= WINDOW {
                recv_or_fail(a, "stream credit")?;
                acked += ACK_EVERY;
            }
            a.host.send(1, &i.to_le_bytes(), &payload, PayloadToken::NONE, 0)?;
        }
        let res = rx.join().map_err(|_| anyhow::anyhow!("receiver thread panicked"))?;
        // Drain the remaining credits so the next phase starts clean.
        while acked + ACK_EVERY <= count {
            recv_or_fail(a, "stream credit")?;
            acked += ACK_EVERY;
        }
        res
    })?;
    Ok(count as f64 / res.duration_since(t0).as_secs_f64())
}

/// One 8 KB message in flight at a time; returns sorted one-way latencies in µs.
fn latency(nodes: &mut [Node], count: u32) -> anyhow::Result<Vec<f64>> {
    let (a, b) = nodes.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let epoch = Instant::now();
    let payload = vec![0x3Cu8; 8192];
    let mut lat = std::thread::scope(|s| {
        let rx = s.spawn(|| -> anyhow::Result<Vec<f64>> {
            let mut v = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let m = recv_or_fail(b, "latency")?;
                let now = epoch.elapsed().as_nanos() as u64;
                let sent = u64::from_le_bytes(m.ctrl[..8].try_into()?);
                v.push((now - sent) as f64 / 1000.0);
                b.host.send(0, b"ack", &[], PayloadToken::NONE, 0)?;
            }
            Ok(v)
        });
        for _ in 0..count {
            let stamp = (epoch.elapsed().as_nanos() as u64).to_le_bytes();
            a.host.send(1, &stamp, &payload, PayloadToken::NONE, 0)?;
            recv_or_fail(a, "latency ack")?;
        }
        rx.join().map_err(|_| anyhow::anyhow!("receiver thread panicked"))?
    })?;
    lat.sort_by(|x, y| x.total_cmp(y));
    Ok(lat)
}

fn run_mode(mode: Mode, a: &NicArgs, image: Option<Vec<u8>>) -> anyhow::Result<Result> {
    let opt = Options { image, spin: SPIN, ..Options::default() };
    let mut nodes = cluster(2, mode, LinkKind::InProc, &opt)?;
    for n in nodes.iter_mut() {
        n.host.set_spin(SPIN);
    }
    let msgs_per_s = stream(&mut nodes, a.messages, 0)?;
    let mb_s = stream(&mut nodes, a.payloads, 8192)? * 8192.0 / 1e6;
    let lat = latency(&mut nodes, a.payloads)?;
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    Ok(Result { msgs_per_s, mb_s, p50_us: pct(0.5), p99_us: pct(0.99) })
}

fn main() {
    let a = <NicArgs as clap::Parser>::parse();
    if let Err(e) = run(a) {
        eprintln!("bench_nic: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: NicArgs) -> anyhow::Result<()> {
    let image = std::fs::read(&a.image).with_context(|| format!("reading {}", a.image.display()))?;
    let native = run_mode(Mode::Native, &a, None)?;
    let flashed = run_mode(Mode::Flashed, &a, Some(image))?;
    if a.json {
        let row = |r: &Result| {
            json!({ "msgs_per_s": r.msgs_per_s.round(), "stream_8k_mb_s": (r.mb_s * 10.0).round() / 10.0,
                    "oneway_8k_p50_us": (r.p50_us * 10.0).round() / 10.0, "oneway_8k_p99_us": (r.p99_us * 10.0).round() / 10.0 })
        };
        println!(
            "{}",
            json!({
                "link": "in-process",
                "native": row(&native),
                "flashed": row(&flashed),
                "flashed_over_native": {
                    "msgs_per_s": (flashed.msgs_per_s / native.msgs_per_s * 1000.0).round() / 1000.0,
                    "oneway_8k_p50": (flashed.p50_us / native.p50_us * 1000.0).round() / 1000.0,
                }
            })
        );
        return Ok(());
    }
    println!("virtual NIC to virtual NIC over the in-process link (same run, same machine)");
    println!("{:<26} {:>14} {:>14} {:>10}", "", "native", "flashed", "ratio");
    let row = |label: &str, n: f64, f: f64, unit: &str| {
        println!(
            "{label:<26} {:>14} {:>14} {:>10}",
            format!("{n:.1} {unit}"),
            format!("{f:.1} {unit}"),
            format!("{:.2}", f / n)
        );
    };
    row("control messages/s", native.msgs_per_s, flashed.msgs_per_s, "");
    row("8 KB stream", native.mb_s, flashed.mb_s, "MB/s");
    row("8 KB one-way p50", native.p50_us, flashed.p50_us, "µs");
    row("8 KB one-way p99", native.p99_us, flashed.p99_us, "µs");
    Ok(())
}
