// SPDX-License-Identifier: GPL-2.0-only
//! Target `ivshmem`: the NIC's `ivshmem-doorbell` server (`trapeze_vnic::ivshmem`) facing
//! guests that do what they like on its socket.
//!
//! One NIC and its server live for the whole process (a server per input would cost a
//! thread, a socket and a NIC each time); each input is a script of guest actions on it:
//! connect (up to three clients at once), send bytes QEMU never sends (with a descriptor
//! or not), half-close or close a connection, ring any of the NIC's doorbells, and write
//! any device request (`ctrl::HOST_REQ`) and ring the device-request doorbell. Every
//! input ends with all its clients closed and the NIC's endpoint free again, so inputs do
//! not depend on each other (beyond the next guest id). Oracles, each within a deadline:
//! - a client that connects while no guest holds the endpoint gets the whole handshake
//!   (version 0, its id, the NIC memory's descriptor, then one descriptor per vector for
//!   peer 0 and for itself), and the server wires it; one that connects while a guest
//!   holds it gets version 0 and id −1 without a descriptor, then end of file;
//! - bytes from the guest are discarded: it stays connected;
//! - a guest that closes or half-closes its socket is released: the NIC halted, the
//!   endpoint free for the next one;
//! - a new device request is carried out once and echoed in `HOST_REQ_DONE`: `HALT` and
//!   `START` with `STATUS_OK` (or `STATUS_FAILED`, a clear error), anything else
//!   `STATUS_UNKNOWN_OP`;
//! - the server's accepted and refused counts match what the clients saw.
//!
//! A panic of the server's thread shows as a deadline missed.

use arbitrary::{Arbitrary, Unstructured};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, host_req};
use trapeze_vnic::fdpass::{recv_with_fds, send_with_fds};
use trapeze_vnic::ivshmem::IvshmemServer;
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;

/// Vectors per peer the server hands out.
const VECTORS: u32 = 3;
/// How long the server may take to do what an oracle waits for.
const DEADLINE: Duration = Duration::from_secs(10);

struct Fixture {
    nic: Arc<Nic>,
    server: IvshmemServer,
    path: PathBuf,
}

thread_local! {
    static FIXTURE: Fixture = {
        let dir = std::env::temp_dir().join(format!("trapeze-fuzz-ivshmem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the socket");
        let path = dir.join("ivs.sock");
        let link = Link::new(0, Box::new(InProcSwitch::new().port(0)), FaultConfig::default());
        let nic = Arc::new(Nic::new("fuzz-ivshmem", link, Duration::ZERO).expect("a NIC"));
        let server = IvshmemServer::start(nic.clone(), &path, VECTORS).expect("the ivshmem server");
        Fixture { nic, server, path }
    };
}

#[derive(Arbitrary, Debug)]
enum Step {
    Connect,
    /// Bytes on client `client % open`, with a descriptor (of the client's own socket) if `fd`.
    Send {
        client: u8,
        bytes: Vec<u8>,
        fd: bool,
    },
    HalfClose {
        client: u8,
    },
    Close {
        client: u8,
    },
    /// Ring peer 0's eventfd `vector % VECTORS` of the admitted guest.
    Ring {
        vector: u8,
    },
    /// Write `value` to `ctrl::HOST_REQ` (op in the low bits: `op % 4` unless `raw`) and
    /// ring the device-request doorbell.
    Request {
        seq: u16,
        op: u8,
        raw: Option<u32>,
    },
}

/// The connected guest: its socket, id and peer 0's doorbells.
struct Guest {
    sock: UnixStream,
    id: u16,
    doorbells: Vec<OwnedFd>,
}

/// Wait for `cond`, at most [`DEADLINE`].
fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < DEADLINE, "ivshmem server: {what} not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// One 8-byte protocol message and its descriptors, or `None` at end of file.
fn read_msg(sock: &UnixStream) -> Option<(i64, Vec<OwnedFd>)> {
    let (mut buf, mut got, mut fds) = ([0u8; 8], 0, Vec::new());
    while got < 8 {
        // libFuzzer's timers interrupt the wait now and then: wait again.
        let (n, f) = match recv_with_fds(sock.as_fd(), &mut buf[got..]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.expect("a message within the deadline"),
        };
        fds.extend(f);
        if n == 0 {
            assert_eq!(got, 0, "end of file in the middle of a message");
            return None;
        }
        got += n;
    }
    Some((i64::from_le_bytes(buf), fds))
}

fn connect(path: &std::path::Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("the server's socket");
    s.set_read_timeout(Some(DEADLINE)).expect("a read timeout");
    s
}

/// The handshake of an admitted guest.
fn admitted(sock: UnixStream) -> Guest {
    let next = || read_msg(&sock).expect("a handshake message");
    assert!(matches!(next(), (0, f) if f.is_empty()), "version message");
    let (id, f) = next();
    assert!(f.is_empty() && (1..=0xFFFF).contains(&id), "id message {id}");
    let (m, f) = next();
    assert!(m == -1 && f.len() == 1, "shared-memory message {m} with {} descriptors", f.len());
    let mut doorbells = Vec::new();
    for peer in [0, id] {
        for v in 0..VECTORS {
            let (p, mut f) = next();
            assert!(p == peer && f.len() == 1, "peer {peer} vector {v}: message {p} with {} descriptors", f.len());
            if peer == 0 {
                doorbells.push(f.pop().expect("one descriptor"));
            }
        }
    }
    Guest { sock, id: id as u16, doorbells }
}

/// The answer of a refused guest.
fn refused(sock: &UnixStream) {
    assert!(matches!(read_msg(sock), Some((0, f)) if f.is_empty()), "a refused guest's version message");
    assert!(matches!(read_msg(sock), Some((-1, f)) if f.is_empty()), "a refused guest's id message");
    assert!(read_msg(sock).is_none(), "a refused guest's connection stays open");
}

fn ring(fd: &OwnedFd) {
    let mut f = std::fs::File::from(fd.try_clone().expect("a descriptor"));
    f.write_all(&1u64.to_ne_bytes()).expect("an eventfd write");
}

pub fn fuzz(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut steps = Vec::new();
    while steps.len() < 12 {
        match Step::arbitrary(&mut u) {
            Ok(s) => steps.push(s),
            Err(_) => break,
        }
    }
    FIXTURE.with(|fx| run(fx, &steps));
}

fn run(fx: &Fixture, steps: &[Step]) {
    let (accepted0, refused0) = (fx.server.accepted(), fx.server.refused());
    let (mut accepted, mut refusals) = (0, 0);
    let mut guest: Option<Guest> = None;
    // Other clients: refused at connect, or a guest that half-closed (released).
    let mut others: Vec<UnixStream> = Vec::new();
    let mem = fx.nic.shared().mem.words();
    let word = |rel: u32| &mem[(ctrl_word(rel) / 4) as usize];
    for step in steps {
        match step {
            Step::Connect if others.len() + usize::from(guest.is_some()) < 3 => {
                let sock = connect(&fx.path);
                if guest.is_none() {
                    let g = admitted(sock);
                    wait("wiring a guest", || fx.server.guest() == Some(g.id));
                    accepted += 1;
                    guest = Some(g);
                } else {
                    refused(&sock);
                    refusals += 1;
                    others.push(sock);
                }
            }
            Step::Connect => {}
            Step::Send { client, bytes, fd } => {
                let n = others.len() + usize::from(guest.is_some());
                let Some(i) = (n > 0).then(|| *client as usize % n) else { continue };
                let sock = match (&guest, i) {
                    (Some(g), 0) => &g.sock,
                    (Some(_), i) => &others[i - 1],
                    (None, i) => &others[i],
                };
                let fds = if *fd { vec![sock.as_fd()] } else { vec![] };
                // A refused client's peer is gone: the send may fail, which is fine.
                let _ = send_with_fds(sock.as_fd(), &bytes[..bytes.len().min(512)], &fds);
                if let Some(g) = guest.as_ref().filter(|_| i == 0) {
                    // Let the server read it; the guest stays.
                    std::thread::sleep(Duration::from_micros(200));
                    assert_eq!(fx.server.guest(), Some(g.id), "bytes from a guest made the server drop it");
                }
            }
            Step::HalfClose { client } | Step::Close { client } => {
                let close = matches!(step, Step::Close { .. });
                let n = others.len() + usize::from(guest.is_some());
                let Some(i) = (n > 0).then(|| *client as usize % n) else { continue };
                match guest.take() {
                    Some(g) if i == 0 => {
                        if close {
                            drop(g);
                        } else {
                            g.sock.shutdown(std::net::Shutdown::Write).expect("a half-close");
                            others.push(g.sock);
                        }
                        wait("releasing a guest that left", || fx.server.guest().is_none());
                        assert!(!fx.nic.is_running(), "a released guest's NIC still runs");
                    }
                    g => {
                        guest = g;
                        let i = i - usize::from(guest.is_some());
                        if close {
                            others.remove(i);
                        } else {
                            let _ = others[i].shutdown(std::net::Shutdown::Write);
                        }
                    }
                }
            }
            Step::Ring { vector } => {
                if let Some(g) = &guest {
                    ring(&g.doorbells[*vector as usize % VECTORS as usize]);
                }
            }
            Step::Request { seq, op, raw } => {
                let Some(g) = &guest else { continue };
                let req = raw.unwrap_or(u32::from(*seq) << host_req::SEQ_SHIFT | u32::from(*op % 4));
                let done = word(ctrl::HOST_REQ_DONE).load(Ordering::Acquire);
                word(ctrl::HOST_REQ).store(req, Ordering::Release);
                ring(&g.doorbells[trapeze_vnic::ivshmem::REQUEST_VECTOR]);
                if req == done {
                    continue;
                }
                wait("a device request", || word(ctrl::HOST_REQ_DONE).load(Ordering::Acquire) == req);
                let status = word(ctrl::HOST_REQ_STATUS).load(Ordering::Relaxed);
                match req & host_req::OP_MASK {
                    host_req::HALT | host_req::START => assert!(
                        status == host_req::STATUS_OK || status == host_req::STATUS_FAILED,
                        "request {req:#x}: status {status}"
                    ),
                    _ => assert_eq!(status, host_req::STATUS_UNKNOWN_OP, "request {req:#x}"),
                }
            }
        }
    }
    if guest.take().is_some() {
        wait("releasing the last guest", || fx.server.guest().is_none());
    }
    drop(others);
    wait("the endpoint free again", || !fx.nic.shared().host_attached.load(Ordering::Acquire));
    assert_eq!(fx.server.accepted() - accepted0, accepted, "guests accepted");
    assert_eq!(fx.server.refused() - refused0, refusals, "guests refused");
}
