// SPDX-License-Identifier: GPL-2.0-only
//! `gmblockd` and `gmblock` as processes over the UDP link: `verify` writes, flushes and
//! reads back a pattern through each data path; the server's report on exit counts what
//! its NIC moved through host RAM.

use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn port() -> String {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

struct Daemon(Child);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(p: &std::path::Path) {
    let t = Instant::now();
    while !p.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn verify_through_both_paths_between_processes() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let vol = dir.join(format!("gmblock-cli-{}", std::process::id()));
    std::fs::File::create(&vol).unwrap().set_len(8 << 20).unwrap();
    for path in ["direct", "via-ram"] {
        let (s, c) = (port(), port());
        let stats = dir.join(format!("gmblock-cli-{}-{path}.json", std::process::id()));
        let _ = std::fs::remove_file(&stats);
        let d = Command::new(env!("CARGO_BIN_EXE_gmblockd"))
            .args(["--node", "1", "--listen", &s, "--peer", &format!("2={c}"), "--path", path])
            .arg("--export")
            .arg(&vol)
            .arg("--stats-json")
            .arg(&stats)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut d = Daemon(d);
        let out = Command::new(env!("CARGO_BIN_EXE_gmblock"))
            .args(["--node", "2", "--listen", &c, "--server", &format!("1={s}"), "verify", "--len", "4194304"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{path}: {text} {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("verified 4194304 bytes"), "{text}");
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(d.0.id() as i32).unwrap(),
            rustix::process::Signal::INT,
        )
        .unwrap();
        wait_for(&stats);
        assert!(d.0.wait().unwrap().success());
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        let host = r["nic_bytes"]["host_ram"].as_u64().unwrap();
        match path {
            "direct" => assert_eq!(host, 0, "{r}"),
            _ => assert_eq!(host, 2 * 4194304, "{r}"),
        }
        std::fs::remove_file(&stats).unwrap();
    }
    std::fs::remove_file(&vol).unwrap();
}

#[test]
fn export_names_a_missing_plugin() {
    let out = Command::new(env!("CARGO_BIN_EXE_gmblock"))
        .args(["--node", "2", "--listen", &port(), "--server", &format!("1={}", port())])
        .args(["export", "--plugin", "/nonexistent/libgmblock_nbdkit.so"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/libgmblock_nbdkit.so: no such plugin"), "{err}");
}

#[test]
fn bad_disk_models_are_refused_with_the_flag_named() {
    let cases = [
        ("--model-mbps", "0", "--model-mbps 0: must be a number above 0"),
        ("--model-mbps", "fast", "is not a number of MB/s"),
        ("--model-mbps", "-3", "--model-mbps -3"),
        ("--model-latency-us", "99999999", "--model-latency-us 99999999: at most"),
        ("--model-latency-us", "1.5", "is not a whole number of microseconds"),
    ];
    for (flag, value, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_gmblockd"))
            .args(["--node", "1", "--listen", &port(), "--export", "/nonexistent", &format!("{flag}={value}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{flag} {value}: {err}");
    }
}

#[test]
fn a_striped_verify_over_two_processes_one_with_a_modelled_disk() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let c = port();
    let mut daemons = Vec::new();
    let mut servers = Vec::new();
    for (node, model) in [("1", true), ("3", false)] {
        let vol = dir.join(format!("gmblock-cli-stripe-{node}-{}", std::process::id()));
        std::fs::File::create(&vol).unwrap().set_len(4 << 20).unwrap();
        let s = port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gmblockd"));
        cmd.args(["--node", node, "--listen", &s, "--peer", &format!("2={c}")]).arg("--export").arg(&vol);
        if model {
            cmd.args(["--model-mbps", "200", "--model-latency-us", "100"]);
        }
        daemons.push((Daemon(cmd.stdout(Stdio::null()).spawn().unwrap()), vol));
        servers.extend(["--server".to_string(), format!("{node}={s}")]);
    }
    let gmblock = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gmblock"))
            .args(["--node", "2", "--listen", &c])
            .args(&servers)
            .args(args)
            .output()
            .unwrap()
    };
    let out = gmblock(&["--grain", "32K", "info"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("size 8388608 bytes striped over 2 server(s) at a 32768-byte grain"), "{text}");
    let out = gmblock(&["verify", "--len", "8388608"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("verified 8388608 bytes"), "{text}");
    let out = gmblock(&["--grain", "36K", "info"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("grain 36864 with read-ahead"), "{err}");
    for (d, vol) in daemons {
        drop(d);
        std::fs::remove_file(vol).unwrap();
    }
}
