// SPDX-License-Identifier: GPL-2.0-only
//! The ivshmem-doorbell server: a fake QEMU client checks the handshake and the wiring
//! into the NIC; a real QEMU (if installed) checks that the device accepts it.

use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::SocketType;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, host_req, FwState, NIC_MEM_BYTES};
use trapeze_vnic::control::{self, ControlClient, Request};
use trapeze_vnic::dma::Machine;
use trapeze_vnic::fdpass::{connect, recv_with_fds};
use trapeze_vnic::ivshmem::{register_guest_ram, unregister_guest_ram, IvshmemServer, MAX_VECTORS, REQUEST_VECTOR};
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::{FirmwareKind, Nic};
use trapeze_vnic::shm::Mapping;

const STEP: Duration = Duration::from_secs(10);

fn test_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trapeze-ivs-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A halted NIC on an in-process link; an idle processor parks at once (spin 0).
fn new_nic(name: &str) -> Arc<Nic> {
    let link = Link::new(0, Box::new(InProcSwitch::new().port(0)), FaultConfig::default());
    Arc::new(Nic::new(name, link, Duration::ZERO).unwrap())
}

fn readable(fd: impl AsFd, ms: i64) -> bool {
    let ts = rustix::event::Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// One protocol message: exactly 8 bytes (read at most 8 at a time, so descriptors are
/// attributed to the message they came with), and its descriptors.
fn read_msg(sock: &OwnedFd) -> (i64, Vec<OwnedFd>) {
    let mut buf = [0u8; 8];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < 8 {
        assert!(readable(sock, 5000), "no ivshmem message within 5 s ({got} bytes of one read)");
        let (n, f) = recv_with_fds(sock.as_fd(), &mut buf[got..]).unwrap();
        assert!(n > 0, "server closed the connection mid-message ({got} bytes read)");
        got += n;
        fds.extend(f);
    }
    (i64::from_le_bytes(buf), fds)
}

fn assert_eof(sock: &OwnedFd) {
    assert!(readable(sock, 5000), "server neither sent nor closed within 5 s");
    let mut buf = [0u8; 8];
    let (n, fds) = recv_with_fds(sock.as_fd(), &mut buf).unwrap();
    assert_eq!((n, fds.len()), (0, 0), "expected end of file, got {n} bytes");
}

/// What a guest learns in the handshake.
struct Setup {
    id: i64,
    shm: OwnedFd,
    /// Peer 0's (the NIC's) eventfds, vector order.
    nic_doorbells: Vec<OwnedFd>,
    /// The guest's own MSI-X eventfds, vector order.
    vectors: Vec<OwnedFd>,
}

fn handshake(sock: &OwnedFd, vectors: usize) -> Setup {
    let (v, fds) = read_msg(sock);
    assert_eq!((v, fds.len()), (0, 0), "version message");
    let (id, fds) = read_msg(sock);
    assert!(fds.is_empty() && (1..=0xFFFF).contains(&id), "id message {id} with {} fds", fds.len());
    let (m, mut fds) = read_msg(sock);
    assert_eq!((m, fds.len()), (-1, 1), "shared-memory message");
    let shm = fds.pop().unwrap();
    let per_peer = |peer: i64| {
        (0..vectors)
            .map(|v| {
                let (p, mut fds) = read_msg(sock);
                assert_eq!((p, fds.len()), (peer, 1), "peer {peer} vector {v}");
                fds.pop().unwrap()
            })
            .collect::<Vec<_>>()
    };
    let nic_doorbells = per_peer(0);
    let own = per_peer(id);
    // Nothing else follows (one guest per NIC: no other peers to announce).
    assert!(!readable(sock, 50), "unexpected message after the handshake");
    Setup { id, shm, nic_doorbells, vectors: own }
}

fn signal(fd: &OwnedFd) {
    rustix::io::write(fd, &1u64.to_ne_bytes()).unwrap();
}

fn drain(fd: &OwnedFd) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

fn doorbell_count(nic: &Nic) -> usize {
    nic.shared().wakers.doorbells.lock().unwrap().len()
}

/// With the NIC parked, signal `fd` and return how long the NIC took to come round
/// to its next park; the best of a few tries. A parked NIC not woken sleeps ~100 ms.
fn wake_latency(nic: &Nic, fd: &OwnedFd) -> Duration {
    let parks = || nic.shared().stats.parks.load(Ordering::Relaxed);
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let p0 = parks();
        assert!(wait_until(STEP, || parks() != p0), "the NIC never parks");
        let p1 = parks();
        let t = Instant::now();
        signal(fd);
        assert!(wait_until(STEP, || parks() != p1), "the NIC never parks again");
        best = best.min(t.elapsed());
        if best < Duration::from_millis(20) {
            break;
        }
    }
    best
}

#[test]
fn handshake_hands_over_nic_memory_and_wires_interrupts_and_doorbells() {
    let t0 = Instant::now();
    let dir = test_dir("hs");
    let path = dir.join("ivs.sock");
    let nic = new_nic("ivs-hs");
    let server = IvshmemServer::start(nic.clone(), &path, 2).unwrap();
    assert_eq!(server.vectors(), 2);
    let sock = connect(&path, SocketType::STREAM).unwrap();
    let g = handshake(&sock, 2);
    assert_eq!(g.id, 1);
    assert!(wait_until(STEP, || server.guest() == Some(1)), "server never wired the guest");
    assert!(nic.shared().host_attached.load(Ordering::Acquire));
    // Vector 1 is the device-request doorbell, not a NIC doorbell.
    assert_eq!(doorbell_count(&nic), 1);

    // BAR2 is NIC memory: the whole memfd, both directions.
    let shm_file = std::fs::File::from(g.shm);
    let size = shm_file.metadata().unwrap().len() as usize;
    assert_eq!(size, NIC_MEM_BYTES as usize);
    assert!(size.is_power_of_two());
    let bar2 = Mapping::from_file(shm_file, size).unwrap();
    let nic_words = nic.shared().mem.words();
    nic_words[123].store(0xC0FF_EE01, Ordering::Release);
    assert_eq!(bar2.words()[123].load(Ordering::Acquire), 0xC0FF_EE01);
    bar2.words()[size / 4 - 1].store(0x5EED_0002, Ordering::Release);
    assert_eq!(nic_words[size / 4 - 1].load(Ordering::Acquire), 0x5EED_0002);

    // The NIC's host interrupt raises vector 0, and only vector 0.
    assert!(!readable(&g.vectors[0], 0));
    nic.shared().notifier.raise();
    assert!(readable(&g.vectors[0], 1000), "host interrupt did not reach MSI-X vector 0");
    assert!(!readable(&g.vectors[1], 0), "host interrupt leaked to vector 1");
    drain(&g.vectors[0]);
    assert!(server.interrupt_guest(1));
    assert!(readable(&g.vectors[1], 1000), "interrupt_guest(1) did not reach vector 1");
    drain(&g.vectors[1]);
    assert!(!server.interrupt_guest(2));

    // A write to peer 0's eventfd v (what the guest's Doorbell write (0 << 16) | v does)
    // wakes a parked NIC.
    nic.start(FirmwareKind::Native).unwrap();
    let parks = || nic.shared().stats.parks.load(Ordering::Relaxed);
    let p = parks();
    assert!(wait_until(STEP, || parks() != p));
    let (p, t) = (parks(), Instant::now());
    assert!(wait_until(STEP, || parks() != p));
    let idle_sleep = t.elapsed();
    assert!(idle_sleep >= Duration::from_millis(50), "an unwoken parked NIC slept only {idle_sleep:?}");
    for (v, fd) in g.nic_doorbells.iter().enumerate().filter(|&(v, _)| v != REQUEST_VECTOR) {
        let dt = wake_latency(&nic, fd);
        assert!(dt < Duration::from_millis(50), "doorbell vector {v} woke the NIC only after {dt:?}");
        eprintln!("doorbell vector {v}: NIC woke and parked again in {dt:?} (unwoken: {idle_sleep:?})");
    }

    // The device-request doorbell: what a guest driver does through BAR2 + Doorbell
    // (0 << 16) | 1 to halt the NIC before it frees its frames, and to start it afresh.
    let word = |rel: u32| &bar2.words()[(ctrl_word(rel) / 4) as usize];
    let request = |seq: u32, op: u32| {
        let req = seq << host_req::SEQ_SHIFT | op;
        word(ctrl::HOST_REQ).store(req, Ordering::Release);
        signal(&g.nic_doorbells[REQUEST_VECTOR]);
        assert!(
            wait_until(STEP, || word(ctrl::HOST_REQ_DONE).load(Ordering::Acquire) == req),
            "device request {req:#x} not carried out"
        );
        word(ctrl::HOST_REQ_STATUS).load(Ordering::Relaxed)
    };
    assert_eq!(request(1, host_req::HALT), host_req::STATUS_OK);
    assert!(!nic.is_running());
    assert_eq!(word(ctrl::FW_STATE).load(Ordering::Acquire), FwState::Halted as u32);
    assert_eq!(request(2, host_req::START), host_req::STATUS_OK);
    assert!(nic.is_running());
    assert_eq!(word(ctrl::FW_STATE).load(Ordering::Acquire), FwState::Ready as u32);
    assert_eq!(request(3, 0x42), host_req::STATUS_UNKNOWN_OP);
    nic.halt().unwrap();

    // Disconnect: unwired, endpoint released.
    drop(sock);
    assert!(wait_until(STEP, || server.guest().is_none()), "server missed the disconnect");
    assert!(!nic.shared().host_attached.load(Ordering::Acquire));
    assert_eq!(doorbell_count(&nic), 0);
    nic.shared().notifier.raise();
    assert!(!readable(&g.vectors[0], 50), "a departed guest still gets host interrupts");

    // The next guest gets a new id and fresh eventfds.
    let sock2 = connect(&path, SocketType::STREAM).unwrap();
    let g2 = handshake(&sock2, 2);
    assert_eq!(g2.id, 2);
    assert!(wait_until(STEP, || server.guest() == Some(2)));
    nic.shared().notifier.raise();
    assert!(readable(&g2.vectors[0], 1000));
    assert!(!readable(&g.vectors[0], 0));
    assert_eq!(server.accepted(), 2);
    assert_eq!(server.refused(), 0);

    // Dropping the server releases the guest and removes the socket.
    drop(server);
    assert!(!nic.shared().host_attached.load(Ordering::Acquire));
    assert_eq!(doorbell_count(&nic), 0);
    assert!(!path.exists());
    assert_eof(&sock2);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("handshake test took {:?}", t0.elapsed());
}

#[test]
fn one_endpoint_per_nic_refuses_second_guest_and_control_host() {
    let dir = test_dir("refuse");
    let path = dir.join("ivs.sock");
    let ctl_path = dir.join("ctl.sock");
    let nic = new_nic("ivs-refuse");
    let server = IvshmemServer::start(nic.clone(), &path, 1).unwrap();
    let ctl = control::serve(nic.clone(), &ctl_path).unwrap();

    let a = connect(&path, SocketType::STREAM).unwrap();
    let ga = handshake(&a, 1);
    assert!(wait_until(STEP, || server.guest() == Some(ga.id as u16)));

    // A second guest gets the version and an invalid id (QEMU gives up on it), then EOF.
    let b = connect(&path, SocketType::STREAM).unwrap();
    assert_eq!(read_msg(&b).0, 0);
    let (id, fds) = read_msg(&b);
    assert_eq!((id, fds.len()), (-1, 0));
    assert_eof(&b);
    assert_eq!(server.refused(), 1);
    assert_eq!(server.guest(), Some(ga.id as u16));

    // Nor can a user-space host attach through the control socket meanwhile.
    let client = ControlClient::connect(&ctl_path).unwrap();
    let err = client.request_with_fds(&Request::Attach, &[], STEP).unwrap_err();
    assert!(format!("{err:#}").contains("already has a host"), "{err:#}");

    // Guest gone: a control-socket host may attach, and then a guest is refused.
    drop(a);
    assert!(wait_until(STEP, || server.guest().is_none()));
    let (_, host_fds) = client.request_with_fds(&Request::Attach, &[], STEP).unwrap();
    assert_eq!(host_fds.len(), 3);
    let c = connect(&path, SocketType::STREAM).unwrap();
    assert_eq!(read_msg(&c).0, 0);
    assert_eq!(read_msg(&c).0, -1);
    assert_eof(&c);
    assert_eq!(server.refused(), 2);
    assert!(nic.shared().host_attached.load(Ordering::Acquire), "refusal must not release the host's claim");

    // Host gone: guests are welcome again.
    drop(client);
    assert!(wait_until(STEP, || !nic.shared().host_attached.load(Ordering::Acquire)));
    let d = connect(&path, SocketType::STREAM).unwrap();
    let gd = handshake(&d, 1);
    assert_eq!(gd.id, 2);
    assert!(wait_until(STEP, || server.guest() == Some(2)));
    drop(ctl);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn start_checks_vector_count() {
    let dir = test_dir("vec");
    let nic = new_nic("ivs-vec");
    assert!(IvshmemServer::start(nic.clone(), &dir.join("a.sock"), 0).is_err());
    assert!(IvshmemServer::start(nic.clone(), &dir.join("b.sock"), MAX_VECTORS + 1).is_err());
    let s = IvshmemServer::start(nic.clone(), &dir.join("c.sock"), MAX_VECTORS).unwrap();
    let sock = connect(s.path(), SocketType::STREAM).unwrap();
    let g = handshake(&sock, MAX_VECTORS as usize);
    assert_eq!(g.vectors.len(), MAX_VECTORS as usize);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn guest_ram_file_becomes_dma_space() {
    use std::os::unix::fs::FileExt;
    let dir = test_dir("ram");
    let path = dir.join("guest-ram");
    let nic = new_nic("ivs-ram");
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).mode(0o600).open(&path).unwrap();
    f.set_len(1 << 20).unwrap();
    // Guest RAM others could read is refused, naming the file and its mode.
    f.set_permissions(std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = format!("{:#}", register_guest_ram(&nic, &path, Machine::Pc).unwrap_err());
    assert!(e.contains(&path.display().to_string()) && e.contains("0644"), "{e}");
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).unwrap();
    f.write_all_at(b"guest-physical 0x80000", 0x8_0000).unwrap();
    register_guest_ram(&nic, &path, Machine::Pc).unwrap();
    assert_eq!(nic.shared().dma.regions(), vec![("guest-ram".to_string(), 0, 1 << 20)]);
    let (map, off) = nic.shared().dma.translate(0x8_0000, 22).unwrap();
    let mut got = [0u8; 22];
    assert!(map.read(off, &mut got));
    assert_eq!(&got, b"guest-physical 0x80000");
    assert!(map.write(off, b"NIC wrote"));
    let mut back = [0u8; 9];
    f.read_exact_at(&mut back, 0x8_0000).unwrap();
    assert_eq!(&back, b"NIC wrote");
    assert!(nic.shared().dma.translate((1 << 20) - 4, 8).is_none());
    assert!(register_guest_ram(&nic, &path, Machine::Pc).is_err(), "registered twice");
    assert_eq!(unregister_guest_ram(&nic), 1);
    assert!(nic.shared().dma.regions().is_empty());
    assert!(register_guest_ram(&nic, &dir.join("missing"), Machine::Q35).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_departing_guest_leaves_the_nic_halted_cleared_and_without_its_ram() {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use trapeze_firmware::iface::layout::{IPT_OFF, SEND_RING_OFF, STAGING_OFF};
    let dir = test_dir("leave");
    let (path, ram) = (dir.join("ivs.sock"), dir.join("guest-ram"));
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&ram).unwrap();
    f.set_len(1 << 20).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).unwrap();
    let nic = new_nic("ivs-leave");
    let guest_ram = trapeze_vnic::ivshmem::GuestRam { path: ram.clone(), machine: Machine::Pc };
    let server = IvshmemServer::start_with_ram(nic.clone(), &path, 2, Some(guest_ram)).unwrap();
    let regions = || nic.shared().dma.regions();

    let sock = connect(&path, SocketType::STREAM).unwrap();
    let g = handshake(&sock, 2);
    assert!(wait_until(STEP, || server.guest() == Some(g.id as u16)));
    assert_eq!(regions(), vec![("guest-ram".to_string(), 0, 1 << 20)], "admission maps the guest's RAM");
    nic.start(FirmwareKind::Native).unwrap();
    // What the guest's driver left in the rings and the IPT (an armed payload token).
    let words = nic.shared().mem.words();
    let marks = [SEND_RING_OFF, SEND_RING_OFF + 0x1000, IPT_OFF, IPT_OFF + 0x100, STAGING_OFF];
    for &off in &marks {
        words[(off / 4) as usize].store(0xA5A5_0000 | off, Ordering::Release);
    }

    drop(sock);
    assert!(wait_until(STEP, || server.guest().is_none()), "server missed the disconnect");
    assert!(!nic.is_running(), "the NIC still runs after its guest left");
    let fw_state = nic.shared().mem.words()[(ctrl_word(ctrl::FW_STATE) / 4) as usize].load(Ordering::Acquire);
    assert_eq!(fw_state, FwState::Halted as u32);
    for &off in &marks {
        assert_eq!(words[(off / 4) as usize].load(Ordering::Acquire), 0, "NIC memory at {off:#x} not cleared");
    }
    assert!(regions().is_empty(), "the departed guest's RAM is still DMA space: {:?}", regions());
    assert!(nic.shared().dma.translate(0x1000, 8).is_none());

    // The next guest gets its RAM mapped afresh.
    let sock2 = connect(&path, SocketType::STREAM).unwrap();
    let g2 = handshake(&sock2, 2);
    assert!(wait_until(STEP, || server.guest() == Some(g2.id as u16)));
    assert_eq!(regions().len(), 1);
    drop(sock2);
    assert!(wait_until(STEP, || server.guest().is_none() && regions().is_empty()));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- real QEMU ----

fn find_qemu() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("qemu-system-x86_64"))
        .find(|p| p.is_file())
}

/// A QEMU child with its monitor on stdio; killed (if still running) when dropped.
struct Qemu {
    child: Child,
    out: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Qemu {
    fn spawn(qemu: &Path, args: &[String]) -> Qemu {
        let mut child = Command::new(qemu)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting qemu-system-x86_64");
        let out = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut readers = Vec::new();
        for mut r in [Box::new(stdout) as Box<dyn Read + Send>, Box::new(stderr)] {
            let o = out.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    o.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }));
        }
        Qemu { child, out, readers }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn command(&mut self, cmd: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Wait until the output (from `from` on) contains `what`.
    fn expect(&mut self, from: usize, what: &str) -> String {
        let ok = wait_until(STEP, || self.output().get(from..).is_some_and(|s| s.contains(what)));
        let out = self.output();
        assert!(ok, "QEMU output never showed {what:?}; output:\n{out}");
        out[from..].to_string()
    }

    /// Wait for QEMU to exit; then all its output has been collected.
    fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Some(st) = self.child.try_wait().unwrap() {
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn qemu_args(sock: &Path, ram: Option<&Path>) -> Vec<String> {
    let mut a: Vec<String> = ["-machine", "pc", "-accel", "tcg", "-m", "64", "-nographic", "-S", "-nodefaults"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(ram) = ram {
        a.push("-object".into());
        a.push(format!("memory-backend-file,id=mem,size=64M,mem-path={},share=on", ram.display()));
        a.push("-machine".into());
        a.push("memory-backend=mem".into());
    }
    a.push("-chardev".into());
    a.push(format!("socket,path={},id=ivs", sock.display()));
    a.push("-device".into());
    a.push("ivshmem-doorbell,chardev=ivs,vectors=2".into());
    a.push("-monitor".into());
    a.push("stdio".into());
    a
}

#[test]
#[ignore = "needs: qemu"]
fn real_qemu_accepts_the_server() {
    let qemu = find_qemu()
        .expect("qemu-system-x86_64 is not on PATH (apt-get install --no-install-recommends qemu-system-x86)");
    let t0 = Instant::now();
    let dir = test_dir("qemu");
    let sock = dir.join("ivs.sock");
    let ram = dir.join("guest-ram");
    // QEMU would create it with the umask's mode; guest RAM must be 0600.
    std::fs::File::create(&ram).unwrap().set_len(64 << 20).unwrap();
    std::fs::set_permissions(&ram, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let nic = new_nic("ivs-qemu");
    let server = IvshmemServer::start(nic.clone(), &sock, 2).unwrap();

    let mut q = Qemu::spawn(&qemu, &qemu_args(&sock, Some(&ram)));
    let ok = wait_until(STEP, || server.guest().is_some() || !q.running());
    assert!(ok && q.running(), "QEMU did not complete the ivshmem handshake; output:\n{}", q.output());
    assert_eq!(server.guest(), Some(1));
    q.expect(0, "(qemu)");
    // Still up after the asynchronous vector messages were processed.
    std::thread::sleep(Duration::from_millis(300));
    assert!(q.running(), "QEMU exited after the handshake; output:\n{}", q.output());
    assert!(!q.output().contains("ivshmem"), "QEMU complained:\n{}", q.output());

    let at = q.output().len();
    q.command("info pci");
    // The ivshmem device's BAR2 is the NIC memory's size; unassigned (the BIOS has not
    // run under -S), QEMU prints it as [address + size - 1] with address all ones, i.e.
    // size - 2. Wait for that line: the output arrives in pieces.
    let bar2 = format!("BAR2: 64 bit prefetchable memory at 0xffffffffffffffff [0x{:08x}]", NIC_MEM_BYTES - 2);
    let pci = q.expect(at, &bar2);
    let dev = pci.find("PCI device 1af4:1110").unwrap_or_else(|| panic!("no 1af4:1110 in:\n{pci}"));
    assert!(pci[dev..].contains(&bar2), "BAR2 line is not the ivshmem device's:\n{pci}");

    // Guest RAM (the memory-backend-file) is DMA space: a word the NIC writes at a
    // guest-physical address is what the guest sees there.
    register_guest_ram(&nic, &ram, Machine::Pc).unwrap();
    assert_eq!(nic.shared().dma.regions(), vec![("guest-ram".to_string(), 0, 64 << 20)]);
    let (map, off) = nic.shared().dma.translate(0x20_0000, 8).unwrap();
    assert!(map.write(off, &[0x78, 0x56, 0x34, 0x12, 0xef, 0xbe, 0xad, 0xde]));
    let at = q.output().len();
    q.command("xp /2wx 0x200000");
    let xp = q.expect(at, "0xdeadbeef");
    assert!(xp.contains("0x12345678"), "xp showed:\n{xp}");

    // A second guest on the same NIC is refused, and QEMU gives up rather than hangs.
    let mut q2 = Qemu::spawn(&qemu, &qemu_args(&sock, None));
    let st = q2.wait_exit(STEP);
    let out2 = q2.output();
    assert!(st.is_some_and(|s| !s.success()), "second QEMU was not refused: {st:?}\n{out2}");
    assert!(out2.contains("invalid ID"), "second QEMU said:\n{out2}");
    assert_eq!(server.refused(), 1);
    assert!(q.running());

    q.command("quit");
    let st = q.wait_exit(STEP);
    assert!(st.is_some_and(|s| s.success()), "QEMU did not quit cleanly: {st:?}\n{}", q.output());
    assert!(wait_until(STEP, || server.guest().is_none()), "server missed QEMU's exit");
    assert!(!nic.shared().host_attached.load(Ordering::Acquire));
    assert!(nic.shared().dma.regions().is_empty(), "the departed guest's RAM is still DMA space");
    assert_eq!(unregister_guest_ram(&nic), 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("real QEMU test took {:?}", t0.elapsed());
}
