// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's control socket: status, halt/start, and attaching hosts.
//!
//! A `SOCK_SEQPACKET` Unix socket; each request and each response is one JSON object in
//! one packet, descriptors travel with SCM_RIGHTS. Requests ([`Request`], tagged by
//! `"cmd"`): `status`, `halt`, `start` (`"mode": "native"`, or `"flashed"` to restart the
//! last loaded image), `load` (`"path"`: a firmware ELF the NIC reads, validates and runs
//! in flashed mode; answered with `"image"` and the new `"status"`), `attach` (resets the processor so the host starts on a fresh endpoint, then answers with
//! three descriptors: the NIC-memory memfd, a doorbell eventfd the host writes after
//! posting work, and an interrupt eventfd the NIC signals), `register_region`
//! (`name`, `dma_base`, `len`, with the region's memfd attached) and
//! `unregister_region`, `ping` (`peer`, `wait_ms`: one link-level echo to another NIC,
//! answered with `"rtt_ns"` or `null`). Every response has `"ok"`; failures carry
//! `"error"`. What a
//! connection attached or registered is removed when it closes, so a host that goes
//! away can no longer be the target of a DMA; when the connection that attached the host
//! closes, the NIC is first halted and its rings and IPT cleared
//! ([`Nic::halt_and_clear`]), as when a guest leaves.
//!
//! A server never takes over a socket another server answers on, and never creates a
//! directory for an explicit path ([`prepare_socket_path`]); only the default socket
//! directory ([`create_socket_dir`]) is made, mode 0700 and owner-checked. The socket is
//! mode 0600 and every connection's peer credentials are checked: only the NIC's own
//! user and root are served ([`crate::local`]). At most [`MAX_CONNECTIONS`] connections
//! are served at once; each has one [`MAX_MSG`] buffer. NIC names are checked by
//! [`check_name`].

use crate::engines::new_eventfd;
use crate::fdpass::{recv_with_fds, send_with_fds};
use crate::nic::{FirmwareKind, Nic};
use crate::shm::Mapping;
use anyhow::{bail, Context};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::SocketType;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest request or response packet.
pub const MAX_MSG: usize = 64 * 1024;
/// Most connections a control socket serves at once; a further one is answered with an
/// error and closed.
pub const MAX_CONNECTIONS: usize = 16;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Status,
    Halt,
    /// Halt the processor and start the same firmware again (rings reset: hosts re-attach).
    Reset,
    Start {
        mode: String,
    },
    /// Load the firmware ELF image at `path` (read by the NIC) and run it in flashed mode.
    Load {
        path: String,
    },
    Attach,
    RegisterRegion {
        name: String,
        dma_base: u64,
        len: u64,
    },
    UnregisterRegion {
        name: String,
    },
    /// Send one link-level echo request to node `peer` and wait up to `wait_ms` (at most
    /// [`MAX_PING_WAIT_MS`]) for its reply ([`Nic::ping`]); answered with `"rtt_ns"`, the
    /// round trip between the two NICs, or `null` if no reply came in time.
    Ping {
        peer: u16,
        wait_ms: u64,
    },
}

/// The longest a `ping` request waits for its reply, ms: its connection's thread waits
/// with it, and a NIC told to stop joins that thread before it exits.
pub const MAX_PING_WAIT_MS: u64 = 10_000;

/// Longest NIC name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// The default control-socket path of NIC `name`: `$XDG_RUNTIME_DIR/trapeze/NAME.sock`,
/// or `/tmp/trapeze-UID/NAME.sock`. Check the name with [`check_name`] first.
pub fn default_socket_path(name: &str) -> PathBuf {
    socket_dir().join(format!("{name}.sock"))
}

/// Check a NIC name: it names a file in the socket directory, so it is 1 to
/// [`MAX_NAME_LEN`] bytes of ASCII letters, digits, `.`, `_` and `-`, not starting with `.`
/// (so never `.`, `..`, a path with `/`, or a name with a NUL or a space).
pub fn check_name(name: &str) -> anyhow::Result<()> {
    const RULE: &str = "a NIC name is 1-64 of the characters A-Z a-z 0-9 . _ - and does not start with '.'";
    if name.is_empty() {
        bail!("the NIC name is empty ({RULE})");
    }
    if name.len() > MAX_NAME_LEN {
        bail!("the NIC name {name:?} is {} bytes long, over the limit of {MAX_NAME_LEN} ({RULE})", name.len());
    }
    if let Some(c) = name.chars().find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        let why = match c {
            '/' => "a name is a file name, not a path: give --control PATH for a socket elsewhere".to_string(),
            '\0' => "NUL".to_string(),
            c => format!("{c:?} is not allowed"),
        };
        bail!("the NIC name {name:?} contains {c:?} ({why}; {RULE})");
    }
    if name.starts_with('.') {
        bail!("the NIC name {name:?} starts with '.' ({RULE})");
    }
    Ok(())
}

/// Create the default socket directory ([`socket_dir`], mode 0700) if it is missing, or
/// check the one there ([`crate::local::ensure_private_dir`]: ours, not a symlink, not
/// writable by others): the only directory a NIC creates. Explicit socket paths must be
/// in existing directories.
pub fn create_socket_dir() -> anyhow::Result<PathBuf> {
    crate::local::private_runtime_dir().context("the default socket directory")
}

/// What is at a Unix socket path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketState {
    /// No file.
    Absent,
    /// A socket file nobody answers on (left by a process that ended).
    Stale,
    /// A socket something answers on.
    Live,
    /// A socket something of another socket type answers on (`EPROTOTYPE`): a NIC's
    /// control socket is `SOCK_SEQPACKET`; a `gmsd` control socket and a NIC's ivshmem
    /// socket are `SOCK_STREAM`.
    OtherKind,
}

/// Which of this project's servers listen on a socket of `kind`, in words.
fn servers_of(kind: SocketType) -> &'static str {
    if kind == SocketType::SEQPACKET {
        "a NIC"
    } else {
        "a gmsd daemon or a NIC's ivshmem server"
    }
}

/// What the file at `path` is when it is there and not a socket (`a regular file`, `a
/// directory`, `a special file`), for the errors of clients: `connect(2)` answers
/// `ECONNREFUSED` for such a file as for a socket nobody listens on.
pub fn not_a_socket(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path).ok()?.file_type();
    if t.is_socket() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_file() {
        Some("a regular file")
    } else {
        Some("a special file")
    }
}

/// The other socket type of this project's servers (see [`SocketState::OtherKind`]).
fn other_kind(kind: SocketType) -> SocketType {
    if kind == SocketType::SEQPACKET {
        SocketType::STREAM
    } else {
        SocketType::SEQPACKET
    }
}

/// Look at `path` without disturbing a server there beyond one connection that closes at
/// once: a socket file is connected to (as `kind`) to see whether something answers. Any
/// other kind of file is an error (it is never a NIC's to replace).
pub fn probe_socket(path: &Path, kind: SocketType) -> anyhow::Result<SocketState> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {}
        Ok(_) => bail!("{} exists and is not a socket: refusing to replace it", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SocketState::Absent),
        Err(e) => return Err(e).with_context(|| format!("looking at {}", path.display())),
    }
    match crate::fdpass::connect(path, kind) {
        Ok(_) => Ok(SocketState::Live),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SocketState::Absent),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::CONNREFUSED.raw_os_error()) => Ok(SocketState::Stale),
        // A server of another socket type listens there.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PROTOTYPE.raw_os_error()) => Ok(SocketState::OtherKind),
        Err(e) => Err(e).with_context(|| format!("connecting to {} to see whether it is in use", path.display())),
    }
}

/// Make `path` ready for a server to listen on as `what` (e.g. "control socket"): its
/// directory must exist (nothing is created) and not be writable by everyone without the
/// sticky bit ([`crate::local::check_socket_dir`]), a live socket there is refused naming
/// what serves it (told apart by socket type: [`SocketState::OtherKind`]), a stale one is
/// removed (and logged), any other file is refused.
pub fn prepare_socket_path(path: &Path, kind: SocketType, what: &str) -> anyhow::Result<()> {
    crate::local::check_socket_dir(path, what)?;
    if rustix::net::SocketAddrUnix::new(path).is_err() {
        bail!("the {what} path {} is too long for a Unix socket (at most 107 bytes)", path.display());
    }
    match probe_socket(path, kind)? {
        SocketState::Absent => {}
        SocketState::Live => bail!(
            "the {what} {} is in use: {} is serving it (stop that first, or choose another name or path)",
            path.display(),
            servers_of(kind)
        ),
        SocketState::OtherKind => bail!(
            "the {what} {} is in use by something else: {} is serving it (choose another name or path)",
            path.display(),
            servers_of(other_kind(kind))
        ),
        SocketState::Stale => {
            tracing::info!("replacing the stale {what} {} (nothing answers on it)", path.display());
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing the stale {what} {}", path.display())),
            }
        }
    }
    Ok(())
}

/// A duration for people: `850 µs`, `12.5 ms`, `1.0 s`, `4 min 12 s`, `2 h 5 min`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    let whole = d.as_secs();
    if whole >= 3600 {
        format!("{} h {} min", whole / 3600, whole % 3600 / 60)
    } else if whole >= 60 {
        format!("{} min {} s", whole / 60, whole % 60)
    } else if s >= 1.0 {
        format!("{s:.1} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{} µs", d.as_micros())
    }
}

/// Where NICs put their control sockets ([`crate::local::runtime_dir`]).
pub fn socket_dir() -> PathBuf {
    crate::local::runtime_dir()
}

/// A running control server; stops (and removes its socket) when dropped.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serve `nic`'s control socket at `path`, whose directory must exist. A socket another
/// server answers on is refused; a stale one is replaced ([`prepare_socket_path`]).
pub fn serve(nic: Arc<Nic>, path: &Path) -> anyhow::Result<ControlServer> {
    prepare_socket_path(path, SocketType::SEQPACKET, "control socket")?;
    let listener = crate::fdpass::listen(path, SocketType::SEQPACKET)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name(format!("nic-{}-ctl", nic.shared().name))
        .spawn(move || accept_loop(nic, listener, st))?;
    Ok(ControlServer { path: path.to_path_buf(), stop, thread: Some(thread) })
}

/// How long an attach waits for a host that has just disconnected to be detached.
const DETACH_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn wait_readable(fd: &OwnedFd, ms: i64) -> bool {
    let ts = rustix::event::Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

fn accept_loop(nic: Arc<Nic>, listener: OwnedFd, stop: Arc<AtomicBool>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        if !wait_readable(&listener, 100) {
            continue;
        }
        let Ok(conn) = rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC) else { continue };
        if let Err(e) = crate::local::check_peer(&conn) {
            tracing::warn!("control socket of NIC {}: {e:#}", nic.shared().name);
            continue;
        }
        conns.retain(|t| !t.is_finished());
        if conns.len() >= MAX_CONNECTIONS {
            let why = format!(
                "NIC {} already serves {MAX_CONNECTIONS} control connections: close one and try again",
                nic.shared().name
            );
            tracing::warn!("control socket: refused a connection: {why}");
            // Answer its first request (waited for briefly) rather than close with it unread,
            // which would reset the connection before the client could read why.
            if wait_readable(&conn, 200) {
                let _ = recv_with_fds(conn.as_fd(), &mut [0u8; 256]);
            }
            let answer = serde_json::to_vec(&json!({ "ok": false, "error": why })).unwrap_or_default();
            let _ = send_with_fds(conn.as_fd(), &answer, &[]);
            continue;
        }
        let (n, s) = (nic.clone(), stop.clone());
        if let Ok(t) = std::thread::Builder::new().name("nic-ctl-conn".into()).spawn(move || connection(n, conn, s)) {
            conns.push(t);
        }
    }
    for t in conns {
        let _ = t.join();
    }
}

/// What one connection attached, undone when it closes.
#[derive(Default)]
struct Attached {
    host: bool,
    doorbells: Vec<Arc<OwnedFd>>,
    irqs: Vec<Arc<OwnedFd>>,
    regions: Vec<String>,
}

fn connection(nic: Arc<Nic>, conn: OwnedFd, stop: Arc<AtomicBool>) {
    let mut att = Attached::default();
    let mut buf = vec![0u8; MAX_MSG];
    while !stop.load(Ordering::Acquire) {
        if !wait_readable(&conn, 100) {
            continue;
        }
        let (n, fds) = match recv_with_fds(conn.as_fd(), &mut buf) {
            Ok((0, _)) | Err(_) => break,
            Ok(x) => x,
        };
        let (resp, out_fds) = match serde_json::from_slice::<Request>(&buf[..n]) {
            Ok(req) => match handle(&nic, req, fds, &mut att) {
                Ok((v, f)) => (v, f),
                Err(e) => (json!({ "ok": false, "error": format!("{e:#}") }), Vec::new()),
            },
            Err(e) => (json!({ "ok": false, "error": format!("malformed request: {e}") }), Vec::new()),
        };
        let bytes = serde_json::to_vec(&resp).unwrap_or_default();
        let borrowed: Vec<_> = out_fds.iter().map(|f| f.as_fd()).collect();
        if send_with_fds(conn.as_fd(), &bytes, &borrowed).is_err() {
            break;
        }
    }
    let s = nic.shared();
    if att.host {
        // Before its regions go: nothing of the departed host's is acted on after this.
        match nic.halt_and_clear() {
            Ok(()) => tracing::info!("NIC {}: its host left: halted, rings and IPT cleared", s.name),
            Err(e) => tracing::error!("NIC {}: making it safe after its host left failed: {e:#}", s.name),
        }
        s.host_attached.store(false, Ordering::Release);
    }
    for d in &att.doorbells {
        s.wakers.remove_doorbell(d);
    }
    for i in &att.irqs {
        s.notifier.remove(i);
    }
    for r in &att.regions {
        s.dma.unregister(r);
    }
}

fn handle(nic: &Nic, req: Request, mut fds: Vec<OwnedFd>, att: &mut Attached) -> anyhow::Result<(Value, Vec<OwnedFd>)> {
    let s = nic.shared();
    Ok(match req {
        Request::Status => (json!({ "ok": true, "status": status_value(nic) }), Vec::new()),
        Request::Halt => {
            nic.halt()?;
            (json!({ "ok": true }), Vec::new())
        }
        Request::Reset => {
            nic.reset()?;
            (json!({ "ok": true, "status": status_value(nic) }), Vec::new())
        }
        Request::Start { mode } => {
            match mode.as_str() {
                "native" => nic.start(FirmwareKind::Native)?,
                "flashed" => match nic.last_image() {
                    Some(img) => nic.start(FirmwareKind::Flashed(img))?,
                    None => bail!("no image was loaded yet: use `load` with an ELF file"),
                },
                other => bail!("unknown processor mode {other:?} (expected \"native\" or \"flashed\")"),
            }
            (json!({ "ok": true, "status": status_value(nic) }), Vec::new())
        }
        Request::Load { path } => {
            let bytes = read_image_file(Path::new(&path))?;
            let info = nic.load_image(&bytes)?;
            (json!({ "ok": true, "image": info, "status": status_value(nic) }), Vec::new())
        }
        Request::Attach => {
            if att.host {
                bail!("this connection already has the NIC's host attached");
            }
            // A host that has just closed its connection is detached by that connection's
            // thread, which may not have run yet: give it a moment before refusing.
            let t0 = std::time::Instant::now();
            while s.host_attached.swap(true, Ordering::AcqRel) {
                if t0.elapsed() >= DETACH_GRACE {
                    bail!("NIC {} already has a host attached (one endpoint per NIC)", s.name);
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            att.host = true;
            // A fresh endpoint for the new host: the firmware's ring positions restart
            // with the host's (a running firmware mid-ring would not match them).
            if let Err(e) = nic.reset() {
                s.host_attached.store(false, Ordering::Release);
                att.host = false;
                return Err(e.context("resetting the NIC for the new host"));
            }
            let db = Arc::new(new_eventfd()?);
            let irq = Arc::new(new_eventfd()?);
            let mem = s.mem.fd().try_clone_to_owned()?;
            let out = vec![mem, db.as_fd().try_clone_to_owned()?, irq.as_fd().try_clone_to_owned()?];
            s.wakers.add_doorbell(db.clone());
            s.notifier.add(irq.clone());
            att.doorbells.push(db);
            att.irqs.push(irq);
            (json!({ "ok": true, "nic_mem_bytes": s.mem.len(), "name": s.name, "node": s.node }), out)
        }
        Request::RegisterRegion { name, dma_base, len } => {
            if fds.len() != 1 {
                bail!("register_region needs exactly one descriptor (the region's memfd), got {}", fds.len());
            }
            let len_usize = usize::try_from(len).context("region too large")?;
            crate::shm::check_sealed(&fds[0]).with_context(|| format!("region {name:?} refused"))?;
            let map = Arc::new(Mapping::from_fd(fds.remove(0), len_usize).context("mapping the region")?);
            s.dma.register(&name, dma_base, map, 0, len).map_err(|e| anyhow::anyhow!("{e}"))?;
            att.regions.push(name);
            (json!({ "ok": true }), Vec::new())
        }
        Request::UnregisterRegion { name } => {
            let n = s.dma.unregister(&name);
            att.regions.retain(|r| *r != name);
            (json!({ "ok": true, "removed": n }), Vec::new())
        }
        Request::Ping { peer, wait_ms } => {
            if !(1..=MAX_PING_WAIT_MS).contains(&wait_ms) {
                bail!("ping: wait_ms {wait_ms} is not in 1..={MAX_PING_WAIT_MS}");
            }
            let rtt = nic.ping(peer, Duration::from_millis(wait_ms))?;
            (json!({ "ok": true, "rtt_ns": rtt.map(|d| d.as_nanos() as u64) }), Vec::new())
        }
    })
}

/// What a status answer carries: [`Nic::status`] and the NIC's node id on its link.
fn status_value(nic: &Nic) -> Value {
    let mut v = serde_json::to_value(nic.status()).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    v["node"] = json!(nic.shared().node);
    v
}

/// Read a firmware image file, refusing anything larger than an image can be.
fn read_image_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let len = std::fs::metadata(path).with_context(|| format!("image file {}", path.display()))?.len();
    if len > crate::image::MAX_IMAGE_FILE_BYTES as u64 {
        bail!(
            "image refused: {} is {len} bytes, over the {} MiB limit",
            path.display(),
            crate::image::MAX_IMAGE_FILE_BYTES >> 20
        );
    }
    std::fs::read(path).with_context(|| format!("reading image file {}", path.display()))
}

/// A client of a NIC's control socket.
pub struct ControlClient {
    sock: OwnedFd,
}

impl ControlClient {
    /// Connect to the control socket at `path`; the error says whether there is no socket
    /// there or nothing answers on it.
    pub fn connect(path: &Path) -> anyhow::Result<Self> {
        match crate::fdpass::connect(path, SocketType::SEQPACKET) {
            Ok(sock) => Ok(ControlClient { sock }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("no NIC control socket at {} (is trapeze-nic running with that name?)", path.display())
            }
            // connect(2) refuses a file that is not a socket with ECONNREFUSED too.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::CONNREFUSED.raw_os_error()) => {
                match not_a_socket(path) {
                    Some(kind) => bail!("{} is not a socket but {kind}: no NIC serves it", path.display()),
                    None => bail!(
                        "nothing answers on the NIC control socket {} (left by a NIC that is no longer running)",
                        path.display()
                    ),
                }
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PROTOTYPE.raw_os_error()) => bail!(
                "{} is not a NIC control socket: {} is serving it (a stream socket)",
                path.display(),
                servers_of(SocketType::STREAM)
            ),
            Err(e) => Err(e).with_context(|| format!("connecting to the NIC control socket {}", path.display())),
        }
    }

    /// Send `req` (with `fds`) and wait up to `timeout` for the answer.
    pub fn request_with_fds(
        &self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
        timeout: Duration,
    ) -> anyhow::Result<(Value, Vec<OwnedFd>)> {
        let bytes = serde_json::to_vec(req)?;
        send_with_fds(self.sock.as_fd(), &bytes, fds).context("sending the request")?;
        if !wait_readable(&self.sock, timeout.as_millis() as i64) {
            bail!("the NIC did not answer within {}", human_duration(timeout));
        }
        let mut buf = vec![0u8; MAX_MSG];
        let (n, fds) = recv_with_fds(self.sock.as_fd(), &mut buf).context("reading the answer")?;
        if n == 0 {
            bail!("the NIC closed the control connection");
        }
        let v: Value = serde_json::from_slice(&buf[..n]).context("malformed answer")?;
        if v["ok"] != json!(true) {
            bail!("{}", v["error"].as_str().unwrap_or("request failed"));
        }
        Ok((v, fds))
    }

    pub fn request(&self, req: &Request) -> anyhow::Result<Value> {
        Ok(self.request_with_fds(req, &[], Duration::from_secs(30))?.0)
    }
}
