// SPDX-License-Identifier: GPL-2.0-only
//! The client side of a `gmsd` control socket: single and batched put/get, and stat. Every
//! call has a deadline (the socket's read and write timeouts): a daemon that stops
//! answering is an error, never a hang.

use crate::proto::{
    decode_get_reply, decode_put_reply, read_frame, reply_body, write_frame, GetOutcome, PutOutcome, Request, Stat,
    MAX_BATCH, PAGE_BYTES,
};
use anyhow::{bail, Context};
use gms::prelude::PageId;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default deadline of one request (a batch of pages included; longer than the daemon's
/// own last-resort job timeout, so a slow batch is answered rather than abandoned).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Pages per request in the batch helpers (512 × 8 KiB = 4 MiB).
pub const BATCH: usize = 512;

/// The default control socket of node `n`: `$XDG_RUNTIME_DIR/trapeze/gmsd-N.sock`, or
/// `/tmp/trapeze-UID/gmsd-N.sock` without a runtime directory.
pub fn default_socket(n: u16) -> PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("trapeze"),
        None => PathBuf::from(format!("/tmp/trapeze-{}", rustix::process::getuid().as_raw())),
    };
    dir.join(format!("gmsd-{n}.sock"))
}

/// A connection to one daemon.
pub struct Client {
    stream: UnixStream,
    path: PathBuf,
}

impl Client {
    /// Connect to the daemon listening at `path`.
    pub fn connect(path: &Path) -> anyhow::Result<Client> {
        let stream = UnixStream::connect(path)
            .with_context(|| format!("cannot connect to gmsd at {} (is it running?)", path.display()))?;
        let c = Client { stream, path: path.to_path_buf() };
        c.set_timeout(DEFAULT_TIMEOUT)?;
        Ok(c)
    }

    /// The deadline of each request.
    pub fn set_timeout(&self, t: Duration) -> anyhow::Result<()> {
        self.stream.set_read_timeout(Some(t))?;
        self.stream.set_write_timeout(Some(t))?;
        Ok(())
    }

    fn call(&mut self, req: &Request) -> anyhow::Result<Vec<u8>> {
        let path = self.path.display();
        write_frame(&mut self.stream, &req.encode()).with_context(|| format!("sending to gmsd at {path}"))?;
        read_frame(&mut self.stream).with_context(|| format!("waiting for gmsd at {path}"))
    }

    /// Put `data` (at most one page; shorter is zero-padded) as `page`.
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
        serde_json::from_slice(reply_body(&body)?).context("a stat reply that is not the expected JSON")
    }
}
