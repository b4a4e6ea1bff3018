// SPDX-License-Identifier: GPL-2.0-only
//! The NIC as a QEMU PCI device: an `ivshmem-doorbell` server, and guest RAM as DMA space.
//!
//! QEMU's `ivshmem-doorbell` device (PCI 1af4:1110) takes its shared memory and its
//! interrupt eventfds from a server on a Unix stream socket (`-chardev socket,path=…`).
//! [`IvshmemServer`] is that server, run by the virtual NIC itself, so a guest sees:
//! * **BAR2** = NIC memory (the memfd behind `nic.shared().mem`; QEMU maps the whole file,
//!   whose size must be a power of two);
//! * **MSI-X vector 0** = the NIC's host interrupt (the guest's vector-0 eventfd is added
//!   to the NIC's [`Notifier`](crate::engines::Notifier)); further vectors can be raised
//!   with [`IvshmemServer::interrupt_guest`];
//! * **Doorbell** (BAR0 + 0xC): a guest write of `(0 << 16) | v` signals the server's
//!   (peer 0's) eventfd `v`. Vector [`REQUEST_VECTOR`] (1) is the *device-request*
//!   doorbell: the server carries out the request the guest wrote to the control block's
//!   `HOST_REQ` word (halt the NIC processor, or start its firmware afresh; see
//!   `iface::layout::host_req`) and echoes it in `HOST_REQ_DONE`. This is how a guest
//!   driver gets the fresh endpoint a user-space host gets from `attach`, and how it
//!   stops all DMA into its memory before it frees its frames. Every other vector is a
//!   NIC doorbell ([`Wakers::add_doorbell`](crate::engines::Wakers::add_doorbell)): it
//!   wakes a parked NIC.
//!
//! # Protocol (QEMU `docs/specs/ivshmem-spec.rst`, as QEMU 7.2 implements it)
//! Every message is one little-endian `i64` sent in its own `sendmsg`, carrying at most
//! one descriptor (SCM_RIGHTS). To a new guest, in this order: `0` (protocol version);
//! the guest's peer id (no descriptor); `-1` with the shared-memory fd; then for each
//! peer, the server's own id 0 first and the guest itself next, one message per vector:
//! the peer's id with that vector's eventfd (the n-th message for a peer is vector n−1).
//! A bare id without a descriptor tells the guest that peer has left.
//!
//! # One guest per NIC
//! A NIC has one endpoint and one endpoint has one host (as a Myrinet NIC had one host),
//! so the server admits one guest at a time, and only while no user-space host holds the
//! endpoint through the control socket: admission takes `nic.shared().host_attached`, a
//! disconnect releases it. Since at most one guest is connected there is never another
//! guest to tell about arrivals or departures, so "peer left" messages are never needed.
//!
//! A refused guest gets the version and then an id of `-1` without a descriptor, which
//! QEMU rejects at once ("server sent invalid ID message") and exits. Simply closing
//! the connection would be worse: QEMU 7.2 reads its setup messages synchronously and
//! keeps retrying on end-of-file, so it would hang in device realisation.
//!
//! Each admitted guest gets fresh eventfds (its own vectors and peer 0's), and all of
//! them are unwired from the NIC when it disconnects, so a departed guest (or a QEMU that
//! still holds the descriptors) can neither wake the NIC nor be interrupted by it.
//!
//! # A guest that leaves
//! When the guest disconnects (QEMU exits or is killed) the NIC is made safe for whatever
//! comes next ([`forget_guest`]): the processor is halted, the rings, the IPT and the
//! staging buffers are zeroed (no payload token of the old guest stays valid, no stale
//! entry is carried out), and the guest's RAM is unregistered and unmapped, so nothing
//! can be DMAed into memory that may by now belong to someone else. A guest that
//! connects next starts the firmware with its device-request doorbell (`START`), as a
//! driver's probe does anyway; its RAM is mapped afresh at admission
//! ([`IvshmemServer::start_with_ram`]).
//!
//! # Who may connect
//! The socket is mode 0600 and each connection's peer credentials are checked before
//! anything is sent ([`crate::local::check_peer`]): a process of another user (root
//! excepted) is disconnected at once and never learns the NIC-memory descriptor.
//!
//! # Guest RAM
//! [`register_guest_ram`] maps a QEMU `memory-backend-file` (created with `share=on`) and
//! registers it with the NIC's DMA space using the machine type's layout, so the
//! guest-physical addresses a guest driver hands to the NIC are DMA addresses. The file
//! must be a regular file of this user, mode 0600 at most: guest RAM others could read or
//! write would expose the guest, and the NIC's DMA into it.

use crate::dma::Machine;
use crate::engines::new_eventfd;
use crate::fdpass::{recv_with_fds, send_with_fds};
use crate::nic::Nic;
use crate::shm::Mapping;
use anyhow::{bail, Context};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::SocketType;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, host_req};
use trapeze_firmware::iface::mem::NicMemory;

/// The protocol version the server announces (the only one QEMU accepts).
pub const PROTOCOL_VERSION: i64 = 0;
/// The server's (the NIC's) own peer id; guests write `(SERVER_PEER_ID << 16) | v` to
/// their Doorbell register to wake the NIC.
pub const SERVER_PEER_ID: u16 = 0;
/// Most interrupt vectors per peer the server hands out (the Doorbell register's vector
/// field is 8 bits wide in QEMU; 64 is plenty and keeps the handshake short).
pub const MAX_VECTORS: u32 = 64;
/// Largest peer id QEMU accepts.
pub const MAX_PEER_ID: u16 = u16::MAX;
/// How long one send of the handshake may block on a guest that does not read.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// The doorbell vector (of peer 0) that asks the device to carry out `ctrl::HOST_REQ`.
pub const REQUEST_VECTOR: usize = 1;

/// The `ivshmem-doorbell` peer id of the n-th guest: guests count from 1, wrapping
/// within `1..=MAX_PEER_ID` (0 is the server).
fn next_peer_id(prev: u16) -> u16 {
    match prev {
        MAX_PEER_ID => 1,
        p => p + 1,
    }
}

/// A peer's eventfds, in vector order.
type Eventfds = Vec<Arc<OwnedFd>>;

/// What the server knows about the connected guest, shared with [`IvshmemServer`].
#[derive(Default)]
struct Shared {
    guest: Mutex<Option<GuestView>>,
    accepted: AtomicU64,
    refused: AtomicU64,
}

/// A guest's RAM file and machine type, mapped into the NIC's DMA space while that guest
/// is connected.
#[derive(Clone, Debug)]
pub struct GuestRam {
    pub path: PathBuf,
    pub machine: Machine,
}

/// The connected guest's id and its interrupt eventfds (vector order).
struct GuestView {
    id: u16,
    vectors: Vec<Arc<OwnedFd>>,
}

/// A running `ivshmem-doorbell` server for one NIC; stops (disconnecting its guest,
/// unwiring it from the NIC and removing the socket) when dropped.
pub struct IvshmemServer {
    path: PathBuf,
    vectors: u32,
    shared: Arc<Shared>,
    stop: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl IvshmemServer {
    /// Listen on a Unix stream socket at `socket_path` (a stale socket file is replaced)
    /// and serve `nic` to QEMU guests with `vectors` interrupt vectors each. Returns once
    /// the socket is listening, so QEMU may be started right after. `vectors` must not
    /// exceed the device's `vectors=` property (QEMU drops surplus eventfds with an
    /// error); equal is the natural choice.
    pub fn start(nic: Arc<Nic>, socket_path: &Path, vectors: u32) -> anyhow::Result<Self> {
        Self::start_with_ram(nic, socket_path, vectors, None)
    }

    /// [`Self::start`], and map `ram` into the NIC's DMA space afresh for each guest
    /// admitted (a guest whose RAM cannot be mapped is refused). When a guest leaves its
    /// RAM is forgotten either way ([`forget_guest`]).
    pub fn start_with_ram(
        nic: Arc<Nic>,
        socket_path: &Path,
        vectors: u32,
        ram: Option<GuestRam>,
    ) -> anyhow::Result<Self> {
        if vectors == 0 || vectors > MAX_VECTORS {
            bail!("ivshmem vectors must be 1..={MAX_VECTORS}, got {vectors}");
        }
        let mem_len = nic.shared().mem.len();
        if !mem_len.is_power_of_two() {
            bail!("NIC memory is {mem_len} bytes; an ivshmem BAR must be a power of two");
        }
        let listener = crate::fdpass::listen(socket_path, SocketType::STREAM)
            .with_context(|| format!("binding the ivshmem socket {}", socket_path.display()))?;
        let stop = Arc::new(new_eventfd().context("creating the ivshmem server's stop eventfd")?);
        let shared = Arc::new(Shared::default());
        let mut server = Server {
            nic: nic.clone(),
            listener,
            stop: stop.clone(),
            vectors,
            shared: shared.clone(),
            guest: None,
            last_id: SERVER_PEER_ID,
            ram,
        };
        let thread = std::thread::Builder::new()
            .name(format!("nic-{}-ivshmem", nic.shared().name))
            .spawn(move || server.run())
            .context("spawning the ivshmem server thread")?;
        Ok(IvshmemServer { path: socket_path.to_path_buf(), vectors, shared, stop, thread: Some(thread) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Interrupt vectors per peer.
    pub fn vectors(&self) -> u32 {
        self.vectors
    }

    /// The connected guest's peer id, once its handshake is complete and it is wired to
    /// the NIC.
    pub fn guest(&self) -> Option<u16> {
        lock(&self.shared.guest).as_ref().map(|g| g.id)
    }

    /// Guests admitted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections refused so far (a guest already connected, or a host attached through
    /// the control socket).
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Raise MSI-X vector `vector` in the connected guest (vector 0 is also what the
    /// NIC's host interrupt raises). `false` if no guest is connected or the vector does
    /// not exist. Signals merge: several raises before the guest runs its handler are
    /// one interrupt.
    pub fn interrupt_guest(&self, vector: u32) -> bool {
        let g = lock(&self.shared.guest);
        match g.as_ref().and_then(|g| g.vectors.get(vector as usize)) {
            Some(fd) => {
                // A full counter (EAGAIN) still leaves the eventfd readable.
                let _ = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes());
                true
            }
            None => false,
        }
    }
}

impl Drop for IvshmemServer {
    fn drop(&mut self) {
        let _ = rustix::io::write(self.stop.as_fd(), &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The server thread's state.
struct Server {
    nic: Arc<Nic>,
    listener: OwnedFd,
    stop: Arc<OwnedFd>,
    vectors: u32,
    shared: Arc<Shared>,
    guest: Option<Guest>,
    last_id: u16,
    ram: Option<GuestRam>,
}

/// A connected, wired guest.
struct Guest {
    id: u16,
    sock: OwnedFd,
    /// The guest's MSI-X vectors (vector 0 is on the NIC's notifier).
    vectors: Vec<Arc<OwnedFd>>,
    /// Peer 0's eventfds as handed to this guest: [`REQUEST_VECTOR`] is polled by the
    /// server thread, every other one is on the NIC's doorbell list.
    doorbells: Vec<Arc<OwnedFd>>,
}

impl Server {
    fn run(&mut self) {
        loop {
            let (stop, accept, guest_event, request) = {
                let mut fds = Vec::with_capacity(4);
                fds.push(PollFd::new(self.stop.as_ref(), PollFlags::IN));
                fds.push(PollFd::new(&self.listener, PollFlags::IN));
                if let Some(g) = &self.guest {
                    fds.push(PollFd::new(&g.sock, PollFlags::IN));
                    if let Some(d) = g.doorbells.get(REQUEST_VECTOR) {
                        fds.push(PollFd::new(d.as_ref(), PollFlags::IN));
                    }
                }
                match poll(&mut fds, None) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!("ivshmem server: poll failed: {e}; stopping");
                        break;
                    }
                }
                let ev = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
                (ev(0), ev(1), ev(2), ev(3))
            };
            if stop {
                break;
            }
            if request {
                self.service_request();
            }
            if guest_event {
                self.service_guest();
            }
            if accept {
                match rustix::net::accept_with(&self.listener, rustix::net::SocketFlags::CLOEXEC) {
                    Ok(conn) => self.admit(conn),
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                    Err(e) => {
                        tracing::warn!("ivshmem server: accept failed: {e}");
                        // Do not spin on a listener that keeps failing.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        if let Some(g) = self.guest.take() {
            self.release(g, "server stopping");
        }
    }

    /// The guest's socket is readable: end of file (it left), or data, which QEMU never
    /// sends and which is discarded (descriptors included).
    fn service_guest(&mut self) {
        let Some(g) = &self.guest else { return };
        let mut buf = [0u8; 256];
        let gone = match recv_with_fds(g.sock.as_fd(), &mut buf) {
            Ok((0, _)) => true,
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => false,
            Err(_) => true,
        };
        if gone {
            if let Some(g) = self.guest.take() {
                self.release(g, "guest disconnected");
            }
        }
    }

    fn admit(&mut self, conn: OwnedFd) {
        let s = self.nic.shared().clone();
        if let Err(e) = crate::local::check_peer(&conn) {
            // Closed before a single message: the peer never sees a descriptor.
            self.shared.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("ivshmem server of NIC {}: {e:#}", s.name);
            return;
        }
        let _ =
            rustix::net::sockopt::set_socket_timeout(&conn, rustix::net::sockopt::Timeout::Send, Some(SEND_TIMEOUT));
        if self.guest.is_some() {
            self.refuse(conn, "a guest is already connected (one endpoint per NIC)");
            return;
        }
        if s.host_attached.swap(true, Ordering::AcqRel) {
            self.refuse(conn, "a host is attached through the control socket (one endpoint per NIC)");
            return;
        }
        if let Some(ram) = &self.ram {
            unregister_guest_ram(&self.nic);
            if let Err(e) = register_guest_ram(&self.nic, &ram.path, ram.machine) {
                s.host_attached.store(false, Ordering::Release);
                self.refuse(conn, &format!("its RAM cannot be mapped: {e:#}"));
                return;
            }
        }
        let id = next_peer_id(self.last_id);
        match self.handshake(&conn, id) {
            Ok((vectors, doorbells)) => {
                self.last_id = id;
                s.notifier.add(vectors[0].clone());
                for (v, d) in doorbells.iter().enumerate() {
                    if v != REQUEST_VECTOR {
                        s.wakers.add_doorbell(d.clone());
                    }
                }
                *lock(&self.shared.guest) = Some(GuestView { id, vectors: vectors.clone() });
                self.shared.accepted.fetch_add(1, Ordering::Relaxed);
                tracing::info!("ivshmem: guest {id} connected to NIC {} ({} vectors)", s.name, self.vectors);
                self.guest = Some(Guest { id, sock: conn, vectors, doorbells });
            }
            Err(e) => {
                forget_guest(&self.nic);
                s.host_attached.store(false, Ordering::Release);
                tracing::warn!("ivshmem: handshake with a new guest failed: {e}");
            }
        }
    }

    /// Send the setup messages; returns the guest's vector eventfds and peer 0's.
    fn handshake(&self, conn: &OwnedFd, id: u16) -> io::Result<(Eventfds, Eventfds)> {
        let make = || (0..self.vectors).map(|_| new_eventfd().map(Arc::new)).collect::<io::Result<Vec<_>>>();
        let doorbells = make()?;
        let vectors = make()?;
        send_msg(conn, PROTOCOL_VERSION, None)?;
        send_msg(conn, id as i64, None)?;
        send_msg(conn, -1, Some(self.nic.shared().mem.fd()))?;
        for (peer, fds) in [(SERVER_PEER_ID, &doorbells), (id, &vectors)] {
            for fd in fds.iter() {
                send_msg(conn, peer as i64, Some(fd.as_fd()))?;
            }
        }
        Ok((vectors, doorbells))
    }

    fn refuse(&self, conn: OwnedFd, why: &str) {
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("ivshmem: refusing a guest of NIC {}: {why}", self.nic.shared().name);
        // Version, then an invalid id: QEMU reports "server sent invalid ID message" and
        // gives up (a bare close would leave QEMU 7.2 retrying its read forever).
        let _ = send_msg(&conn, PROTOCOL_VERSION, None);
        let _ = send_msg(&conn, -1, None);
        drop(conn);
    }

    /// The guest rang the device-request doorbell: carry out `ctrl::HOST_REQ` unless it
    /// was already done (doorbell signals merge, so one ring may stand for several).
    fn service_request(&mut self) {
        let Some(g) = &self.guest else { return };
        if let Some(d) = g.doorbells.get(REQUEST_VECTOR) {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(d.as_fd(), &mut b);
        }
        let id = g.id;
        if let Some((req, status)) = carry_out_request(&self.nic) {
            tracing::info!(
                "ivshmem: guest {id} of NIC {}: device request {} (seq {}): {}",
                self.nic.shared().name,
                request_name(req & host_req::OP_MASK),
                req >> host_req::SEQ_SHIFT,
                if status == host_req::STATUS_OK { "done".to_string() } else { format!("status {status}") }
            );
        }
    }

    /// Unwire a guest from the NIC and give the endpoint back.
    fn release(&self, g: Guest, why: &str) {
        let s = self.nic.shared();
        // The NIC is safe (halted, cleared, the RAM forgotten) before anyone can see the
        // guest gone and take the endpoint.
        forget_guest(&self.nic);
        s.notifier.remove(&g.vectors[0]);
        for d in &g.doorbells {
            s.wakers.remove_doorbell(d);
        }
        s.host_attached.store(false, Ordering::Release);
        *lock(&self.shared.guest) = None;
        tracing::info!("ivshmem: guest {} of NIC {} released: {why}", g.id, s.name);
        // With one guest per NIC there is no other peer to send "peer {id} left" to.
        drop(g);
    }
}

/// What the NIC does when its guest leaves: halt the processor (no DMA in flight after
/// this), zero the rings, the IPT and the staging buffers, and unregister the guest's RAM
/// (the mapping goes with its last user). The next host starts the firmware afresh.
pub fn forget_guest(nic: &Nic) {
    let s = nic.shared();
    if let Err(e) = nic.halt_and_clear() {
        tracing::error!("NIC {}: making it safe after its guest left failed: {e:#}", s.name);
    }
    let n = unregister_guest_ram(nic);
    tracing::info!("NIC {}: halted, rings and IPT cleared, {n} guest RAM region(s) forgotten", s.name);
}

fn request_name(op: u32) -> &'static str {
    match op {
        host_req::HALT => "HALT",
        host_req::START => "START",
        _ => "unknown",
    }
}

/// Carry out the request in `nic`'s `ctrl::HOST_REQ` if it differs from the last one done
/// (`ctrl::HOST_REQ_DONE`): write the status, then echo the request with `Release`.
/// Returns the request and its status, or `None` if there was nothing new.
pub fn carry_out_request(nic: &Nic) -> Option<(u32, u32)> {
    let mem = nic.mem();
    let req = mem.load(ctrl_word(ctrl::HOST_REQ), Ordering::Acquire);
    if req == mem.load_relaxed(ctrl_word(ctrl::HOST_REQ_DONE)) {
        return None;
    }
    let result = match req & host_req::OP_MASK {
        host_req::HALT => Some(nic.halt()),
        // `reset` halts (if running) and starts the firmware it last ran, waiting for the
        // ready word: the firmware starts on fresh rings with the host's configuration.
        host_req::START => Some(nic.reset()),
        _ => None,
    };
    let status = match result {
        Some(Ok(())) => host_req::STATUS_OK,
        Some(Err(e)) => {
            tracing::warn!("NIC {}: device request {req:#x} failed: {e:#}", nic.shared().name);
            host_req::STATUS_FAILED
        }
        None => host_req::STATUS_UNKNOWN_OP,
    };
    mem.store_relaxed(ctrl_word(ctrl::HOST_REQ_STATUS), status);
    mem.store(ctrl_word(ctrl::HOST_REQ_DONE), req, Ordering::Release);
    Some((req, status))
}

/// One protocol message: `val` as a little-endian i64, with at most one descriptor.
fn send_msg(sock: &OwnedFd, val: i64, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let data = val.to_le_bytes();
    let fds: &[BorrowedFd<'_>] = match &fd {
        Some(f) => std::slice::from_ref(f),
        None => &[],
    };
    let mut sent = send_with_fds(sock.as_fd(), &data, fds)?;
    // A stream socket may take part of the bytes; the descriptor went with the first
    // part, the rest follows bare.
    while sent < data.len() {
        let n = send_with_fds(sock.as_fd(), &data[sent..], &[])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "ivshmem peer stopped reading"));
        }
        sent += n;
    }
    Ok(())
}

/// Map a QEMU guest's RAM — a `memory-backend-file` created with `share=on` — and
/// register it with `nic`'s DMA space using `machine`'s guest-physical layout, so
/// guest-physical addresses are DMA addresses. The whole file is mapped read-write.
pub fn register_guest_ram(nic: &Nic, path: &Path, machine: Machine) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .with_context(|| format!("opening guest RAM {} (a symbolic link is refused)", path.display()))?;
    let m = file.metadata().with_context(|| format!("looking at guest RAM {}", path.display()))?;
    let me = crate::local::euid();
    if !m.is_file() {
        bail!("guest RAM {} is not a regular file", path.display());
    }
    if m.uid() != me && me != 0 {
        bail!(
            "guest RAM {} belongs to uid {}, not to this user (uid {me}): refusing to map it",
            path.display(),
            m.uid()
        );
    }
    if m.mode() & 0o077 != 0 {
        bail!(
            "guest RAM {} has mode {:04o}: other users could read or write the guest's memory; \
             create it mode 0600 (chmod 0600 it)",
            path.display(),
            m.mode() & 0o7777
        );
    }
    let size = file.metadata().with_context(|| format!("sizing guest RAM {}", path.display()))?.len();
    let len = usize::try_from(size).context("guest RAM larger than the address space")?;
    let map = Mapping::from_file(file, len).with_context(|| format!("mapping guest RAM {}", path.display()))?;
    nic.shared()
        .dma
        .register_guest_ram(Arc::new(map), machine)
        .map_err(|e| anyhow::anyhow!("registering guest RAM {}: {e}", path.display()))
}

/// Remove what [`register_guest_ram`] registered; returns how many regions went.
pub fn unregister_guest_ram(nic: &Nic) -> usize {
    let dma = &nic.shared().dma;
    ["guest-ram", "guest-ram-low", "guest-ram-high"].iter().map(|n| dma.unregister(n)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_requests_halt_and_restart_the_firmware_once_each() {
        use crate::link::backend::InProcSwitch;
        use crate::link::faults::FaultConfig;
        use crate::link::Link;
        use crate::nic::FirmwareKind;
        use trapeze_firmware::iface::layout::{FwState, NIC_NODE_VALID};

        let sw = InProcSwitch::new();
        let link = Link::new(3, Box::new(sw.port(3)), FaultConfig::default());
        let nic = Nic::new("req-test", link, Duration::from_micros(50)).unwrap();
        nic.start(FirmwareKind::Native).unwrap();
        let mem = nic.mem();
        let state = || mem.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire);
        assert_eq!(mem.load_relaxed(ctrl_word(ctrl::NIC_NODE)), NIC_NODE_VALID | 3);
        assert_eq!(carry_out_request(&nic), None, "no request yet");

        let halt = 1 << host_req::SEQ_SHIFT | host_req::HALT;
        mem.store(ctrl_word(ctrl::HOST_REQ), halt, Ordering::Release);
        assert_eq!(carry_out_request(&nic), Some((halt, host_req::STATUS_OK)));
        assert_eq!(state(), FwState::Halted as u32);
        assert!(!nic.is_running());
        assert_eq!(carry_out_request(&nic), None, "a repeated doorbell does nothing");

        let start = 2 << host_req::SEQ_SHIFT | host_req::START;
        mem.store(ctrl_word(ctrl::HOST_REQ), start, Ordering::Release);
        assert_eq!(carry_out_request(&nic), Some((start, host_req::STATUS_OK)));
        assert_eq!(state(), FwState::Ready as u32);
        assert_eq!(mem.load(ctrl_word(ctrl::HOST_REQ_DONE), Ordering::Acquire), start);

        let bad = 3 << host_req::SEQ_SHIFT | 0x7F;
        mem.store(ctrl_word(ctrl::HOST_REQ), bad, Ordering::Release);
        assert_eq!(carry_out_request(&nic), Some((bad, host_req::STATUS_UNKNOWN_OP)));
        assert!(nic.is_running());
        nic.halt().unwrap();
    }

    #[test]
    fn peer_ids_skip_the_server_and_wrap() {
        assert_eq!(next_peer_id(SERVER_PEER_ID), 1);
        assert_eq!(next_peer_id(41), 42);
        assert_eq!(next_peer_id(MAX_PEER_ID), 1);
    }
}
