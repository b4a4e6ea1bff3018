// SPDX-License-Identifier: GPL-2.0-only
//! Peers that are not members, as a user meets them: three `gmsd` over UDP where one runs
//! on another cluster key, and a configured peer that never starts. Each daemon's log,
//! `gms stat` (text and JSON) and a failed `gms put` must name the node, the cause (a key
//! mismatch, never heard, dead) and the fix; no put is aimed at a node never heard.

#[path = "support/daemons.rs"]
mod daemons;

use daemons::{over_udp, put_pages, stat, udp_ports, wait_for, Daemons};
use gmsd::proto::{PeerState, PutOutcome};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use trapeze_vnic::key::ClusterKey;

const FAST: [&str; 6] = ["--budget-mb", "4", "--heartbeat-ms", "50", "--dead-after-ms", "300"];

fn gms(sock: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gms")).arg("--socket").arg(sock).args(args).output().expect("run gms")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Two fresh cluster keys in a private directory (removed when dropped).
struct Keys(PathBuf);

impl Keys {
    fn new() -> Keys {
        let dir = std::env::temp_dir().join(format!("gmsd-peers-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("key directory");
        for k in ["a", "b"] {
            ClusterKey::generate(&dir.join(k)).expect("keygen");
        }
        Keys(dir)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Nodes 0 and 1 share a key, node 2 has another: each side names the other's key
/// mismatch in its log and `stat`, calls it never heard (not dead), and a put needing two
/// copies fails naming node 2 and the key.
#[test]
fn a_node_on_another_key_is_named_with_the_fix() {
    let keys = Keys::new();
    let ports = udp_ports(3).expect("free UDP ports");
    let key_dir = keys.0.clone();
    let mut cl = Daemons::new("peers-key", 3, move |n| {
        let mut c = over_udp(&ports, n, &FAST);
        c.arg("--key").arg(key_dir.join(if n == 2 { "b" } else { "a" }));
        c
    })
    .expect("a directory for the daemons");
    for n in 0..3 {
        cl.spawn(n).expect("spawn gmsd");
    }
    let s0 = wait_for(Duration::from_secs(10), "gmsd 0 to hear node 1 and reject node 2's packets", || {
        stat(&cl.sock(0)).filter(|s| s.members == [0, 1] && s.nodes.get(2).is_some_and(|m| m.mac_rejected > 0))
    });
    let n2 = &s0.nodes[2];
    assert_eq!((n2.node, n2.state, n2.alive), (2, PeerState::NeverHeard, false), "{:?}", s0.nodes);
    assert_eq!(s0.nodes[1].mac_rejected, 0, "node 1 shares the key");
    wait_for(Duration::from_secs(5), "gmsd 2 to reject both others' packets", || {
        stat(&cl.sock(2)).filter(|s| s.members == [2] && s.nodes.iter().filter(|m| m.mac_rejected > 0).count() == 2)
    });

    // The log: once, when the rejections start, naming the node and the fix.
    let log = wait_for(Duration::from_secs(5), "gmsd 0 to log the key mismatch", || {
        Some(cl.log(0)).filter(|l| l.contains("packets claiming to be node 2"))
    });
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("claiming to be node 2")).collect();
    assert_eq!(lines.len(), 1, "once, not per packet: {lines:#?}");
    assert!(lines[0].contains("fail the cluster key check") && lines[0].contains("same --key"), "{}", lines[0]);
    assert!(!log.contains("failed"), "a node never heard is not declared failed: {log}");

    // `gms stat`: text per peer, and JSON.
    let t = text(&gms(&cl.sock(0), &["stat"]));
    let row = t.lines().find(|l| l.trim_start().starts_with("2 ")).unwrap_or_default();
    assert!(row.contains("never heard"), "{t}");
    assert!(
        t.contains("node 2 was never heard (") && t.contains("claiming to be node 2 failed the cluster key check"),
        "{t}"
    );
    // Refusals by name: the link's (node 2's packets failed the key check; nothing was
    // replayed), GMS's by kind.
    assert!(t.contains("refused by the link before GMS saw them: mac_rejected="), "{t}");
    assert!(!t.contains("mac_rejected=0 ") && t.contains(" replayed=0 replay_stale_epoch=0 "), "{t}");
    assert!(
        t.contains(" trailer_forged=0 ") && t.contains("rejected_updates=0 rejected_removes=0 rejected_discards=0"),
        "{t}"
    );
    let json: serde_json::Value = serde_json::from_slice(&gms(&cl.sock(0), &["stat", "--json"]).stdout).expect("JSON");
    assert_eq!(json["nodes"][2]["state"], "never_heard", "{json}");
    assert_eq!(json["link_refused"][0][0], "mac_rejected", "{json}");
    assert!(json["link_refused"][0][1].as_u64().unwrap_or(0) > 0, "{json}");
    assert!(json["nodes"][2]["mac_rejected"].as_u64().unwrap_or(0) > 0, "{json}");

    // A put needs two copies and has one member: the error names node 2 and the key.
    let page = cl.sock(0).with_extension("page");
    std::fs::write(&page, [5u8; 64]).expect("page file");
    let out = gms(&cl.sock(0), &["put", "--page", "1:1", "--file", page.to_str().unwrap_or_default()]);
    let e = text(&out);
    assert!(!out.status.success(), "{e}");
    assert!(e.contains("only 1 other node is a member (node 1)") && e.contains("node 2 was never heard"), "{e}");
    assert!(e.contains("same --key") && !e.contains("lower --replicas"), "the fix is the key: {e}");
}

/// A configured peer that never starts: never heard (not alive, not failed), never put
/// to; with a member too few, the put's error names it.
#[test]
fn a_peer_that_never_starts_is_never_heard_and_never_put_to() {
    let ports = udp_ports(4).expect("free UDP ports");
    let mut cl = Daemons::new("peers-absent", 4, move |n| over_udp(&ports, n, &FAST)).expect("a directory");
    for n in 0..3 {
        cl.spawn(n).expect("spawn gmsd");
    }
    // Every running daemon must see the same members before the puts: a target whose
    // view still lacks a node answers WrongView.
    for n in [1, 2] {
        wait_for(Duration::from_secs(10), "gmsd 1 and 2 to hear the others", || {
            stat(&cl.sock(n)).filter(|s| s.members == [0, 1, 2])
        });
    }
    let s = wait_for(Duration::from_secs(10), "gmsd 0 to hear nodes 1 and 2", || {
        stat(&cl.sock(0)).filter(|s| s.members == [0, 1, 2])
    });
    let n3 = &s.nodes[3];
    assert_eq!((n3.state, n3.alive, n3.last_heard_ms), (PeerState::NeverHeard, false, u64::MAX), "{:?}", s.nodes);
    let mut c = gmsd::client::Client::connect(&cl.sock(0)).expect("connect");
    let ids: Vec<u64> = (0..64).collect();
    for (i, r) in put_pages(&mut c, 2, &ids, |i| vec![i as u8; 100]).expect("puts").into_iter().enumerate() {
        match r {
            PutOutcome::Stored { targets, .. } => assert!(!targets.contains(3), "page {i} aimed at node 3: {targets}"),
            other => panic!("page {i}: {other:?}"),
        }
    }
    let s = stat(&cl.sock(0)).expect("stat");
    assert_eq!((s.nodes[3].held, s.failures_detected), (0, 0), "{:?}", s.nodes);

    // Node 2 goes: one member left for two copies. The error names both absent nodes.
    cl.kill(2).expect("kill gmsd 2");
    wait_for(Duration::from_secs(5), "gmsd 0 to declare node 2 failed", || {
        stat(&cl.sock(0)).filter(|s| s.members == [0, 1])
    });
    let page = cl.sock(0).with_extension("page");
    std::fs::write(&page, [5u8; 64]).expect("page file");
    let e = text(&gms(&cl.sock(0), &["put", "--page", "1:1", "--file", page.to_str().unwrap_or_default()]));
    assert!(e.contains("node 2 is dead (silent for") && e.contains("restart its gmsd"), "{e}");
    assert!(e.contains("node 3 was never heard (no heartbeat"), "{e}");
    let t = text(&gms(&cl.sock(0), &["stat"]));
    assert!(t.lines().any(|l| l.trim_start().starts_with("3 ") && l.contains("never heard")), "{t}");

    // The log says so once, a few seconds after start, naming the address.
    let log = wait_for(Duration::from_secs(8), "gmsd 0 to log node 3 as never heard", || {
        Some(cl.log(0)).filter(|l| l.contains("peer 3 ("))
    });
    let line = log.lines().find(|l| l.contains("peer 3 (")).unwrap_or_default();
    assert!(line.contains("not heard in 5.0 s since start") && line.contains("no puts go to it"), "{line}");
    assert!(!log.contains("peer 2 (") && !log.contains("claiming"), "only node 3 was never heard: {log}");
}
