// SPDX-License-Identifier: GPL-2.0-only
//! Two `trapeze-nic` processes on a UDP link, each with a host in this process attached
//! through the control socket: traffic across processes, one host per NIC, reflashing
//! over the socket (the firmware's build id visible in status), and a bad image refused
//! without disturbing the running firmware.

mod common;

use common::{data, image_bytes};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::entry::rx_flags;
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_node::host::HostPort;
use trapeze_vnic::control::{ControlClient, Request};

/// Kills the NIC processes and removes the scratch directory, whatever happens.
struct Procs {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_nics(dir: &Path) -> (Procs, [PathBuf; 2]) {
    let ports = [free_udp_port(), free_udp_port()];
    let socks = [dir.join("n0.sock"), dir.join("n1.sock")];
    let mut children = Vec::new();
    for i in 0..2 {
        children.push(
            Command::new(env!("CARGO_BIN_EXE_trapeze-nic"))
                .args(["--name", &format!("n{i}"), "--node", &i.to_string()])
                .args(["--link", &format!("udp:127.0.0.1:{}", ports[i])])
                .args(["--peer", &format!("{}=127.0.0.1:{}", 1 - i, ports[1 - i])])
                .arg("--control")
                .arg(&socks[i])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning trapeze-nic"),
        );
    }
    let procs = Procs { children, dir: dir.to_path_buf() };
    let t0 = Instant::now();
    while !socks.iter().all(|s| ControlClient::connect(s).is_ok()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "trapeze-nic did not open its control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    (procs, socks)
}

fn attach(sock: &Path) -> HostPort {
    HostPort::attach(sock, 4 << 20, EndpointConfig::default()).expect("host attaches")
}

fn exchange(a: &mut HostPort, b: &mut HostPort, id: u32) {
    let d = data(id, 8192);
    let token = b.arm(8192, 1).unwrap();
    a.send(1, &id.to_le_bytes(), &d, token, 0).unwrap();
    let m = b.recv(Duration::from_secs(10)).expect("IPT message across processes");
    assert!(m.flags & rx_flags::IPT != 0 && m.payload == d && m.ctrl == id.to_le_bytes());
    b.send(0, &(id + 1).to_le_bytes(), &d[..4096], PayloadToken::NONE, 0).unwrap();
    let m = a.recv(Duration::from_secs(10)).expect("unsolicited reply across processes");
    assert!(m.flags == 0 && m.payload == d[..4096]);
}

fn status(sock: &Path) -> serde_json::Value {
    ControlClient::connect(sock).unwrap().request(&Request::Status).unwrap()["status"].clone()
}

#[test]
#[ignore = "needs: riscv32 target"]
fn nic_processes_exchange_attach_and_reflash() {
    let dir = std::env::temp_dir().join(format!("trapeze-proc-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_procs, socks) = start_nics(&dir);
    {
        let (mut a, mut b) = (attach(&socks[0]), attach(&socks[1]));
        exchange(&mut a, &mut b, 10);
        // One host per NIC: a second attach is refused with a clear error.
        let err = HostPort::attach(&socks[0], 1 << 20, EndpointConfig::default()).err().expect("second attach refused");
        assert!(format!("{err:#}").contains("already has a host"), "{err:#}");
        assert_eq!(status(&socks[0])["mode"], "native");
    }
    // A host that leaves leaves its NIC halted (nothing of its rings or IPT acted on).
    let t0 = std::time::Instant::now();
    while status(&socks[0])["fw_state"] != "Halted" {
        assert!(t0.elapsed() < Duration::from_secs(5), "NIC not halted after its host left: {}", status(&socks[0]));
        std::thread::sleep(Duration::from_millis(10));
    }
    // Flash both NICs through their control sockets.
    let image = image_bytes();
    let path = dir.join("trapeze-fw.elf");
    std::fs::write(&path, &image).unwrap();
    let info = trapeze_vnic::image::check_image(&image).unwrap();
    for s in &socks {
        let v =
            ControlClient::connect(s).unwrap().request(&Request::Load { path: path.display().to_string() }).unwrap();
        assert_eq!(v["status"]["mode"], "flashed", "{v}");
        assert_eq!(v["status"]["fw_state"], "Ready");
        assert_eq!(v["status"]["fw_build_id"], format!("{:08x}", info.build_id));
    }
    // Each image's boot line names its NIC's node (it once said node 0 on every NIC).
    for (node, s) in socks.iter().enumerate() {
        let t0 = std::time::Instant::now();
        let want = format!("ready: node {node},");
        while !status(s)["log"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x.as_str().is_some_and(|x| x.contains(&want))))
        {
            assert!(t0.elapsed() < Duration::from_secs(5), "no {want:?} in the log: {}", status(s)["log"]);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // A reload resets the firmware's rings: hosts attach anew.
    let (mut a, mut b) = (attach(&socks[0]), attach(&socks[1]));
    exchange(&mut a, &mut b, 20);
    // A bad image is refused and the running firmware is undisturbed.
    let bad = dir.join("bad.elf");
    let mut corrupt = image.clone();
    corrupt.truncate(image.len() / 3);
    std::fs::write(&bad, &corrupt).unwrap();
    let before = status(&socks[0]);
    let err = ControlClient::connect(&socks[0])
        .unwrap()
        .request(&Request::Load { path: bad.display().to_string() })
        .expect_err("corrupt image refused");
    assert!(!format!("{err:#}").is_empty());
    let after = status(&socks[0]);
    assert_eq!(after["mode"], "flashed");
    assert_eq!(after["fw_build_id"], before["fw_build_id"]);
    assert_eq!(after["fw_state"], "Ready");
    exchange(&mut a, &mut b, 30);
    // Reset restarts the same firmware; hosts attach anew and traffic flows. Each NIC
    // halts when its host leaves, on that connection's thread: a reset or an attach sent
    // before that halt is done would be undone by it, so wait for it (bounded).
    drop((a, b));
    for sock in &socks {
        let t = std::time::Instant::now();
        while status(sock)["mode"] != "halted" {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "{}: not halted after its host left",
                sock.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let v = ControlClient::connect(&socks[1]).unwrap().request(&Request::Reset).unwrap();
    assert_eq!(v["status"]["mode"], "flashed");
    assert_eq!(v["status"]["fw_state"], "Ready");
    assert_eq!(v["status"]["fw_build_id"], format!("{:08x}", info.build_id));
    let (mut a, mut b) = (attach(&socks[0]), attach(&socks[1]));
    exchange(&mut a, &mut b, 40);
}
