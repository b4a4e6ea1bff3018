// SPDX-License-Identifier: GPL-2.0-only
//! The cluster key from end to end: key files are refused unless owner-only, of this
//! user and 32 bytes long, `trapeze-nic keygen` makes a good one and never overwrites,
//! `trapeze-nic --key` refuses a bad one before starting, and two NICs under the same key
//! exchange messages while NICs under different keys deliver nothing and count it in the
//! link statistics their status reports.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_node::testbed::{self, Options};
use trapeze_vnic::key::{ClusterKey, KEY_BYTES};

const NIC: &str = env!("CARGO_BIN_EXE_trapeze-nic");

/// A scratch directory, removed at the end whatever happens.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("trapeze-key-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn refusal(path: &Path) -> String {
    format!("{:#}", ClusterKey::load(path).expect_err("the key file is refused"))
}

#[test]
fn key_files_must_be_owner_only_and_32_bytes() {
    let s = Scratch::new("files");
    let p = s.0.join("k");
    write(&p, &[7; KEY_BYTES], 0o600);
    assert_eq!(ClusterKey::load(&p).unwrap(), ClusterKey::from_bytes([7; KEY_BYTES]));
    write(&p, &[7; KEY_BYTES], 0o400);
    assert!(ClusterKey::load(&p).is_ok(), "read-only for its owner is fine");
    // Who else may do what, said as the mode says it.
    for (mode, who) in [
        (0o644, "its group may read it; other users may read it"),
        (0o640, "its group may read it;"),
        (0o604, "other users may read it;"),
        (0o660, "its group may read and change it;"),
        (0o602, "other users may change it;"),
        (0o610, "its group may execute it;"),
    ] {
        write(&p, &[7; KEY_BYTES], mode);
        let e = refusal(&p);
        assert!(e.contains(&p.display().to_string()) && e.contains(&format!("{mode:04o}: {who}")), "{e}");
        assert!(e.contains("chmod 600"), "says what to do: {e}");
    }
    for len in [0, 16, 31, 33, 64] {
        write(&p, &vec![7; len], 0o600);
        let e = refusal(&p);
        assert!(e.contains(&format!("holds {len} bytes, not 32")) && e.contains("keygen"), "{e}");
    }
    let e = refusal(&s.0.join("missing"));
    assert!(e.contains("missing"), "{e}");
    std::fs::create_dir(s.0.join("dir")).unwrap();
    std::fs::set_permissions(s.0.join("dir"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(refusal(&s.0.join("dir")).contains("not a regular file"));
    // A symbolic link is not followed: the file's own checks could not be trusted.
    write(&p, &[7; KEY_BYTES], 0o600);
    std::os::unix::fs::symlink(&p, s.0.join("link")).unwrap();
    assert!(ClusterKey::load(&s.0.join("link")).is_err());
}

#[test]
#[ignore = "needs: root"]
fn a_key_file_of_another_user_is_refused() {
    assert!(rustix::process::geteuid().is_root(), "needs root (to give the file away)");
    let s = Scratch::new("owner");
    let p = s.0.join("k");
    write(&p, &[7; KEY_BYTES], 0o600);
    std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
    let e = refusal(&p);
    assert!(e.contains("owned by uid 65534") && e.contains(&p.display().to_string()), "{e}");
}

#[test]
fn keygen_writes_a_fresh_owner_only_key_and_never_overwrites() {
    let s = Scratch::new("keygen");
    let p = s.0.join("cluster.key");
    let out = Command::new(NIC).arg("keygen").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.permissions().mode() & 0o777, md.len()), (0o600, KEY_BYTES as u64));
    let first = ClusterKey::load(&p).unwrap();
    assert_ne!(first, ClusterKey::from_bytes([0; KEY_BYTES]));
    let out = Command::new(NIC).arg("keygen").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already exists") && err.contains("cluster.key"), "{err}");
    assert_eq!(ClusterKey::load(&p).unwrap(), first, "the key file was changed");
    // Another key differs.
    let q = s.0.join("other.key");
    assert!(Command::new(NIC).arg("keygen").arg(&q).output().unwrap().status.success());
    assert_ne!(ClusterKey::load(&q).unwrap(), first);
}

#[test]
fn trapeze_nic_refuses_a_bad_key_file_before_starting() {
    let s = Scratch::new("cli");
    let p = s.0.join("k");
    write(&p, &[1; KEY_BYTES], 0o644);
    let out = Command::new(NIC)
        .args(["--name", "keytest", "--node", "0", "--link", "udp:127.0.0.1:0", "--key"])
        .arg(&p)
        .arg("--control")
        .arg(s.0.join("c.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mode 0644") && err.contains(&p.display().to_string()), "{err}");
    assert!(!s.0.join("c.sock").exists(), "a socket was made before the key was checked");
}

const T: Duration = Duration::from_secs(10);

fn keyed_cluster(keys: [u8; 2]) -> Vec<testbed::Node> {
    let opt =
        Options { keys: keys.map(|k| Some(ClusterKey::from_bytes([k; KEY_BYTES]))).to_vec(), ..Options::default() };
    testbed::cluster(2, Mode::Native, LinkKind::Udp, &opt).expect("testbed starts")
}

#[test]
fn nics_with_the_same_key_talk_and_with_different_keys_count_rejections() {
    let mut n = keyed_cluster([3, 3]);
    for (from, to) in [(0usize, 1usize), (1, 0)] {
        let d = data(from as u32, 8192);
        n[from].host.send(to as u16, &[0x11; 32], &d, PayloadToken::NONE, 0).unwrap();
        let m = n[to].host.recv(T).expect("delivered under the same key");
        assert!(m.payload == d);
    }
    assert_eq!(n[1].nic.status().link.mac_rejected, 0);

    let mut n = keyed_cluster([3, 4]);
    for i in 0..4 {
        n[0].host.send(1, &[0x22; 32], &data(i, 8192), PayloadToken::NONE, 0).unwrap();
    }
    assert!(n[1].host.recv(Duration::from_millis(300)).is_none(), "a packet under another key was delivered");
    testbed::eventually("4 rejections counted", T, || n[1].nic.status().link.mac_rejected == 4);
    assert_eq!(counter(&n[1], "rx_packets"), 0, "the firmware saw a packet");
    // As `trapeze-nic status` reports it.
    let v = serde_json::to_value(n[1].nic.status()).unwrap();
    assert_eq!(v["link"]["mac_rejected"], 4);
}
