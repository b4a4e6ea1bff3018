// SPDX-License-Identifier: GPL-2.0-only
//! One `gmsd` process and its control socket under bad input: malformed and oversized
//! requests get error replies (or a hang-up), never a crash; a node alone has no put
//! target; bad command lines are refused with a message naming the problem.

use gms::prelude::PageId;
use gmsd::client::Client;
use gmsd::proto::{
    read_frame, reply_body, write_frame, GetOutcome, MissWhy, PeerState, PutOutcome, Request, MAX_FRAME_BYTES,
};
use std::io::Write;
use std::net::UdpSocket;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn gmsd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gmsd"))
}

/// A port with the next one free too.
fn ports() -> u16 {
    for _ in 0..100 {
        let p = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if p < u16::MAX - 2
            && UdpSocket::bind(("127.0.0.1", p + 1)).is_ok()
            && UdpSocket::bind(("127.0.0.1", p + 2)).is_ok()
        {
            return p;
        }
    }
    panic!("no free UDP ports");
}

fn raw_call(sock: &std::path::Path, body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write_frame(&mut s, body)?;
    read_frame(&mut s)
}

#[test]
fn bad_requests_get_errors_and_the_daemon_lives_on() {
    let dir = std::env::temp_dir().join(format!("gmsd-control-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("g.sock");
    let p = ports();
    // A peer that never answers: the node ends up alone once it is declared dead.
    let child = gmsd()
        .args(["--node", "0", "--listen", &format!("127.0.0.1:{p}"), "--peer", &format!("1=127.0.0.1:{}", p + 10)])
        .args(["--budget-mb", "1", "--dead-after-ms", "200", "--socket"])
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gmsd");
    let _d = Daemon(child, dir.clone());
    let t0 = Instant::now();
    let mut c = loop {
        if let Ok(c) = Client::connect(&sock) {
            break c;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "gmsd did not open {}", sock.display());
        std::thread::sleep(Duration::from_millis(20));
    };
    let s = c.stat().expect("stat");
    assert_eq!((s.node, s.nodes.len()), (0, 2));
    assert_eq!(s.nodes[0].budget, 128, "1 MiB = 128 pages of 8 KiB");

    // Garbage: an unknown op, a truncated put, trailing bytes.
    let e = reply_body(&raw_call(&sock, &[42]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("unknown request op 42"), "{e}");
    let mut put = Request::Put(vec![(PageId::new(1, 1), vec![1; 100])]).encode();
    put.truncate(put.len() - 10);
    let e = reply_body(&raw_call(&sock, &put).unwrap()).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
    let e = reply_body(&raw_call(&sock, &[3, 0]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("stray bytes"), "{e}");
    // An oversized length: an error, then the daemon hangs up.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&(MAX_FRAME_BYTES as u32 + 1).to_le_bytes()).unwrap();
    let e = reply_body(&read_frame(&mut s).unwrap()).unwrap_err().to_string();
    assert!(e.contains("exceeds"), "{e}");
    assert!(read_frame(&mut s).is_err(), "the connection is closed");
    // A client that leaves mid-request does not disturb the others.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&[100, 0, 0, 0, 1, 2]).unwrap();
    drop(s);

    // The silent peer was never heard: never a member (nor declared dead), so the node is
    // alone: no put target; gets miss.
    let s = c.stat().unwrap();
    assert_eq!(s.members, [0]);
    assert_eq!((s.nodes[1].state, s.nodes[1].alive), (PeerState::NeverHeard, false), "{:?}", s.nodes);
    assert_eq!(c.put(PageId::new(1, 1), &[7; 10]).unwrap(), PutOutcome::NoTarget);
    assert_eq!(c.get_many(&[PageId::new(1, 1)], true).unwrap(), vec![GetOutcome::Miss(MissWhy::Alone)]);
    assert_eq!(c.get(PageId::new(1, 2)).unwrap(), GetOutcome::Miss(MissWhy::Alone));
    assert!(c.put(PageId::new(1, 3), &[0; 8193]).unwrap_err().to_string().contains("exceed the page size"));
    let s = c.stat().expect("stat after all that");
    assert_eq!((s.gets, s.misses, s.failures_detected), (2, 2, 0));

    // A second daemon on the same socket is refused; the first keeps serving.
    let out = gmsd()
        .args(["--node", "5", "--listen", &format!("127.0.0.1:{}", p + 2), "--budget-mb", "1", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is in use: a gmsd daemon"), "{out:?}");
    assert!(c.stat().is_ok());
}

#[test]
fn bad_command_lines_are_refused_clearly() {
    // A refused command line exits at once; one accepted by mistake would run for good,
    // so it is killed after 20 s and the test fails instead of hanging.
    let run = |args: &[&str]| {
        use std::io::Read;
        let mut child = gmsd()
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run gmsd");
        let t = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for gmsd") {
                break s;
            }
            if t.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} was accepted: gmsd still running after 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!status.success(), "{args:?} was accepted");
        let mut err = String::new();
        child.stderr.take().expect("stderr piped").read_to_string(&mut err).expect("read gmsd's stderr");
        err
    };
    let base = ["--node", "0", "--listen", "127.0.0.1:7000"];
    let with =
        |extra: &[&'static str]| -> Vec<&'static str> { base.iter().copied().chain(extra.iter().copied()).collect() };
    assert!(run(&with(&["--budget-mb", "8", "--peer", "x=1"])).contains("is not a number"));
    assert!(run(&with(&["--budget-mb", "8", "--peer", "1=localhost:7"])).contains("not an IP:PORT"));
    assert!(run(&with(&["--budget-mb", "70000", "--peer", "1=127.0.0.1:7010"])).contains("not in 1..=65536"));
    assert!(run(&with(&["--budget-mb", "8", "--directory-mb", "0"])).contains("--directory-mb"));
    assert!(run(&with(&["--budget-mb", "0"])).contains("--budget-mb"));
    assert!(run(&with(&["--budget-mb", "8", "--peer", "0=127.0.0.1:7010"])).contains("own id"));
    assert!(run(&with(&["--budget-mb", "8", "--peer", "1=127.0.0.1:7010", "--peer", "1=127.0.0.1:7020"]))
        .contains("given twice"));
    assert!(run(&["--node", "0", "--budget-mb", "8"]).contains("--listen"));
    assert!(run(&with(&["--budget-mb", "8", "--link-faults", "delay=5"])).contains("no unit"));
    assert!(run(&with(&["--budget-mb", "8", "--link-faults", "lose=1%"])).contains("unknown fault"));
}
