// SPDX-License-Identifier: GPL-2.0-only
//! The `gmsd` and `gms` binaries as a user runs them: settings that cannot work are refused
//! naming the option; `gms` says in words that the daemon is not running, did not answer in
//! time, has no node to store on, or lost a page with a failed holder; logs off a terminal
//! carry no colour codes and print durations for people. Every run has a deadline.

use std::net::UdpSocket;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/scratch.rs"]
mod scratch;
use scratch::Dir;

/// Daemons killed when the test ends, pass or fail (their logs printed on failure).
struct Daemons(Vec<(Child, PathBuf)>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for (c, log) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
            if std::thread::panicking() {
                eprintln!("---- {} ----\n{}", log.display(), std::fs::read_to_string(&*log).unwrap_or_default());
            }
        }
    }
}

#[path = "support/process.rs"]
mod process;
use process::run;

fn gmsd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gmsd"))
}

fn gms(sock: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gms"));
    c.arg("--socket").arg(sock).args(args);
    run(c, Duration::from_secs(30))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn free_port(taken: &[u16]) -> u16 {
    for _ in 0..200 {
        let p = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !taken.contains(&p) {
            return p;
        }
    }
    panic!("no free UDP port on 127.0.0.1");
}

/// Start a daemon (stderr to `log`) and wait until its socket answers `gms stat`.
fn start(d: &mut Daemons, node: u16, port: u16, peers: &[(u16, u16)], sock: &Path, log: PathBuf) {
    let mut cmd = gmsd();
    // A volume's floor map (8 bytes a page) stays well inside the 1 MiB budgets.
    cmd.args(["--node", &node.to_string(), "--listen", &format!("127.0.0.1:{port}"), "--budget-mb", "1"])
        .args(["--volume-pages", "8192"])
        .args(["--heartbeat-ms", "50", "--dead-after-ms", "500", "--socket"])
        .arg(sock);
    for (n, p) in peers {
        cmd.args(["--peer", &format!("{n}=127.0.0.1:{p}")]);
    }
    let f = std::fs::File::create(&log).unwrap();
    let child = cmd.stdout(Stdio::null()).stderr(f).spawn().expect("spawn gmsd");
    d.0.push((child, log));
    let t0 = Instant::now();
    while !gms(sock, &["--timeout-s", "5", "stat"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(20), "gmsd {node} never answered at {}", sock.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn settings_that_cannot_work_are_refused_naming_the_option() {
    let dir = Dir::new("bad");
    let port = free_port(&[]).to_string();
    let refused = |extra: &[&str]| -> String {
        let mut c = gmsd();
        c.args(["--node", "0", "--listen", &format!("127.0.0.1:{port}"), "--budget-mb", "1", "--socket"])
            .arg(dir.join("g.sock"))
            .args(extra);
        let out = run(c, Duration::from_secs(10));
        assert!(!out.status.success(), "{extra:?} was accepted");
        stderr(&out)
    };
    let e = refused(&["--dead-after-ms", "50", "--heartbeat-ms", "100"]);
    assert!(e.contains("--dead-after-ms 50") && e.contains("--heartbeat-ms 100"), "{e}");
    let e = refused(&["--dead-after-ms", "199", "--heartbeat-ms", "100"]);
    assert!(e.contains("at least 2 ×") && e.contains("200 ms"), "{e}");
    let e = refused(&["--cache-pages", "99999999999"]);
    assert!(e.contains("--cache-pages") && e.contains("99999999999"), "{e}");
    for opt in ["--heartbeat-ms", "--op-timeout-ms", "--window"] {
        let e = refused(&[opt, "0"]);
        assert!(e.contains(opt), "{opt} 0: {e}");
    }
    let e = refused(&["--op-timeout-ms", "18446744073709551615"]);
    assert!(e.contains("--op-timeout-ms"), "{e}");
    let e = refused(&["--idle-spin-us", "1000001"]);
    assert!(e.contains("--idle-spin-us") && e.contains("0..=1000000"), "{e}");
    // Replicas: 1 to 4 (clap's range), and no more than the other nodes given.
    for bad in ["0", "9"] {
        let e = refused(&["--replicas", bad]);
        assert!(e.contains("--replicas") && e.contains(bad) && e.contains("1..=4"), "--replicas {bad}: {e}");
    }
    let e = refused(&["--replicas", "2", "--peer", "1=127.0.0.1:9"]);
    assert!(e.contains("--replicas 2") && e.contains("1 other node") && e.contains("lower --replicas"), "{e}");
}

/// A key file its group may read is refused before anything starts, saying who may read
/// it (not "others").
#[test]
fn a_key_file_its_group_may_read_is_refused_saying_so() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("key");
    let key = dir.join("cluster.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut c = gmsd();
    c.args(["--node", "0", "--listen", &format!("127.0.0.1:{}", free_port(&[])), "--budget-mb", "1", "--key"])
        .arg(&key)
        .arg("--socket")
        .arg(dir.join("g.sock"));
    let out = run(c, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("mode 0640: its group may read it;") && !e.contains("other"), "{e}");
    assert!(!dir.join("g.sock").exists(), "a socket was made before the key was checked");
}

/// The link is UDP (`--listen`) or raw Ethernet (`--link ether:IFNAME`), never neither or
/// both; its peers are of its kind (`ID=IP:PORT`, `ID=MAC`); an interface that is not
/// there, and a malformed MAC, are named.
#[test]
fn link_settings_that_cannot_work_are_refused() {
    let dir = Dir::new("link");
    let port = free_port(&[]).to_string();
    let listen = format!("127.0.0.1:{port}");
    let refused = |args: &[&str]| -> (Option<i32>, String) {
        let mut c = gmsd();
        c.args(["--node", "0", "--budget-mb", "1", "--socket"]).arg(dir.join("g.sock")).args(args);
        let out = run(c, Duration::from_secs(10));
        assert!(!out.status.success(), "{args:?} was accepted");
        (out.status.code(), stderr(&out))
    };
    let (_, e) = refused(&[]);
    assert!(e.contains("--listen") && e.contains("--link"), "{e}");
    let (_, e) = refused(&["--listen", &listen, "--link", "ether:eth0"]);
    assert!(e.contains("cannot be used with"), "{e}");
    let (_, e) = refused(&["--link", "tcp:eth0"]);
    assert!(e.contains("expected udp:IP:PORT or ether:IFNAME"), "{e}");
    let (code, e) = refused(&["--listen", &listen, "--peer", "1=02:00:00:00:00:01"]);
    assert!(e.contains("--peer 1=02:00:00:00:00:01 is a MAC address, but the link is UDP"), "{e}");
    assert_eq!(code, Some(2), "a bad command line");
    let (_, e) = refused(&["--link", "ether:eth0", "--peer", "1=127.0.0.1:9"]);
    assert!(e.contains("--peer 1=127.0.0.1:9 is a UDP address, but the link is raw Ethernet"), "{e}");
    let (_, e) = refused(&["--link", "ether:eth0", "--peer", "1=02:00:00:00:00:01", "--peer", "2=127.0.0.1:9"]);
    assert!(e.contains("is a UDP address and --peer 1=02:00:00:00:00:01 a MAC address"), "{e}");
    let (_, e) = refused(&["--link", "ether:eth0", "--peer", "1=02:00:00:00:01"]);
    assert!(e.contains("bad MAC address \"02:00:00:00:01\""), "{e}");
    let (_, e) = refused(&["--link", "ether:eth0", "--peer", "1=ff:ff:ff:ff:ff:ff"]);
    assert!(e.contains("multicast or broadcast"), "{e}");
    // Opening the interface: missing (as root), or raw sockets not allowed (otherwise).
    let (code, e) = refused(&["--link", "ether:tzgmsdnone0", "--peer", "1=02:00:00:00:00:01"]);
    assert!(e.contains("ether:tzgmsdnone0: no such interface") || e.contains("needs root or CAP_NET_RAW"), "{e}");
    assert_eq!(code, Some(1));
}

#[test]
fn gms_says_the_daemon_is_not_running_or_not_answering() {
    let dir = Dir::new("nobody");
    // No socket file at all.
    let missing = dir.join("missing.sock");
    let out = gms(&missing, &["stat"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("not running") && e.contains(&missing.display().to_string()), "{e}");
    // A socket file nobody listens on (left by a daemon killed with SIGKILL).
    let stale = dir.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let out = gms(&stale, &["get", "--page", "1:1"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("not running") && e.contains("nobody listens") && e.contains("stale.sock"), "{e}");
    // A listener that accepts and never answers: a timeout naming the socket and the wait.
    let mute = dir.join("mute.sock");
    let l = UnixListener::bind(&mute).unwrap();
    let holder = std::thread::spawn(move || {
        let conn = l.accept();
        std::thread::sleep(Duration::from_secs(3));
        drop(conn);
    });
    let t0 = Instant::now();
    let out = gms(&mute, &["--timeout-s", "1", "stat"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("timed out") && e.contains("mute.sock") && e.contains("1.0 s"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(4), "gms took {:?} to give up after 1 s", t0.elapsed());
    let _ = holder.join();
}

#[test]
fn a_lone_daemon_has_no_node_to_store_on() {
    let dir = Dir::new("alone");
    let sock = dir.join("g.sock");
    let mut d = Daemons(Vec::new());
    start(&mut d, 0, free_port(&[]), &[], &sock, dir.join("gmsd.log"));
    let file = dir.join("page.bin");
    std::fs::write(&file, [7u8; 100]).unwrap();
    let out = gms(&sock, &["put", "--page", "1:1", "--file", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("no other node is a member") && e.contains("has no peers: give its gmsd a --peer"), "{e}");
    let out = gms(&sock, &["get", "--page", "1:1", "--network-only"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stderr(&out).contains("miss: this node has no live peer"), "{}", stderr(&out));
    let log = std::fs::read_to_string(dir.join("gmsd.log")).unwrap();
    assert!(log.contains("gmsd up") && !log.contains('\x1b'), "plain log off a terminal: {log:?}");
    assert!(log.contains("WARN") && log.contains("no --peer given: node 0 is alone"), "no warning: {log}");
}

#[test]
fn a_miss_says_the_copies_are_lost() {
    let dir = Dir::new("holder");
    let (s0, s1) = (dir.join("g0.sock"), dir.join("g1.sock"));
    let p0 = free_port(&[]);
    let p1 = free_port(&[p0]);
    let mut d = Daemons(Vec::new());
    start(&mut d, 0, p0, &[(1, p1)], &s0, dir.join("gmsd-0.log"));
    start(&mut d, 1, p1, &[(0, p0)], &s1, dir.join("gmsd-1.log"));
    let members = |s: &Path| -> String {
        let out = gms(s, &["stat", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["members"].to_string()
    };
    let t0 = Instant::now();
    while members(&s0) != "[0,1]" || members(&s1) != "[0,1]" {
        assert!(t0.elapsed() < Duration::from_secs(20), "the daemons never saw each other");
        std::thread::sleep(Duration::from_millis(50));
    }
    // 100 bytes: stored as a page padded with zeros, and read back as the whole page.
    let (file, back) = (dir.join("page.bin"), dir.join("back.bin"));
    let data: Vec<u8> = (0..100u8).collect();
    std::fs::write(&file, &data).unwrap();
    let out = gms(&s0, &["put", "--page", "1:42", "--file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1:42: stored at node 1"), "{out:?}");
    let out = gms(&s0, &["get", "--page", "1:42", "--network-only", "--out", back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut page = data.clone();
    page.resize(8192, 0);
    assert_eq!(std::fs::read(&back).unwrap(), page);
    // Node 1 dies: once node 0 has declared it failed, the miss says why.
    let (mut c1, _) = d.0.remove(1);
    c1.kill().unwrap();
    c1.wait().unwrap();
    let t0 = Instant::now();
    while members(&s0) != "[0]" {
        assert!(t0.elapsed() < Duration::from_secs(10), "node 0 never declared node 1 failed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = gms(&s0, &["get", "--page", "1:42", "--network-only"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // Node 1 was declared failed, not known to have restarted: its copy may come back.
    assert!(stderr(&out).contains("the nodes that may hold one are declared failed"), "{}", stderr(&out));
    let out = gms(&s0, &["get", "--page", "1:43", "--network-only"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!stderr(&out).contains("node 1"), "a page never stored is not blamed on node 1: {}", stderr(&out));
    // The failure as logged: plain text, durations for people.
    let log = std::fs::read_to_string(dir.join("gmsd-0.log")).unwrap();
    let line = log.lines().find(|l| l.contains("failed")).unwrap_or_else(|| panic!("no failure logged: {log}"));
    assert!(line.contains("silent for over 500 ms") && !line.contains("Some(") && !line.contains('\x1b'), "{line}");
}

#[test]
fn help_is_complete_and_true() {
    let help = |bin: &str, args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args);
        let out = run(c, Duration::from_secs(10));
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let put = help(env!("CARGO_BIN_EXE_gms"), &["put", "--help"]);
    assert!(put.contains("padded with zeros") && put.contains("makes this daemon its writer"), "{put}");
    let d = help(env!("CARGO_BIN_EXE_gmsd"), &["--help"]);
    assert!(d.contains("at least 2 × --heartbeat-ms"), "{d}");
}
