// SPDX-License-Identifier: GPL-2.0-only
//! `gmblock-nbdkit`: an nbdkit plugin that exports a gmblock server's volume over NBD,
//! so stock clients — `nbdinfo`, `nbdcopy`, `qemu-img`, the kernel's `nbd-client` — read
//! and write it.
//!
//! ```text
//! nbdkit -f libgmblock_nbdkit.so server=1=127.0.0.1:7001 node=2 listen=127.0.0.1:7002
//! ```
//!
//! (`gmblock ... export` runs that line.) nbdkit owns the NBD side: the handshake, the
//! request parsing, the bounds and size checks, the error replies, many connections.
//! This crate is what nbdkit calls per request ([`Export`], through the callback table the
//! `nbdkit` crate builds in `ffi.rs`): each read, write, flush and trim goes to gmblockd
//! over NetRPC through one [`gmblock::client::Client`] — a station of its own on the
//! UDP link, made after nbdkit forked — shared by every connection behind a mutex, so
//! requests reach the server one at a time in the order they took the lock. NBD allows
//! any offset and length; gmblock wants 4 KiB-aligned requests of at most 1 MiB:
//! [`span`] cuts and patches.
//!
//! What a client is told: a write is acknowledged once the server acknowledged every
//! block of it (written with `O_DIRECT`); `FLUSH` is gmblock's flush (`fdatasync`); FUA is
//! nbdkit's emulation (a flush after the write); multi-conn is offered because every
//! connection goes through the one client to the one server, so a flush on any of them
//! covers writes acknowledged on all. Zeroing is nbdkit's fallback (writes of zeros).
//! Errors reach the client as NBD errors (`EIO` from the server, `EINVAL` for a range the
//! volume does not hold, `EROFS` for a read-only export) and end only that request.

pub mod span;

mod ffi;

use gmblock::client::Client;
use gmblock::station::{Placement, StationConfig};
use nbdkit::{Error, FuaFlags, Result, Server, ThreadModel};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What the command line gave (`key=value` after the plugin's name).
#[derive(Clone, Debug)]
struct Settings {
    server: Option<(u16, SocketAddr)>,
    node: Option<u16>,
    listen: Option<SocketAddr>,
    window: usize,
    timeout: Duration,
}

static SETTINGS: Mutex<Settings> =
    Mutex::new(Settings { server: None, node: None, listen: None, window: 16, timeout: Duration::from_secs(2) });

/// The one client, made after nbdkit forked (its NIC and socket belong to the server
/// process).
static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

/// A lock that a panicking holder poisoned is still the data: every callback leaves the
/// client consistent between calls (a failed request has drained its chunks).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

/// Run `f` on the client.
fn with_client<R>(f: impl FnOnce(&mut Client) -> anyhow::Result<R>) -> Result<R> {
    let mut g = lock(&CLIENT);
    let c = g.as_mut().ok_or_else(|| Error::new(errno(rustix::io::Errno::NOTCONN), "not connected to gmblockd"))?;
    f(c).map_err(fail)
}

fn read_only() -> bool {
    lock(&CLIENT).as_ref().is_none_or(|c| c.info.read_only)
}

/// One NBD connection: all of them share the client.
pub struct Export;

impl Server for Export {
    fn name() -> &'static str {
        "gmblock"
    }

    fn description() -> Option<&'static str> {
        Some("exports a gmblock server's volume (gmblockd over NetRPC on the UDP link)")
    }

    fn config_help() -> Option<&'static str> {
        Some(
            "server=ID=IP:PORT  (required) the gmblockd to export: its node id and UDP link address\n\
             node=ID            (required) this plugin's node id on the link (gmblockd's --peer)\n\
             listen=IP:PORT     (required) this plugin's UDP link address (gmblockd's --peer)\n\
             window=N           chunks in flight per request, 1..=32 (default 16)\n\
             timeout_ms=MS      a chunk unanswered this long is sent again (default 2000)",
        )
    }

    fn config(key: &str, value: &str) -> Result<()> {
        let mut s = lock(&SETTINGS);
        let bad = |what: &str, e: &dyn std::fmt::Display| config_error(format!("{key}={value}: {what}: {e}"));
        match key {
            "server" => s.server = Some(gmblock::parse_peer(value).map_err(|e| bad("not ID=IP:PORT", &e))?),
            "node" => s.node = Some(value.parse().map_err(|e| bad("not a node id", &e))?),
            "listen" => s.listen = Some(value.parse().map_err(|e| bad("not IP:PORT", &e))?),
            "window" => s.window = value.parse().map_err(|e| bad("not a number", &e))?,
            "timeout_ms" => {
                s.timeout = Duration::from_millis(value.parse().map_err(|e| bad("not milliseconds", &e))?);
            }
            _ => return Err(config_error(format!("unknown parameter {key} (nbdkit gmblock --help lists them)"))),
        }
        Ok(())
    }

    fn config_complete() -> Result<()> {
        let s = lock(&SETTINGS);
        let missing: Vec<&str> =
            [("server", s.server.is_none()), ("node", s.node.is_none()), ("listen", s.listen.is_none())]
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
        Ok(())
    }

    /// Connect to gmblockd (after nbdkit forked into the background, if it did): a
    /// server that does not answer stops nbdkit here, with the reason.
    fn after_fork() -> Result<()> {
        let s = lock(&SETTINGS).clone();
        let (Some(server), Some(node), Some(listen)) = (s.server, s.node, s.listen) else {
            return Err(config_error("missing parameters".into()));
        };
        let cfg = StationConfig {
            node,
            listen,
            peers: vec![server],
            region_bytes: 0,
            placement: Placement::HostRam,
            call_timeout: s.timeout,
        };
        let c = Client::connect(cfg, server.0, s.window)
            .map_err(|e| Error::new(errno(rustix::io::Errno::IO), format!("gmblockd {}: {e:#}", server.1)))?;
        *lock(&CLIENT) = Some(c);
        Ok(())
    }

    fn thread_model() -> Result<ThreadModel> {
        Ok(ThreadModel::Parallel)
    }

    fn open(_readonly: bool) -> Result<Box<dyn Server>> {
        Ok(Box::new(Export))
    }

    fn get_size(&self) -> Result<i64> {
        with_client(|c| Ok(c.info.size as i64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        with_client(|c| span::read_at(c, offset, buf))
    }

    fn write_at(&self, buf: &[u8], offset: u64, _flags: nbdkit::Flags) -> Result<()> {
        with_client(|c| span::write_at(c, offset, buf))
    }

    fn flush(&self) -> Result<()> {
        with_client(|c| c.flush())
    }

    fn trim(&self, count: u32, offset: u64, _flags: nbdkit::Flags) -> Result<()> {
        with_client(|c| span::trim_at(c, offset, count))
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
