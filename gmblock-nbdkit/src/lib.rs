// SPDX-License-Identifier: GPL-2.0-only
//! `gmblock-nbdkit`: an nbdkit plugin that exports a gmblock server's volume, or a volume
//! striped over several gmblock servers, over NBD, so stock clients — `nbdinfo`,
//! `nbdcopy`, `qemu-img`, the kernel's `nbd-client` — read and write it.
//!
//! ```text
//! nbdkit -f libgmblock_nbdkit.so server=1=127.0.0.1:7001 node=9 listen=127.0.0.1:7009
//! nbdkit -f libgmblock_nbdkit.so server=1=127.0.0.1:7001 server=2=127.0.0.1:7002 \
//!        grain=32K node=9 listen=127.0.0.1:7009
//! ```
//!
//! (`gmblock ... export` runs those lines.) nbdkit owns the NBD side: the handshake, the
//! request parsing, the bounds and size checks, the error replies, many connections.
//! This crate is what nbdkit calls per request ([`Export`], through the callback table the
//! `nbdkit` crate builds in `ffi.rs`): each read, write, flush and trim goes over NetRPC
//! to gmblockd through one [`Backend`] — a [`gmblock::client::Client`] of one server, or
//! a [`gmblock::striped::StripedClient`] when `server=` is repeated or `grain=` given —
//! a station of its own on the UDP link, made after nbdkit forked, shared by every
//! connection behind a mutex. Reads stream through it together, each joining the window
//! while others are in flight ([`batch`]); writes, flushes and trims take it one at a time.
//! NBD allows any offset and length; gmblock wants 4 KiB-aligned requests of at most
//! 1 MiB: [`span`] cuts and patches.
//!
//! A striped export's servers must hold volumes of one size (a stripe set whose members
//! differ is refused when nbdkit starts, naming them), each server once, the grain a
//! multiple of 4 KiB (above 32 KiB, of 32 KiB: the striping client's read-ahead cuts).
//! A sequential stream is read ahead by [`DEFAULT_READAHEAD_STRIPES`] stripes unless
//! `readahead=` says otherwise (`readahead=0`: none). Fetches still in flight when the
//! export goes idle are given up on when the next request comes, if the gap was longer
//! than the chunk timeout; their frames go back to the pool only once the NIC can no
//! longer deliver a late reply into them (`gmblock`'s `hold` module).
//!
//! What a client is told: a write is acknowledged once the server (every server of a
//! stripe it touches) acknowledged every block of it (written with `O_DIRECT`); `FLUSH`
//! is gmblock's flush (`fdatasync`) on every server; FUA is nbdkit's emulation (a flush
//! after the write); multi-conn is offered because every connection goes through the one
//! client, so a flush on any of them covers writes acknowledged on all. Zeroing is
//! nbdkit's fallback (writes of zeros). Errors reach the client as NBD errors (`EIO` from
//! a server, `EINVAL` for a range the volume does not hold, `EROFS` for a read-only
//! export) and end only that request.

pub mod batch;
pub mod span;

mod ffi;

use gmblock::client::Client;
use gmblock::proto::BLOCK_BYTES;
use gmblock::station::{Placement, StationConfig};
use gmblock::striped::{StripeConfig, StripedClient, DEFAULT_READAHEAD_STRIPES};
use gmblock::Volume;
use nbdkit::{Error, FuaFlags, Result, Server, ThreadModel};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What the command line gave (`key=value` after the plugin's name).
#[derive(Clone, Debug)]
struct Settings {
    /// `server=` in the order given (the stripe order).
    servers: Vec<(u16, SocketAddr)>,
    node: Option<u16>,
    listen: Option<SocketAddr>,
    window: usize,
    timeout: Duration,
    /// `grain=`: stripe even over one server.
    grain: Option<u32>,
    depth: u16,
    readahead: u16,
}

static SETTINGS: Mutex<Settings> = Mutex::new(Settings {
    servers: Vec::new(),
    node: None,
    listen: None,
    window: 32,
    timeout: Duration::from_secs(2),
    grain: None,
    depth: 8,
    readahead: DEFAULT_READAHEAD_STRIPES,
});

/// What the export reads and writes: one server's volume, or a striped one (both large:
/// boxed, made once).
pub enum Backend {
    One(Box<Client>),
    Striped(Box<StripedClient>),
}

impl Backend {
    fn volume(&mut self) -> &mut dyn Volume {
        match self {
            Backend::One(c) => c.as_mut(),
            Backend::Striped(s) => s.as_mut(),
        }
    }

    fn read_only(&self) -> bool {
        match self {
            Backend::One(c) => c.info.read_only,
            Backend::Striped(s) => s.read_only(),
        }
    }
}

impl span::Blocks for Backend {
    fn size(&self) -> u64 {
        match self {
            Backend::One(c) => c.info.size,
            Backend::Striped(s) => s.size(),
        }
    }
    fn read_blocks(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.volume().read(offset, buf)
    }
    fn write_blocks(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        self.volume().write(offset, data)
    }
    fn trim_blocks(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        self.volume().trim(offset, len)
    }
}

/// The one backend, made after nbdkit forked (its NIC and socket belong to the server
/// process).
static BACKEND: Mutex<Option<Backend>> = Mutex::new(None);

/// Reads waiting for the backend.
static BATCH: batch::Batch = batch::Batch::new();

/// Stream queued reads through the backend: one server's client keeps them in flight
/// together; a striped volume reads them one after the other (its client keeps its own
/// servers busy).
fn read_stream(b: &mut Option<Backend>, next: batch::Next<'_>, done: batch::Done<'_>) {
    if let Some(Backend::One(c)) = b {
        return c.read_stream(next, done);
    }
    while let Some((offset, mut w)) = next() {
        let outcome = match b.as_mut() {
            Some(b) => span::read_at(b, offset, w.as_mut()),
            None => Err(anyhow::anyhow!("not connected to gmblockd")),
        };
        done(offset, w, outcome);
    }
}

/// A lock that a panicking holder poisoned is still the data: every callback leaves the
/// client consistent between calls (a failed request has drained its chunks).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(e: rustix::io::Errno) -> i32 {
    e.raw_os_error()
}

/// An error for nbdkit: its message goes to nbdkit's log, its errno to the client.
fn fail(e: anyhow::Error) -> Error {
    let code =
        if e.downcast_ref::<span::Refused>().is_some() { rustix::io::Errno::INVAL } else { rustix::io::Errno::IO };
    Error::new(errno(code), format!("{e:#}"))
}

fn config_error(msg: String) -> Error {
    Error::new(errno(rustix::io::Errno::INVAL), msg)
}

/// Run `f` on the backend; then wake a queued read's thread to take the lock.
fn with_backend<R>(f: impl FnOnce(&mut Backend) -> anyhow::Result<R>) -> Result<R> {
    let r = {
        let mut g = lock(&BACKEND);
        let b = g.as_mut().ok_or_else(|| Error::new(errno(rustix::io::Errno::NOTCONN), "not connected to gmblockd"));
        b.and_then(|b| f(b).map_err(fail))
    };
    BATCH.kick();
    r
}

fn read_only() -> bool {
    lock(&BACKEND).as_ref().is_none_or(Backend::read_only)
}

/// `server=ID=IP:PORT` as written.
fn peer(s: &(u16, SocketAddr)) -> String {
    format!("server={}={}", s.0, s.1)
}

/// Add `server=`: each node id and each address once.
fn add_server(servers: &mut Vec<(u16, SocketAddr)>, new: (u16, SocketAddr)) -> std::result::Result<(), String> {
    if let Some(old) = servers.iter().find(|s| s.0 == new.0 || s.1 == new.1) {
        let what = if old.0 == new.0 { format!("node {}", new.0) } else { format!("address {}", new.1) };
        return Err(format!("{}: {what} is already given by {} (each server once)", peer(&new), peer(old)));
    }
    if servers.len() == gmblock::striped::MAX_SERVERS {
        return Err(format!("{}: at most {} servers", peer(&new), gmblock::striped::MAX_SERVERS));
    }
    servers.push(new);
    Ok(())
}

/// `grain=`: bytes, or with a K/M suffix; a positive multiple of 4 KiB.
fn parse_grain(value: &str) -> std::result::Result<u32, String> {
    let g = gmblock::parse_bytes(value)?;
    if g == 0 || g % BLOCK_BYTES != 0 {
        return Err(format!("{g} bytes: must be a positive multiple of {BLOCK_BYTES} (4 KiB)"));
    }
    Ok(g)
}

/// A striped volume's servers must agree on its size: the first that differs, named.
fn sizes_agree(servers: &[(u16, SocketAddr)], sizes: &[u64]) -> std::result::Result<(), String> {
    let Some(&first) = sizes.first() else { return Ok(()) };
    match sizes.iter().position(|&s| s != first) {
        None => Ok(()),
        Some(k) => Err(format!(
            "{} holds {} bytes but {} holds {first}: the servers of a striped export must be the same size",
            peer(&servers[k]),
            sizes[k],
            peer(&servers[0]),
        )),
    }
}

/// Connect to the servers `s` names.
fn connect(s: &Settings) -> std::result::Result<Backend, String> {
    let (Some(node), Some(listen)) = (s.node, s.listen) else { return Err("missing parameters".into()) };
    let cfg = StationConfig {
        node,
        listen,
        peers: s.servers.clone(),
        region_bytes: 0,
        placement: Placement::HostRam,
        call_timeout: s.timeout,
    };
    let striped = s.servers.len() > 1 || s.grain.is_some();
    if !striped {
        let server = s.servers[0];
        let c = Client::connect(cfg, server.0, s.window).map_err(|e| format!("gmblockd {}: {e:#}", server.1))?;
        return Ok(Backend::One(Box::new(c)));
    }
    let sc = StripeConfig {
        grain: s.grain.unwrap_or(StripeConfig::default().grain),
        depth: s.depth,
        readahead_stripes: s.readahead,
        chunk_timeout: s.timeout,
        ..StripeConfig::default()
    };
    let ids: Vec<u16> = s.servers.iter().map(|p| p.0).collect();
    let names: Vec<String> = s.servers.iter().map(peer).collect();
    let c = StripedClient::connect(cfg, &ids, sc).map_err(|e| format!("striping over {}: {e:#}", names.join(" ")))?;
    let sizes: Vec<u64> = c.infos.iter().map(|i| i.size).collect();
    sizes_agree(&s.servers, &sizes)?;
    Ok(Backend::Striped(Box::new(c)))
}

/// One NBD connection: all of them share the backend.
pub struct Export;

impl Server for Export {
    fn name() -> &'static str {
        "gmblock"
    }

    fn description() -> Option<&'static str> {
        Some("exports a gmblock server's volume, or one striped over several (gmblockd over NetRPC on the UDP link)")
    }

    fn config_help() -> Option<&'static str> {
        Some(
            "server=ID=IP:PORT  (required) a gmblockd to export: its node id and UDP link address;\n\
             \x20                  repeated: a volume striped over them in this order (same sizes)\n\
             node=ID            (required) this plugin's node id on the link (gmblockd's --peer)\n\
             listen=IP:PORT     (required) this plugin's UDP link address (gmblockd's --peer)\n\
             window=N           one server: chunks in flight at once, 1..=32 (default 32)\n\
             timeout_ms=MS      a chunk unanswered this long is sent again (default 2000)\n\
             grain=BYTES        striped: the stripe unit, a multiple of 4K (default 32K; K/M suffixes);\n\
             \x20                  given with one server, that server is read through the striping client\n\
             depth=N            striped: chunks in flight per server (default 8)\n\
             readahead=N        striped: stripes read ahead of a sequential stream (default 2; 0: none)",
        )
    }

    fn config(key: &str, value: &str) -> Result<()> {
        let mut s = lock(&SETTINGS);
        let bad = |what: &str, e: &dyn std::fmt::Display| config_error(format!("{key}={value}: {what}: {e}"));
        match key {
            "server" => {
                let p = gmblock::parse_peer(value).map_err(|e| bad("not ID=IP:PORT", &e))?;
                add_server(&mut s.servers, p).map_err(config_error)?;
            }
            "node" => s.node = Some(value.parse().map_err(|e| bad("not a node id", &e))?),
            "listen" => s.listen = Some(value.parse().map_err(|e| bad("not IP:PORT", &e))?),
            "window" => s.window = value.parse().map_err(|e| bad("not a number", &e))?,
            "timeout_ms" => {
                s.timeout = Duration::from_millis(value.parse().map_err(|e| bad("not milliseconds", &e))?);
            }
            "grain" => s.grain = Some(parse_grain(value).map_err(|e| config_error(format!("grain={value}: {e}")))?),
            "depth" => s.depth = value.parse().map_err(|e| bad("not a number", &e))?,
            "readahead" => s.readahead = value.parse().map_err(|e| bad("not a number of stripes", &e))?,
            _ => return Err(config_error(format!("unknown parameter {key} (nbdkit gmblock --help lists them)"))),
        }
        Ok(())
    }

    fn config_complete() -> Result<()> {
        let s = lock(&SETTINGS);
        let missing: Vec<&str> =
            [("server", s.servers.is_empty()), ("node", s.node.is_none()), ("listen", s.listen.is_none())]
                .into_iter()
                .filter_map(|(k, m)| m.then_some(k))
                .collect();
        if !missing.is_empty() {
            return Err(config_error(format!("missing parameter(s): {}", missing.join(", "))));
        }
        if !(1..=32).contains(&s.window) {
            return Err(config_error(format!("window={}: must be 1..=32", s.window)));
        }
        if s.timeout.is_zero() || s.timeout > Duration::from_secs(600) {
            return Err(config_error(format!("timeout_ms={}: must be 1..=600000", s.timeout.as_millis())));
        }
        if let Some(me) = s.servers.iter().find(|p| Some(p.0) == s.node) {
            return Err(config_error(format!("node={}: {} has that node id too", me.0, peer(me))));
        }
        Ok(())
    }

    /// Connect to the server(s) (after nbdkit forked into the background, if it did): a
    /// server that does not answer, or a stripe set that does not fit together, stops
    /// nbdkit here, with the reason.
    fn after_fork() -> Result<()> {
        let s = lock(&SETTINGS).clone();
        let b = connect(&s).map_err(|e| Error::new(errno(rustix::io::Errno::IO), e))?;
        *lock(&BACKEND) = Some(b);
        Ok(())
    }

    fn thread_model() -> Result<ThreadModel> {
        Ok(ThreadModel::Parallel)
    }

    fn open(_readonly: bool) -> Result<Box<dyn Server>> {
        Ok(Box::new(Export))
    }

    fn get_size(&self) -> Result<i64> {
        with_backend(|b| Ok(span::Blocks::size(b) as i64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if batch::fits(offset, buf.len()) {
            return BATCH.read(&BACKEND, offset, buf, read_stream).map_err(fail);
        }
        with_backend(|b| span::read_at(b, offset, buf))
    }

    fn write_at(&self, buf: &[u8], offset: u64, _flags: nbdkit::Flags) -> Result<()> {
        with_backend(|b| span::write_at(b, offset, buf))
    }

    fn flush(&self) -> Result<()> {
        with_backend(|b| b.volume().flush())
    }

    fn trim(&self, count: u32, offset: u64, _flags: nbdkit::Flags) -> Result<()> {
        with_backend(|b| span::trim_at(b, offset, count))
    }

    fn can_write(&self) -> Result<bool> {
        Ok(!read_only())
    }

    fn can_flush(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_trim(&self) -> Result<bool> {
        Ok(!read_only())
    }

    fn can_fua(&self) -> Result<FuaFlags> {
        Ok(FuaFlags::Emulate)
    }

    fn can_multi_conn(&self) -> Result<bool> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: u16, port: u16) -> (u16, SocketAddr) {
        (id, SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn each_server_once() {
        let mut v = Vec::new();
        add_server(&mut v, p(1, 7001)).unwrap();
        add_server(&mut v, p(2, 7002)).unwrap();
        let e = add_server(&mut v, p(1, 7003)).unwrap_err();
        assert!(e.contains("server=1=127.0.0.1:7003: node 1 is already given by server=1=127.0.0.1:7001"), "{e}");
        let e = add_server(&mut v, p(3, 7002)).unwrap_err();
        assert!(e.contains("address 127.0.0.1:7002 is already given by server=2="), "{e}");
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn a_grain_is_a_positive_multiple_of_4_kib() {
        assert_eq!(parse_grain("32K"), Ok(32 << 10));
        assert_eq!(parse_grain("4096"), Ok(4096));
        assert_eq!(parse_grain("1M"), Ok(1 << 20));
        assert!(parse_grain("6000").unwrap_err().contains("6000 bytes: must be a positive multiple of 4096"));
        assert!(parse_grain("0").is_err());
        assert!(parse_grain("lots").is_err());
    }

    #[test]
    fn a_stripe_set_of_unequal_servers_is_named() {
        let s = [p(1, 7001), p(2, 7002), p(3, 7003)];
        assert_eq!(sizes_agree(&s, &[8 << 20; 3]), Ok(()));
        let e = sizes_agree(&s, &[8 << 20, 8 << 20, 4 << 20]).unwrap_err();
        assert!(
            e.starts_with("server=3=127.0.0.1:7003 holds 4194304 bytes but server=1=127.0.0.1:7001 holds 8388608"),
            "{e}"
        );
    }
}
