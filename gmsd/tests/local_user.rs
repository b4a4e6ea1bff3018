// SPDX-License-Identifier: GPL-2.0-only
//! Another local user against a running `gmsd`: its control socket refuses them at the
//! socket file's mode (0600) and, with the mode loosened by the test, at the
//! peer-credential check; the daemon's own user is still served. The other user is
//! `nobody` (uid/gid 65534), taken on by one thread of the test (`setresuid` per thread).

use gmsd::client::Client;
use gmsd::proto::{write_frame, Request};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

#[test]
#[ignore = "needs: root"]
fn another_user_cannot_use_the_control_socket() {
    assert!(rustix::process::geteuid().is_root(), "this test needs root (to act as uid {NOBODY})");
    let dir = std::env::temp_dir().join(format!("gmsd-local-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    // Reachable by others, so only the socket's own protection is tested.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (sock, log) = (dir.join("g.sock"), dir.join("gmsd.log"));
    let p = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gmsd"))
        .args(["--node", "0", "--listen", &format!("127.0.0.1:{p}"), "--budget-mb", "1", "--socket"])
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn gmsd");
    let result = std::panic::catch_unwind(|| {
        let t0 = Instant::now();
        let mut c = loop {
            if let Ok(c) = Client::connect(&sock) {
                break c;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "gmsd did not open {}", sock.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o7777, 0o600, "socket mode");

        let s = sock.clone();
        let refused = as_nobody(move || UnixStream::connect(&s).map(drop).unwrap_err());
        assert_eq!(refused.kind(), ErrorKind::PermissionDenied, "{refused}");

        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        let s = sock.clone();
        let got = as_nobody(move || {
            let mut st = UnixStream::connect(&s).expect("connect to the 0666 socket");
            st.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // The daemon may have closed already: a failed write is as good as no answer.
            let _ = write_frame(&mut st, &Request::Stat.encode());
            let mut buf = Vec::new();
            match st.read_to_end(&mut buf) {
                Ok(_) => buf.len(),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => buf.len(),
                Err(e) => panic!("gmsd neither answered nor closed: {e}"),
            }
        });
        assert_eq!(got, 0, "gmsd answered another user with {got} bytes");

        assert_eq!(c.stat().expect("stat by the daemon's own user").node, 0);
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(log.contains(&format!("refused a connection from uid {NOBODY}")), "gmsd's log:\n{log}");
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
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
