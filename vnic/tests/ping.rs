// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-nic ping` as a user runs it: two `trapeze-nic` processes on a UDP link on
//! 127.0.0.1, no host attached, exchange link-level echoes both ways; `status` shows the
//! link address, the peers and the cluster key in use; `trace-report` says there is
//! nothing to report before the pings (and the idle traces do not grow) and reports the
//! pings' round trips after. A ping to a node whose NIC is not running, or on another key,
//! fails with exit 1 and a message naming the likely cause; a ping to the NIC's own node
//! or to a node that is not its peer is refused. In process, malformed echo packets from a
//! bare link endpoint are counted and never answered or given to the firmware.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use trapeze_vnic::control::ControlClient;

const NIC: &str = env!("CARGO_BIN_EXE_trapeze-nic");

/// NIC processes (stopped, their logs printed on failure) and their scratch directory.
struct Nics {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Nics {
    fn new(test: &str) -> Nics {
        let dir = std::env::temp_dir().join(format!("trapeze-ping-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Nics { dir, children: Vec::new() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Start the NIC of node `node` on `port` with `peers` (node, port), under key file
    /// `key` if given, tracing to `trace{node}`; its control socket is `nic{node}.sock`.
    fn start(&mut self, node: u16, port: u16, peers: &[(u16, u16)], key: Option<&Path>) -> PathBuf {
        let sock = self.path(&format!("nic{node}.sock"));
        let log = std::fs::File::create(self.path(&format!("nic{node}.log"))).unwrap();
        let mut c = Command::new(NIC);
        c.args(["--name", &format!("nic{node}"), "--node", &node.to_string()])
            .args(["--link", &format!("udp:127.0.0.1:{port}")])
            .arg("--control")
            .arg(&sock)
            .arg("--trace")
            .arg(self.path(&format!("trace{node}")));
        for (n, p) in peers {
            c.args(["--peer", &format!("{n}=127.0.0.1:{p}")]);
        }
        if let Some(k) = key {
            c.arg("--key").arg(k);
        }
        self.children.push(c.env_remove("RUST_LOG").stdout(Stdio::null()).stderr(log).spawn().expect("trapeze-nic"));
        let t0 = Instant::now();
        while ControlClient::connect(&sock).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "trapeze-nic did not open {}", sock.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        sock
    }

    /// Stop every NIC with SIGTERM (they flush their traces) and wait for them.
    fn stop(&mut self) {
        for c in &mut self.children {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(c.id() as i32).expect("a pid"),
                rustix::process::Signal::TERM,
            );
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for Nics {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            for n in 0..2 {
                let log = self.path(&format!("nic{n}.log"));
                eprintln!("---- {} ----\n{}", log.display(), std::fs::read_to_string(&log).unwrap_or_default());
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_udp_ports() -> [u16; 2] {
    // Held open together, so they differ.
    let s = [UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap()];
    s.map(|s| s.local_addr().unwrap().port())
}

fn nic(args: &[&str], sock: &Path) -> Output {
    Command::new(NIC).args(args).arg("--control").arg(sock).output().expect("running trapeze-nic")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn key(dir: &Path, name: &str) -> PathBuf {
    let k = dir.join(name);
    trapeze_vnic::key::ClusterKey::generate(&k).expect("a cluster key");
    k
}

#[test]
fn two_nics_ping_each_other_and_status_and_trace_report_show_it() {
    let mut nics = Nics::new("pair");
    let k = key(&nics.dir, "cluster.key");
    let p = free_udp_ports();
    let s0 = nics.start(0, p[0], &[(1, p[1])], Some(&k));
    let s1 = nics.start(1, p[1], &[(0, p[0])], Some(&k));

    let st = nic(&["status"], &s0);
    let out = text(&st.stdout);
    assert!(st.status.success(), "{}", text(&st.stderr));
    assert!(out.contains(&format!("link address  udp 127.0.0.1:{} (1 peer)", p[0])), "{out}");
    assert!(out.contains(&format!("peers         1=127.0.0.1:{}", p[1])), "{out}");
    assert!(out.contains("cluster key   in use"), "{out}");
    assert!(!out.contains("build id 00000000"), "the native firmware has a build id: {out}");

    // Idle NICs trace nothing: the files stay as they are, and there is nothing to report.
    let traces = [nics.path("trace0"), nics.path("trace1")];
    let size = |t: &Path| std::fs::metadata(t).map_or(0, |m| m.len());
    std::thread::sleep(Duration::from_millis(300));
    let idle: Vec<u64> = traces.iter().map(|t| size(t)).collect();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(traces.iter().map(|t| size(t)).collect::<Vec<_>>(), idle, "idle traces grew");
    let r = Command::new(NIC).arg("trace-report").args(&traces).output().unwrap();
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(text(&r.stdout).starts_with("no round trips recorded"), "{}", text(&r.stdout));

    for (sock, peer, flag) in [(&s0, "1", "--control"), (&s1, "0", "--socket")] {
        let out = Command::new(NIC)
            .args(["ping", "--peer", peer, "--count", "3", "--interval-ms", "10", flag])
            .arg(sock)
            .output()
            .unwrap();
        let o = text(&out.stdout);
        assert!(out.status.success(), "ping {peer}: {o}{}", text(&out.stderr));
        assert!(o.contains(&format!("node {peer}: 3 sent, 3 received, 0 lost (0 %); round trip min")), "{o}");
        assert_eq!(o.matches(&format!("from node {peer}: ")).count(), 3, "{o}");
    }
    let js = Command::new(NIC).args(["status", "--json", "--socket"]).arg(&s1).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&js.stdout).expect("status --json");
    assert_eq!((v["echo"]["requests_answered"].as_u64(), v["echo"]["replies_received"].as_u64()), (Some(3), Some(3)));
    assert_eq!(v["echo"]["malformed"], 0);
    assert_eq!(v["cluster_key"], true);
    assert_eq!(v["peers"][0]["node"], 0);

    nics.stop();
    let r = Command::new(NIC).arg("trace-report").args(&traces).output().unwrap();
    let rep = text(&r.stdout);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let row =
        rep.lines().find(|l| l.starts_with("ping: echo request out to reply in")).unwrap_or_else(|| panic!("{rep}"));
    assert_eq!(row.split_whitespace().nth(7), Some("6"), "6 round trips (3 each way): {rep}");
    assert!(rep.contains("ping: echo request out to the peer's echo"), "{rep}");
}

#[test]
fn a_ping_nobody_answers_fails_naming_the_cause() {
    let mut nics = Nics::new("lost");
    let p = free_udp_ports();
    // Node 1 is configured but not running.
    let s0 = nics.start(0, p[0], &[(1, p[1])], None);
    let out = nic(&["ping", "--peer", "1", "--count", "2", "--interval-ms", "0", "--wait-ms", "200"], &s0);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{o}{e}");
    assert!(o.contains("node 1: 2 sent, 0 received, 2 lost (100 %)"), "{o}");
    assert!(e.contains(&format!("no echo came back from node 1 at 127.0.0.1:{}", p[1])), "{e}");
    assert!(e.contains("is trapeze-nic running for node 1, with --peer 0="), "{e}");

    // Its own node, and a node that is not its peer, are refused before anything is sent.
    let out = nic(&["ping", "--peer", "0"], &s0);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("node 0 is this NIC's own node id"), "{}", text(&out.stderr));
    let out = nic(&["ping", "--peer", "7"], &s0);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(e.contains("node 7 is not a peer of NIC nic0 (its peers: 1=127.0.0.1:") && e.contains("--peer 7="), "{e}");

    // Node 1 now runs, under a key node 0 does not have: still no echo, and node 1 counts
    // the requests it dropped, which its status shows.
    let k = key(&nics.dir, "other.key");
    let s1 = nics.start(1, p[1], &[(0, p[0])], Some(&k));
    let out = nic(&["ping", "--peer", "1", "--count", "2", "--interval-ms", "0", "--wait-ms", "200"], &s0);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("the cluster keys differ (this NIC has no --key)"), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&nic(&["status", "--json"], &s1).stdout).unwrap();
    assert!(v["link"]["mac_rejected"].as_u64() >= Some(2), "{v}");
    // And node 1's pings to node 0 are dropped by node 0: the message names the keys.
    let out = nic(&["ping", "--peer", "0", "--count", "2", "--interval-ms", "0", "--wait-ms", "200"], &s1);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(e.contains("this NIC has a key; node 0's needs the same --key file"), "{e}");
}

/// Echo packets straight from a bare link endpoint to a running NIC (in process): a good
/// request is answered; one of the wrong length, version or op, or claiming another sender
/// than the link says, is counted as malformed and not answered; none reaches the firmware.
#[test]
fn malformed_echoes_are_counted_and_never_reach_the_firmware() {
    use std::sync::Arc;
    use trapeze_vnic::echo::{EchoRepr, Op, ECHO_BYTES};
    use trapeze_vnic::link::{backend::InProcSwitch, FaultConfig, Link};
    use trapeze_vnic::nic::{FirmwareKind, Nic};

    let switch = InProcSwitch::new();
    let link = Link::new(1, Box::new(switch.port(1)), FaultConfig::NONE);
    let n = Arc::new(Nic::new("echo", link, Duration::from_micros(50)).unwrap());
    n.start(FirmwareKind::Native).unwrap();
    let mut raw = Link::new(2, Box::new(switch.port(2)), FaultConfig::NONE);
    let reply_to = |raw: &mut Link, req: &[u8]| -> Option<EchoRepr> {
        raw.send_packet(req, false).unwrap();
        let mut buf = [0u8; 256];
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(300) {
            if let Some(rx) = raw.poll_packet(&mut buf) {
                return Some(EchoRepr::parse(&buf[..rx.len]).expect("a well-formed reply"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    };
    let req = EchoRepr { op: Op::Request, src: 2, dst: 1, id: 9, seq: 5 };
    let reply = reply_to(&mut raw, &req.emit()).expect("the NIC answers a good request");
    assert_eq!(reply, EchoRepr { op: Op::Reply, src: 1, dst: 2, ..req });

    let good = req.emit();
    let mut long = [0u8; ECHO_BYTES + 8];
    long[..ECHO_BYTES].copy_from_slice(&good);
    let mut version = good;
    version[2] = 9;
    let mut op = good;
    op[3] = 7;
    let claims_3 = EchoRepr { src: 3, ..req }.emit();
    for bad in [&long[..], &version[..], &op[..], &claims_3[..]] {
        assert_eq!(reply_to(&mut raw, bad), None, "a malformed echo was answered");
    }
    let st = n.status();
    assert_eq!((st.echo.requests_answered, st.echo.malformed), (1, 4), "{:?}", st.echo);
    let fw = |name: &str| st.counters.iter().find(|c| c.0 == name).map_or(0, |c| c.1);
    assert_eq!((fw("rx_packets"), fw("rx_drop_malformed")), (0, 0), "an echo reached the firmware");
    assert!(n.is_running());
}
