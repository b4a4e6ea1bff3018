// SPDX-License-Identifier: GPL-2.0-only
//! Another local user against a running `trapeze-nic`: its control and ivshmem sockets
//! refuse them at the socket file's mode (0600) and, with the mode loosened by the test,
//! at the peer-credential check; a squatted or world-writable default socket directory
//! is refused with an error naming it.
//!
//! The other user is `nobody` (uid/gid 65534): a thread of this test drops its own
//! credentials to it (`setresuid` on the thread alone, which the kernel allows per
//! thread), so its `connect(2)` is checked and recorded (`SO_PEERCRED`) as that user's.

use rustix::net::SocketType;
use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trapeze_vnic::control::{ControlClient, Request};
use trapeze_vnic::fdpass::{connect, recv_with_fds, send_with_fds};

const NOBODY: u32 = 65534;

/// Kills the NIC and removes the scratch directory, whatever happens.
struct Nic {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Drop for Nic {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trapeze-local-user-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    d
}

fn nic_command() -> Command {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut c = Command::new(env!("CARGO_BIN_EXE_trapeze-nic"));
    c.args(["--name", "lu", "--node", "0", "--link", &format!("udp:127.0.0.1:{port}")]);
    c
}

/// A NIC with its control and ivshmem sockets in `dir` (mode 0755, so another user can
/// reach the socket files and only their own protection is tested).
fn start_nic(dir: &Path) -> (Nic, PathBuf, PathBuf) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ctl, ivs, log) = (dir.join("ctl.sock"), dir.join("ivs.sock"), dir.join("nic.log"));
    let child = nic_command()
        .arg("--control")
        .arg(&ctl)
        .arg("--ivshmem")
        .arg(&ivs)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawning trapeze-nic");
    let nic = Nic { child, dir: dir.to_path_buf(), log };
    let t0 = Instant::now();
    while ControlClient::connect(&ctl).is_err() || !ivs.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "trapeze-nic did not open its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    (nic, ctl, ivs)
}

/// Run `f` on a thread whose credentials are `nobody`'s (no supplementary groups).
fn as_nobody<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    use rustix::process::{Gid, Uid};
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    std::thread::spawn(move || {
        let (u, g) = (Uid::from_raw(NOBODY), Gid::from_raw(NOBODY));
        set_thread_groups(&[]).expect("dropping supplementary groups");
        set_thread_res_gid(g, g, g).expect("setresgid(nobody)");
        set_thread_res_uid(u, u, u).expect("setresuid(nobody)");
        assert_eq!(rustix::process::geteuid().as_raw(), NOBODY, "the thread did not become nobody");
        f()
    })
    .join()
    .expect("the nobody thread panicked")
}

fn readable(fd: impl AsFd, ms: i64) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let ts = rustix::event::Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

/// What a connection gets before it ends: bytes and descriptors until end of file. A
/// server that neither answers nor closes within 5 s fails the test.
fn everything_until_eof(sock: &OwnedFd) -> (usize, usize) {
    let (mut bytes, mut fds) = (0, 0);
    let mut buf = [0u8; 4096];
    loop {
        assert!(readable(sock, 5000), "the server neither answered nor closed within 5 s");
        match recv_with_fds(sock.as_fd(), &mut buf) {
            Ok((0, f)) => return (bytes, fds + f.len()),
            Ok((n, f)) => {
                bytes += n;
                fds += f.len();
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (bytes, fds),
            Err(e) => panic!("reading from the server: {e}"),
        }
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

fn assert_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (to act as uid {NOBODY}); `cargo xtask test` runs it as root"
    );
}

#[test]
#[ignore = "needs: root"]
fn another_user_cannot_connect_to_the_control_or_ivshmem_socket() {
    assert_root();
    let (nic, ctl, ivs) = start_nic(&scratch("sock"));
    assert_eq!(mode(&ctl), 0o600, "control socket mode");
    assert_eq!(mode(&ivs), 0o600, "ivshmem socket mode");

    // Layer 1: the socket file's mode refuses the connect itself.
    let (c, i) = (ctl.clone(), ivs.clone());
    let (ctl_err, ivs_err) = as_nobody(move || {
        (
            connect(&c, SocketType::SEQPACKET).map(drop).unwrap_err(),
            connect(&i, SocketType::STREAM).map(drop).unwrap_err(),
        )
    });
    assert_eq!(ctl_err.kind(), ErrorKind::PermissionDenied, "control socket: {ctl_err}");
    assert_eq!(ivs_err.kind(), ErrorKind::PermissionDenied, "ivshmem socket: {ivs_err}");

    // Layer 2: with the files loosened to 0666 the connects succeed, and the peer check
    // closes each connection before anything is served: no answer to a status request,
    // no ivshmem message, no descriptor (the NIC memory's memfd never leaves).
    for p in [&ctl, &ivs] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let (c, i) = (ctl.clone(), ivs.clone());
    let (ctl_got, ivs_got) = as_nobody(move || {
        let s = connect(&c, SocketType::SEQPACKET).expect("connect to the 0666 control socket");
        let req = serde_json::to_vec(&Request::Status).unwrap();
        // The server may already have closed: a failed send is as good as no answer.
        let _ = send_with_fds(s.as_fd(), &req, &[]);
        let ctl_got = everything_until_eof(&s);
        let s = connect(&i, SocketType::STREAM).expect("connect to the 0666 ivshmem socket");
        (ctl_got, everything_until_eof(&s))
    });
    assert_eq!(ctl_got, (0, 0), "the control socket served another user (bytes, descriptors)");
    assert_eq!(ivs_got, (0, 0), "the ivshmem socket served another user (bytes, descriptors)");

    // The NIC's own user still gets through, on both sockets.
    let st = ControlClient::connect(&ctl).unwrap().request(&Request::Status).unwrap();
    assert_eq!(st["status"]["name"], "lu", "{st}");
    let s = connect(&ivs, SocketType::STREAM).unwrap();
    assert!(readable(&s, 5000), "the ivshmem server did not greet its own user");
    let mut b = [0u8; 8];
    assert_eq!(recv_with_fds(s.as_fd(), &mut b).unwrap().0, 8);
    assert_eq!(i64::from_le_bytes(b), 0, "protocol version message");
    drop(s);

    let log = std::fs::read_to_string(&nic.log).unwrap();
    let refusals = log.matches(&format!("refused a connection from uid {NOBODY}")).count();
    assert_eq!(refusals, 2, "the NIC's log should name both refusals:\n{log}");
}

#[test]
#[ignore = "needs: root"]
fn a_default_socket_directory_owned_by_another_user_is_refused() {
    assert_root();
    let dir = scratch("squat");
    let squatted = dir.join("trapeze");
    std::fs::create_dir(&squatted).unwrap();
    std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&squatted, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = nic_command().env("XDG_RUNTIME_DIR", &dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "trapeze-nic used a squatted directory: {err}");
    assert!(err.contains(&squatted.display().to_string()) && err.contains(&format!("uid {NOBODY}")), "{err}");
    assert!(!squatted.join("lu.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_world_writable_or_symlinked_default_socket_directory_is_refused() {
    let dir = scratch("open");
    let open = dir.join("trapeze");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = nic_command().env("XDG_RUNTIME_DIR", &dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "trapeze-nic used a 0777 directory: {err}");
    assert!(err.contains(&open.display().to_string()) && err.contains("0777"), "{err}");
    assert!(!open.join("lu.sock").exists());

    std::fs::remove_dir(&open).unwrap();
    let elsewhere = scratch("open-target");
    std::os::unix::fs::symlink(&elsewhere, &open).unwrap();
    let out = nic_command().env("XDG_RUNTIME_DIR", &dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "trapeze-nic followed a symlinked directory: {err}");
    assert!(err.contains(&open.display().to_string()) && err.contains("symbolic link"), "{err}");
    assert!(!elsewhere.join("lu.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&elsewhere);
}

#[test]
fn a_missing_default_socket_directory_is_made_private() {
    let dir = scratch("fresh");
    let log = dir.join("nic.log");
    let child = nic_command()
        .env("XDG_RUNTIME_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let nic = Nic { child, dir: dir.clone(), log };
    let sock = dir.join("trapeze").join("lu.sock");
    let t0 = Instant::now();
    while ControlClient::connect(&sock).is_err() {
        let log = std::fs::read_to_string(&nic.log).unwrap_or_default();
        assert!(t0.elapsed() < Duration::from_secs(20), "no control socket at {}:\n{log}", sock.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mode(&dir.join("trapeze")), 0o700);
    assert_eq!(mode(&sock), 0o600);
}

#[test]
fn a_control_socket_serves_a_bounded_number_of_connections() {
    use std::sync::Arc;
    use trapeze_vnic::control::{serve, MAX_CONNECTIONS};
    use trapeze_vnic::link::backend::InProcSwitch;
    use trapeze_vnic::link::{FaultConfig, Link};
    let dir = scratch("bound");
    let link = Link::new(0, Box::new(InProcSwitch::new().port(0)), FaultConfig::default());
    let nic = Arc::new(trapeze_vnic::nic::Nic::new("lu-bound", link, Duration::ZERO).unwrap());
    let server = serve(nic, &dir.join("ctl.sock")).unwrap();
    let held: Vec<ControlClient> = (0..MAX_CONNECTIONS)
        .map(|_| {
            let c = ControlClient::connect(server.path()).unwrap();
            c.request(&Request::Status).expect("a connection within the bound is served");
            c
        })
        .collect();
    let over = ControlClient::connect(server.path()).unwrap();
    let e = format!("{:#}", over.request(&Request::Status).unwrap_err());
    assert!(e.contains(&format!("already serves {MAX_CONNECTIONS} control connections")), "{e}");
    drop(held);
    // Closed connections make room again (their threads end within a poll period).
    let t0 = Instant::now();
    while ControlClient::connect(server.path()).and_then(|c| c.request(&Request::Status)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no room after the held connections closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
