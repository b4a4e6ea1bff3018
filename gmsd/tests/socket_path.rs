// SPDX-License-Identifier: GPL-2.0-only
//! Where `gmsd` listens and what `gms` connects to, as a user meets them: an explicit
//! `--socket` in a missing directory is refused and nothing is created, one in a directory
//! every user can write without the sticky bit is refused, a file that is not a socket is
//! never replaced; NICs and daemons that share a socket directory are told apart by their
//! sockets' type; `gms` says a path is not a socket rather than "a daemon that died". Also
//! `--version`.

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/process.rs"]
mod process;
#[path = "support/scratch.rs"]
mod scratch;
use scratch::Dir;

/// A daemon killed when the test ends, pass or fail.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `cmd` to completion within 10 s (killed and a test failure otherwise: a daemon
/// that should have been refused would run on).
fn run(cmd: Command) -> Output {
    process::run(cmd, Duration::from_secs(10))
}

fn port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `gmsd` for node 0 on a free port with one (absent) peer, listening at `sock`.
fn gmsd(sock: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gmsd"));
    c.args(["--node", "0", "--listen", &format!("127.0.0.1:{}", port()), "--budget-mb", "1"])
        .args(["--peer", &format!("1=127.0.0.1:{}", port()), "--socket"])
        .arg(sock);
    c
}

fn gms(sock: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gms"));
    c.arg("--socket").arg(sock).args(args);
    run(c)
}

/// `gmsd` at `sock` is refused: its stderr.
fn refused(sock: &Path) -> String {
    let out = run(gmsd(sock));
    assert!(!out.status.success(), "gmsd --socket {} was accepted", sock.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_socket_in_a_missing_directory_is_refused_and_nothing_is_created() {
    let dir = Dir::new("missing");
    let sock = dir.join("no/such/x.sock");
    let e = refused(&sock);
    assert!(e.contains("does not exist") && e.contains("mkdir -m 0700") && e.contains("no/such/x.sock"), "{e}");
    assert!(!dir.join("no").exists(), "gmsd created a directory for --socket");
}

#[test]
fn a_directory_anyone_can_write_needs_the_sticky_bit() {
    let dir = Dir::new("open");
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = open.join("g.sock");
    let e = refused(&sock);
    assert!(e.contains("0777") && e.contains("sticky") && e.contains("chmod +t"), "{e}");
    assert!(!sock.exists());
    // Sticky (as /tmp is): accepted. Its start-up line counts its one peer in words.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = dir.join("gmsd.out");
    let child = gmsd(&sock).stdout(std::fs::File::create(&out).unwrap()).stderr(Stdio::null()).spawn();
    let _d = Daemon(child.expect("spawn gmsd"));
    let t0 = Instant::now();
    while !gms(&sock, &["--timeout-s", "5", "stat"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(20), "gmsd in a sticky directory never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = std::fs::read_to_string(&out).unwrap();
    assert!(line.contains("(1 peer), control socket"), "{line}");
}

/// A regular file is neither replaced by `gmsd` nor taken for a dead daemon's socket by
/// `gms`.
#[test]
fn a_file_that_is_not_a_socket_is_named_so_and_left_alone() {
    let dir = Dir::new("file");
    let file = dir.join("page.bin");
    std::fs::write(&file, b"precious").unwrap();
    let e = refused(&file);
    assert!(e.contains("page.bin exists and is not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    let out = gms(&file, &["stat"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("page.bin is not a socket but a regular file") && !e.contains("died"), "{e}");
    let out = gms(&dir.0, &["stat"]);
    assert!(stderr(&out).contains("is not a socket but a directory"), "{}", stderr(&out));
}

/// A NIC's control socket (`SOCK_SEQPACKET`) where gmsd's is expected: gmsd will not take
/// it over and gms does not take it for a daemon.
#[test]
fn a_nic_socket_is_told_from_a_daemon() {
    let dir = Dir::new("nic");
    let sock = dir.join("gmsd-0.sock");
    let _nic = trapeze_vnic::fdpass::listen(&sock, rustix::net::SocketType::SEQPACKET).unwrap();
    let e = refused(&sock);
    assert!(e.contains("in use by something else: a NIC is serving it"), "{e}");
    let out = gms(&sock, &["stat"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("is not a gmsd control socket") && e.contains("NIC"), "{e}");
    // A live daemon's socket is refused as such.
    let stream = dir.join("other.sock");
    let _l = UnixListener::bind(&stream).unwrap();
    let e = refused(&stream);
    assert!(e.contains("in use: a gmsd daemon"), "{e}");
}

#[test]
fn version_is_printed() {
    for bin in [env!("CARGO_BIN_EXE_gms"), env!("CARGO_BIN_EXE_gmsd")] {
        let mut c = Command::new(bin);
        c.arg("--version");
        let out = run(c);
        assert!(out.status.success(), "{bin} --version: {}", stderr(&out));
        let v = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(v.trim_end().ends_with(env!("CARGO_PKG_VERSION")), "{bin}: {v}");
    }
}
