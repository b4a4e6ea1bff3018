// SPDX-License-Identifier: GPL-2.0-only
//! Idle NICs park: two `trapeze-nic` processes on a UDP link on 127.0.0.1 (with a cluster
//! key), no host attached, are left alone for a window of [`idle_window`] (10 s, to keep
//! the suite short; `IDLE_TEST_SECS=30` for the 30 s) and each must use under
//! [`LIMIT`] of a core over it. The measure is the CPU time each process spent (utime +
//! stime of `/proc/PID/stat`, every thread), not wall time: other load on the machine
//! barely changes it. An idle NIC's processor parks in `poll(2)` on its doorbells, link
//! and control eventfd (at most 100 ms), its control socket's thread in `poll(2)` on the
//! listener. After the window hosts attach and a message crosses each way: parked is
//! still awake to frames and doorbells.

mod common;

use common::data;
use common::idle::{cpu_time, idle_window, require_loopback, LIMIT};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_node::host::HostPort;
use trapeze_vnic::control::ControlClient;

/// The NIC processes (killed, logs printed on failure) and their scratch directory.
struct Nics {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Nics {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            for i in 0..self.children.len() {
                let log = self.dir.join(format!("nic{i}.log"));
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

fn start_nics(dir: &Path) -> (Nics, [PathBuf; 2]) {
    let key = dir.join("cluster.key");
    trapeze_vnic::key::ClusterKey::generate(&key).expect("a cluster key");
    let ports = free_udp_ports();
    let socks = [dir.join("nic0.sock"), dir.join("nic1.sock")];
    let mut nics = Nics { children: Vec::new(), dir: dir.to_path_buf() };
    for i in 0..2 {
        let log = std::fs::File::create(dir.join(format!("nic{i}.log"))).unwrap();
        nics.children.push(
            Command::new(env!("CARGO_BIN_EXE_trapeze-nic"))
                .args(["--name", &format!("nic{i}"), "--node", &i.to_string()])
                .args(["--link", &format!("udp:127.0.0.1:{}", ports[i])])
                .args(["--peer", &format!("{}=127.0.0.1:{}", 1 - i, ports[1 - i])])
                .arg("--key")
                .arg(&key)
                .arg("--control")
                .arg(&socks[i])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawning trapeze-nic"),
        );
    }
    let t0 = Instant::now();
    while !socks.iter().all(|s| ControlClient::connect(s).is_ok()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "trapeze-nic did not open its control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    (nics, socks)
}

/// One unsolicited message from `a` (node `from`) to `b`.
fn send(a: &mut HostPort, b: &mut HostPort, from: u16, id: u32) {
    let d = data(id, 4096);
    a.send(1 - from, &id.to_le_bytes(), &d, PayloadToken::NONE, 0).expect("send");
    let m = b.recv(Duration::from_secs(10)).expect("the message crosses the link");
    assert!(m.payload == d && m.ctrl == id.to_le_bytes(), "message {id} arrived changed");
}

#[test]
fn two_idle_nics_use_under_1_percent_of_a_core_each() {
    require_loopback();
    let dir = std::env::temp_dir().join(format!("trapeze-nic-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (nics, socks) = start_nics(&dir);
    // Start-up (the firmware's boot) is not idling.
    std::thread::sleep(Duration::from_secs(1));

    let window = idle_window();
    let pids: Vec<u32> = nics.children.iter().map(Child::id).collect();
    let before: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect();
    let t0 = Instant::now();
    std::thread::sleep(window);
    let after: Vec<Duration> = pids.iter().map(|&p| cpu_time(p)).collect();
    let wall = t0.elapsed();
    let used: Vec<f64> = before.iter().zip(&after).map(|(b, a)| (*a - *b).as_secs_f64() / wall.as_secs_f64()).collect();
    let shown: Vec<String> =
        used.iter().enumerate().map(|(i, u)| format!("trapeze-nic {i}: {:.2} % of a core", 100.0 * u)).collect();
    eprintln!("idle for {wall:.1?}: {}", shown.join(", "));

    // Parked, not gone: hosts attach and a message crosses each way.
    let attach = |s: &Path| HostPort::attach(s, 4 << 20, EndpointConfig::default()).expect("a host attaches");
    let (mut a, mut b) = (attach(&socks[0]), attach(&socks[1]));
    send(&mut a, &mut b, 0, 1);
    send(&mut b, &mut a, 1, 2);

    for (i, u) in used.iter().enumerate() {
        assert!(
            *u < LIMIT,
            "trapeze-nic {i} used {:.2} % of a core idle (limit {} %): {}",
            100.0 * u,
            100.0 * LIMIT,
            shown.join(", ")
        );
    }
}
