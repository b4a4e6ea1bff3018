// SPDX-License-Identifier: GPL-2.0-only
//! The client side of a `gmsd` control socket: single and batched put/get, and stat. Every
//! call has a deadline (the socket's read and write timeouts): a daemon that stops
//! answering is an error, never a hang. Errors say what happened in words: the daemon is
//! not running (no socket, or nobody listening on it), it did not answer in time, or it
//! closed the connection; each names the socket.

use crate::proto::{
    decode_get_reply, decode_put_reply, read_frame, reply_body, write_frame, GetOutcome, PutOutcome, Request, Stat,
    MAX_BATCH, PAGE_BYTES,
};
use crate::units::Human;
use anyhow::{anyhow, bail};
use gms::prelude::PageId;
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default deadline of one request (a batch of pages included; longer than the daemon's
/// own last-resort job timeout, so a slow batch is answered rather than abandoned).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Pages per request in the batch helpers (512 × 8 KiB = 4 MiB).
pub const BATCH: usize = 512;

/// The default control socket of node `n`: `$XDG_RUNTIME_DIR/trapeze/gmsd-N.sock`, or
/// `/tmp/trapeze-UID/gmsd-N.sock` without a runtime directory (the NICs' directory,
/// [`trapeze_vnic::local::runtime_dir`]; the daemon makes it private).
pub fn default_socket(n: u16) -> PathBuf {
    trapeze_vnic::local::runtime_dir().join(format!("gmsd-{n}.sock"))
}

/// A connection to one daemon.
pub struct Client {
    stream: UnixStream,
    path: PathBuf,
    timeout: Duration,
}

/// Why connecting to `path` failed, in words. `connect(2)` refuses a file that is not a
/// socket, and a socket nobody listens on, with the same `ECONNREFUSED`, so the file's type
/// tells the two apart; a socket of another type (`EPROTOTYPE`) is a NIC's control socket
/// (`SOCK_SEQPACKET`), the only other kind of socket the project's programs serve.
fn connect_error(path: &Path, e: io::Error) -> anyhow::Error {
    let shown = path.display();
    let fix = "give --socket the path gmsd printed at start-up, or --node N for its default socket";
    if e.kind() == io::ErrorKind::ConnectionRefused {
        if let Some(what) = trapeze_vnic::control::not_a_socket(path) {
            return anyhow!("{shown} is not a socket but {what}, so no gmsd listens there: {fix}");
        }
    }
    match e.kind() {
        io::ErrorKind::NotFound => anyhow!("gmsd is not running: there is no socket at {shown}"),
        io::ErrorKind::ConnectionRefused => {
            anyhow!("gmsd is not running: nobody listens at {shown} (a socket left behind by a daemon that died)")
        }
        io::ErrorKind::PermissionDenied => anyhow!("cannot connect to gmsd at {shown}: permission denied"),
        _ if e.raw_os_error() == Some(rustix::io::Errno::PROTOTYPE.raw_os_error()) => anyhow!(
            "{shown} is not a gmsd control socket: something serves another socket type there (a NIC's control \
             socket, trapeze-nic); {fix}"
        ),
        _ => anyhow!("cannot connect to gmsd at {shown}: {e}"),
    }
}

impl Client {
    /// Connect to the daemon listening at `path`.
    pub fn connect(path: &Path) -> anyhow::Result<Client> {
        let stream = UnixStream::connect(path).map_err(|e| connect_error(path, e))?;
        let mut c = Client { stream, path: path.to_path_buf(), timeout: DEFAULT_TIMEOUT };
        c.set_timeout(DEFAULT_TIMEOUT)?;
        Ok(c)
    }

    /// The deadline of each request (more than zero).
    pub fn set_timeout(&mut self, t: Duration) -> anyhow::Result<()> {
        if t.is_zero() {
            bail!("a gmsd request timeout must be more than zero");
        }
        self.stream.set_read_timeout(Some(t))?;
        self.stream.set_write_timeout(Some(t))?;
        self.timeout = t;
        Ok(())
    }

    /// What an I/O error on the connection means, in words.
    fn io_error(&self, e: anyhow::Error, doing: &str) -> anyhow::Error {
        let path = self.path.display();
        let kind = e.chain().find_map(|c| c.downcast_ref::<io::Error>()).map(|io| io.kind());
        match kind {
            Some(io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                anyhow!("timed out {doing} gmsd at {path}: no progress within {}", Human(self.timeout))
            }
            Some(io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) => {
                anyhow!("gmsd at {path} closed the connection while {doing} it (did the daemon exit?)")
            }
            _ => e.context(format!("{doing} gmsd at {path}")),
        }
    }

    fn call(&mut self, req: &Request) -> anyhow::Result<Vec<u8>> {
        write_frame(&mut self.stream, &req.encode()).map_err(|e| self.io_error(e.into(), "sending a request to"))?;
        read_frame(&mut self.stream).map_err(|e| self.io_error(e, "waiting for a reply from"))
    }

    /// Put `data` (1 to [`PAGE_BYTES`] bytes; the page keeps that length) as `page`.
    pub fn put(&mut self, page: PageId, data: &[u8]) -> anyhow::Result<PutOutcome> {
        Ok(self.put_many(&[(page, data)])?[0])
    }

    /// Put many pages, [`BATCH`] per request; one outcome per page, in order.
    pub fn put_many(&mut self, pages: &[(PageId, &[u8])]) -> anyhow::Result<Vec<PutOutcome>> {
        let mut out = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(BATCH.min(MAX_BATCH)) {
            if let Some((p, d)) = chunk.iter().find(|(_, d)| d.len() > PAGE_BYTES) {
                bail!("page {}:{}: {} bytes exceed the page size {PAGE_BYTES}", p.space, p.page, d.len());
            }
            let req = Request::Put(chunk.iter().map(|(p, d)| (*p, d.to_vec())).collect());
            let res = decode_put_reply(&self.call(&req)?)?;
            if res.len() != chunk.len() {
                bail!("gmsd answered {} puts for {}", res.len(), chunk.len());
            }
            out.extend(res);
        }
        Ok(out)
    }

    /// Read `page` through the daemon's page cache and read-ahead.
    pub fn get(&mut self, page: PageId) -> anyhow::Result<GetOutcome> {
        Ok(self.get_many(&[page], false)?.remove(0))
    }

    /// Get many pages, [`BATCH`] per request. `network_only`: plain getpages (no local
    /// cache, no read-ahead).
    pub fn get_many(&mut self, pages: &[PageId], network_only: bool) -> anyhow::Result<Vec<GetOutcome>> {
        let mut out = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(BATCH.min(MAX_BATCH)) {
            let res = decode_get_reply(&self.call(&Request::Get { network_only, pages: chunk.to_vec() })?)?;
            if res.len() != chunk.len() {
                bail!("gmsd answered {} gets for {}", res.len(), chunk.len());
            }
            out.extend(res);
        }
        Ok(out)
    }

    pub fn stat(&mut self) -> anyhow::Result<Stat> {
        let body = self.call(&Request::Stat)?;
        serde_json::from_slice(reply_body(&body)?)
            .map_err(|e| anyhow!("a stat reply that is not the expected JSON: {e}"))
    }
}
