// SPDX-License-Identifier: GPL-2.0-only
//! What `gms` reads and writes: `put` reads at most a page and one byte of its input (a
//! file, or standard input for `--file -`) and refuses more before it connects to a
//! daemon; `get` writes a page's bytes to a pipe or a file, never to a terminal. A fake
//! daemon in the test (the real control protocol over a UNIX socket) answers the requests
//! that get that far, so what reached it can be checked byte for byte.

use gms::prelude::PageId;
use gmsd::proto::{
    encode_get_reply, encode_put_reply, read_frame, write_frame, GetOutcome, Nodes, PutOutcome, Request, Served,
    PAGE_BYTES,
};
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a `gms` run may take; an input read whole (`/dev/zero`) runs into it.
const LIMIT: Duration = Duration::from_secs(10);

#[path = "support/process.rs"]
mod process;
#[path = "support/scratch.rs"]
mod scratch;
use scratch::Dir;

/// `gms --socket SOCK ARGS` fed `stdin`, its stdout to `stdout` (a pipe if `None`), run
/// to completion within [`LIMIT`] (killed and a test failure otherwise).
fn gms(sock: &Path, args: &[&str], stdin: &[u8], stdout: Option<Stdio>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gms"));
    cmd.arg("--socket").arg(sock).args(args);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(stdout.unwrap_or_else(Stdio::piped))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gms");
    let mut feed = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    // A writer thread: gms may stop reading (and close the pipe) before taking it all.
    let feeder = std::thread::spawn(move || {
        let _ = feed.write_all(&input);
    });
    let out = process::wait_within(child, &cmd, LIMIT);
    let _ = feeder.join();
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A daemon stand-in at `sock` that serves one connection with one request: a put is
/// answered stored at node 1, a get with a hit of `page`. Returns the request it got.
fn fake_daemon(sock: &Path, page: Vec<u8>) -> JoinHandle<Request> {
    let l = UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        let (mut conn, _) = l.accept().unwrap();
        conn.set_read_timeout(Some(LIMIT)).unwrap();
        let req = Request::decode(&read_frame(&mut conn).unwrap()).unwrap();
        let reply = match &req {
            Request::Put(items) => encode_put_reply(
                &items.iter().map(|_| PutOutcome::Stored { targets: Nodes::new(&[1]), version: 7 }).collect::<Vec<_>>(),
            ),
            Request::Get { pages, .. } => encode_get_reply(
                &pages
                    .iter()
                    .map(|_| GetOutcome::Hit { version: 7, source: Served::TwoWay, data: page.clone() })
                    .collect::<Vec<_>>(),
            ),
            Request::Stat => panic!("the test asks no stat"),
        };
        write_frame(&mut conn, &reply).unwrap();
        req
    })
}

/// `/dev/zero`, a file and standard input of a page and one byte, and an empty file, are
/// refused quickly, naming the input and the page size, without a daemon to connect to.
#[test]
fn put_refuses_input_over_a_page_before_connecting() {
    let dir = Dir::new("big");
    let nobody = dir.join("nobody.sock");
    let refused = |args: &[&str], stdin: &[u8]| -> String {
        let t0 = Instant::now();
        let out = gms(&nobody, args, stdin, None);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(t0.elapsed() < Duration::from_secs(5), "{args:?} took {:?}", t0.elapsed());
        let e = stderr(&out);
        assert!(!e.contains("not running"), "the input is refused before connecting: {e}");
        e
    };
    let e = refused(&["put", "--page", "1:1", "--file", "/dev/zero"], &[]);
    assert!(e.contains("/dev/zero has more than 8192 bytes") && e.contains("1 to 8192"), "{e}");
    let big = dir.join("big.bin");
    std::fs::write(&big, vec![1u8; PAGE_BYTES + 1]).unwrap();
    let e = refused(&["put", "--page", "1:1", "--file", big.to_str().unwrap()], &[]);
    assert!(e.contains("big.bin has more than 8192 bytes"), "{e}");
    let e = refused(&["put", "--page", "1:1", "--file", "-"], &vec![2u8; 3 * PAGE_BYTES]);
    assert!(e.contains("standard input has more than 8192 bytes"), "{e}");
    let empty = dir.join("empty.bin");
    std::fs::write(&empty, []).unwrap();
    let e = refused(&["put", "--page", "1:1", "--file", empty.to_str().unwrap()], &[]);
    assert!(e.contains("empty.bin is empty"), "{e}");
    let e = refused(&["put", "--page", "1:1", "--file", dir.join("missing.bin").to_str().unwrap()], &[]);
    assert!(e.contains("opening") && e.contains("missing.bin"), "{e}");
}

/// `--file -` reads standard input: exactly its bytes (a whole page here) are put.
#[test]
fn put_file_dash_puts_standard_input() {
    let dir = Dir::new("stdin");
    let sock = dir.join("g.sock");
    let daemon = fake_daemon(&sock, Vec::new());
    let data: Vec<u8> = (0..PAGE_BYTES).map(|i| (i * 7) as u8).collect();
    let out = gms(&sock, &["put", "--page", "1:42", "--file", "-"], &data, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1:42: stored at node 1, version 7"), "{out:?}");
    assert_eq!(daemon.join().unwrap(), Request::Put(vec![(PageId::new(1, 42), data)]));
}

/// Without --out the page's bytes go to stdout when it is a pipe.
#[test]
fn get_writes_the_page_to_a_pipe() {
    let dir = Dir::new("pipe");
    let sock = dir.join("g.sock");
    let page: Vec<u8> = (0..100u8).collect();
    let daemon = fake_daemon(&sock, page.clone());
    let out = gms(&sock, &["get", "--page", "1:42"], &[], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, page);
    assert!(stderr(&out).contains("1:42: hit (2-way), version 7, 100 bytes"), "{}", stderr(&out));
    assert!(matches!(daemon.join().unwrap(), Request::Get { .. }));
}

/// Without --out and with stdout on a terminal (a pseudo-terminal here), `get` refuses
/// before connecting and names the ways to get the bytes; nothing is written to the
/// terminal.
#[test]
fn get_refuses_to_write_raw_bytes_to_a_terminal() {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let tty = std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).unwrap();
    let dir = Dir::new("tty");
    let out = gms(&dir.join("nobody.sock"), &["get", "--page", "1:42"], &[], Some(Stdio::from(tty)));
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("terminal") && e.contains("--out FILE") && e.contains("> FILE"), "{e}");
    assert!(!e.contains("not running"), "refused before connecting: {e}");
    // Nothing reached the terminal.
    rustix::io::ioctl_fionbio(&master, true).unwrap();
    let mut buf = [0u8; 64];
    assert!(rustix::io::read(&master, &mut buf).is_err(), "gms wrote to the terminal");
}
