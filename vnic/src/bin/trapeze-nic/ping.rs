// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-nic ping`: link-level echoes from a running NIC to another node's NIC
//! (`trapeze_vnic::echo`), through the NIC's control socket; each round trip, a summary,
//! and on failure the likely cause.

use crate::control_path;
use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use trapeze_vnic::control::{human_duration, ControlClient, Request};

#[derive(Args)]
pub struct PingArgs {
    /// The NIC's name (its control socket is NAME.sock in the default socket directory).
    #[arg(required_unless_present = "control", conflicts_with = "control")]
    pub name: Option<String>,
    /// The NIC's control socket, for a NIC started with --control PATH (`--socket`, as
    /// `gms` spells it, is accepted too).
    #[arg(long, alias = "socket", value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// The node whose NIC is to answer (one of this NIC's --peer nodes).
    #[arg(long, value_name = "NODE")]
    pub peer: u16,
    /// Echo requests to send (1-1000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
    /// Pause between requests, ms (0-10000).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub interval_ms: u64,
    /// How long to wait for each reply, ms (1-10000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub wait_ms: u64,
}

/// `trapeze-nic ping`: `count` echo requests through the NIC's control socket, one line per
/// reply, then the summary; an error naming the likely cause if none came back.
pub fn ping(a: PingArgs) -> anyhow::Result<()> {
    let path = control_path(&a.control, &a.name)?;
    let client = ControlClient::connect(&path)?;
    let ask_status = || -> anyhow::Result<Value> {
        let (v, _) = client
            .request_with_fds(&Request::Status, &[], Duration::from_secs(5))
            .with_context(|| format!("asking the NIC at {} for its status", path.display()))?;
        Ok(v["status"].clone())
    };
    let before = ask_status()?;
    let me = before["node"].as_u64().unwrap_or(0);
    println!(
        "ping node {} from NIC {} (node {me}, {}, {}): {} echo request{}",
        a.peer,
        before["name"].as_str().unwrap_or("?"),
        before["link_address"].as_str().unwrap_or("?"),
        if before["cluster_key"] == Value::Bool(true) { "keyed" } else { "no cluster key" },
        a.count,
        if a.count == 1 { "" } else { "s" }
    );
    let mut rtts: Vec<Duration> = Vec::new();
    let wait = Duration::from_millis(a.wait_ms);
    for i in 1..=a.count {
        if i > 1 {
            std::thread::sleep(Duration::from_millis(a.interval_ms));
        }
        let req = Request::Ping { peer: a.peer, wait_ms: a.wait_ms };
        let (v, _) = client.request_with_fds(&req, &[], wait + Duration::from_secs(5))?;
        match v["rtt_ns"].as_u64() {
            Some(ns) => {
                let d = Duration::from_nanos(ns);
                println!("echo {i} from node {}: {:.1} µs", a.peer, ns as f64 / 1000.0);
                rtts.push(d);
            }
            None => println!("echo {i} from node {}: lost (no reply within {})", a.peer, human_duration(wait)),
        }
    }
    let lost = a.count as usize - rtts.len();
    let mut summary = format!(
        "node {}: {} sent, {} received, {lost} lost ({:.0} %)",
        a.peer,
        a.count,
        rtts.len(),
        100.0 * lost as f64 / a.count as f64
    );
    rtts.sort();
    if let (Some(min), Some(max)) = (rtts.first(), rtts.last()) {
        let us = |d: &Duration| d.as_nanos() as f64 / 1000.0;
        summary += &format!(
            "; round trip min {:.1} / p50 {:.1} / max {:.1} µs",
            us(min),
            us(&rtts[(rtts.len() - 1) / 2]),
            us(max)
        );
    }
    println!("{summary}");
    if rtts.is_empty() {
        let after = ask_status().unwrap_or_default();
        bail!("{}", no_reply_cause(a.peer, me, &before, &after));
    }
    Ok(())
}

/// Why no echo came back, as far as this NIC can tell from its link counters before and
/// after the pings (a NIC on another key drops the requests silently: only its own
/// `mac_rejected` shows it).
fn no_reply_cause(peer: u16, me: u64, before: &Value, after: &Value) -> String {
    let grew = |k: &str| after["link"][k].as_u64().unwrap_or(0).saturating_sub(before["link"][k].as_u64().unwrap_or(0));
    let keyed = after["cluster_key"] == Value::Bool(true);
    let addr = after["peers"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["node"].as_u64() == Some(peer.into())))
        .and_then(|p| p["address"].as_str())
        .map_or(String::new(), |a| format!(" at {a}"));
    let head = format!("no echo came back from node {peer}{addr}");
    if grew("unroutable") > 0 {
        return format!("{head}: this NIC has no route to node {peer} (give it --peer {peer}=ADDRESS)");
    }
    if grew("send_errors") > 0 {
        return format!("{head}: the link failed to send {} of the requests (see this NIC's log)", grew("send_errors"));
    }
    if grew("mac_rejected") > 0 {
        return format!(
            "{head}: this NIC dropped {} packets whose MAC failed meanwhile, so node {peer} is likely on another \
             cluster key{}: give every NIC the same --key file",
            grew("mac_rejected"),
            if keyed { " (or none)" } else { " (this NIC has none)" }
        );
    }
    format!(
        "{head}: is trapeze-nic running for node {peer}, with --peer {me}=<this NIC's address>? If it is, the cluster \
         keys differ ({}): a NIC drops packets under another key and counts them as mac_rejected in its own \
         `trapeze-nic status`",
        if keyed {
            format!("this NIC has a key; node {peer}'s needs the same --key file")
        } else {
            "this NIC has no --key".into()
        }
    )
}
