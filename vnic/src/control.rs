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
//! `unregister_region`. Every response has `"ok"`; failures carry `"error"`. What a
//! connection attached or registered is removed when it closes, so a host that goes
//! away can no longer be the target of a DMA.

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
}

/// The default control-socket path of NIC `name`: `$XDG_RUNTIME_DIR/trapeze/NAME.sock`,
/// or `/tmp/trapeze-UID/NAME.sock`.
pub fn default_socket_path(name: &str) -> PathBuf {
    socket_dir().join(format!("{name}.sock"))
}

/// Where NICs put their control sockets.
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("trapeze"),
        _ => PathBuf::from(format!("/tmp/trapeze-{}", rustix::process::getuid().as_raw())),
    }
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

/// Serve `nic`'s control socket at `path`.
pub fn serve(nic: Arc<Nic>, path: &Path) -> anyhow::Result<ControlServer> {
    let listener = crate::fdpass::listen(path, SocketType::SEQPACKET)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name(format!("nic-{}-ctl", nic.shared().name))
        .spawn(move || accept_loop(nic, listener, st))?;
    Ok(ControlServer { path: path.to_path_buf(), stop, thread: Some(thread) })
}

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
        let (n, s) = (nic.clone(), stop.clone());
        if let Ok(t) = std::thread::Builder::new().name("nic-ctl-conn".into()).spawn(move || connection(n, conn, s)) {
            conns.push(t);
        }
        conns.retain(|t| !t.is_finished());
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
        Request::Status => (json!({ "ok": true, "status": nic.status() }), Vec::new()),
        Request::Halt => {
            nic.halt()?;
            (json!({ "ok": true }), Vec::new())
        }
        Request::Reset => {
            nic.reset()?;
            (json!({ "ok": true, "status": nic.status() }), Vec::new())
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
            (json!({ "ok": true, "status": nic.status() }), Vec::new())
        }
        Request::Load { path } => {
            let bytes = read_image_file(Path::new(&path))?;
            let info = nic.load_image(&bytes)?;
            (json!({ "ok": true, "image": info, "status": nic.status() }), Vec::new())
        }
        Request::Attach => {
            if att.host || s.host_attached.swap(true, Ordering::AcqRel) {
                bail!("NIC {} already has a host attached (one endpoint per NIC)", s.name);
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
    })
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
    pub fn connect(path: &Path) -> anyhow::Result<Self> {
        let sock = crate::fdpass::connect(path, SocketType::SEQPACKET).with_context(|| {
            format!("connecting to the NIC control socket {} (is trapeze-nic running?)", path.display())
        })?;
        Ok(ControlClient { sock })
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
            bail!("the NIC did not answer within {timeout:?}");
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
