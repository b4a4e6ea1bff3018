// SPDX-License-Identifier: GPL-2.0-only
//! `gmblock`: block sharing over the virtual NIC, after the gmblock paper's direct
//! disk-to-NIC data path.
//!
//! A server, `gmblockd` ([`server`]), exports a file or a block device ([`disk`], opened
//! with `O_DIRECT`) over NetRPC ([`proto`]: info, read, write, flush, trim; 4 KiB–1 MiB
//! requests cut into chunks that fit one link message each, many in flight). It runs on
//! its own virtual NIC on a UDP link ([`station`]), like `gmsd`, driven inline from one
//! thread. The data path is chosen per run (`--path`):
//!
//! - **direct**: the station's frames live in NIC-local memory (a memfd the NIC maps at
//!   `NIC_LOCAL_DMA_BASE`, mapped into the server too). A read goes by `O_DIRECT` from the
//!   disk into those frames and the reply is sent from them; a write's payload lands in
//!   them and goes from there to the disk. The NIC's host-RAM DMA counter does not move.
//! - **via-ram**: the same frames in host RAM: the disk's DMA fills them, then the NIC
//!   DMAs them out (and in, for writes) — one more crossing of host memory per byte.
//!
//! What the model can and cannot show: the NIC-local bank is, on this machine, a memfd
//! in host RAM like the via-RAM frames, and the vNIC copies a send's payload into its
//! staging from either. The two paths therefore do the same real copies; they differ in
//! where the NIC and the disk say the bytes went (the DMA counters), not yet in memory
//! bus traffic, MB/s or CPU. Making the direct path cheaper for real needs the vNIC to
//! send straight from the bank instead of copying it to staging first.
//!
//! [`striped`] is a client of a volume striped over several servers (Slice's round-robin
//! at a 32 KiB grain), driving the client core's policy (`gms::stripe`); a server may
//! model a slower disk ([`model`]: `--model-mbps`, `--model-latency-us`) so that several
//! servers on one machine behave like several disks. [`Volume`] is what both clients do.
//!
//! [`cached`] is a server's volume cached in GMS (the client core's `gms::cached`: getpage
//! first, the server on a miss; write-through or write-back with a dirty copy on each of
//! two lenders before a write is acknowledged, and every dirty page written to the server
//! before a flush completes), over a [`client::Client`] and a node of an in-process GMS
//! cluster.
//!
//! The server's disk works on many reads at once: each read chunk is queued on an
//! io_uring ([`uring`]) straight into its frames and replied to when it completes
//! (NetRPC's later replies), while the server serves the next requests; writes, flushes
//! and trims are done inside their requests, in order. [`frameio`] and [`uring`] are the
//! only `unsafe`: I/O vectors over the frames for `preadv`/`pwritev` and the ring's reads.
//! The [`client`] library (and the `gmblock` command) has a station of its own, keeps a
//! window of chunks in flight — of one request, or of a stream of them
//! ([`client::Client::read_stream`]) — and verifies nothing itself: the tests and
//! `gmblock verify` compare what they read with what they wrote.
//!
//! A write is acknowledged once `pwrite` with `O_DIRECT` returned (the data is in the
//! device, perhaps in its volatile cache); a `FLUSH` (`fdatasync`) acknowledged makes
//! every write acknowledged before it durable.

#![deny(unsafe_code)]

pub mod cached;
pub mod client;
pub mod disk;
pub mod frameio;
mod hold;
pub mod model;
pub mod proto;
pub mod server;
pub mod station;
pub mod striped;
pub mod uring;

/// A volume as the `gmblock` command, the bench and the tests use it: one server's
/// ([`client::Client`]) or one striped over several ([`striped::StripedClient`]).
pub trait Volume {
    /// Bytes in the volume.
    fn size(&self) -> u64;
    /// Read `buf.len()` bytes (4 KiB–1 MiB, aligned) at `offset`.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()>;
    /// Write `data` (4 KiB–1 MiB, aligned) at `offset`.
    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()>;
    /// Make every acknowledged write durable.
    fn flush(&mut self) -> anyhow::Result<()>;
    /// Deallocate a range (aligned, at most 1 MiB).
    fn trim(&mut self, offset: u64, len: u32) -> anyhow::Result<()>;
    /// One line on what it is (`gmblock info`).
    fn describe(&self) -> String;
}

fn access(read_only: bool) -> &'static str {
    if read_only {
        "read-only"
    } else {
        "read-write"
    }
}

impl Volume for client::Client {
    fn size(&self) -> u64 {
        self.info.size
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        client::Client::read(self, offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        client::Client::write(self, offset, data)
    }
    fn flush(&mut self) -> anyhow::Result<()> {
        client::Client::flush(self)
    }
    fn trim(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        client::Client::trim(self, offset, len)
    }
    fn describe(&self) -> String {
        format!("size {} bytes, path {:?}, {}", self.info.size, self.info.path, access(self.info.read_only))
    }
}

impl Volume for striped::StripedClient {
    fn size(&self) -> u64 {
        striped::StripedClient::size(self)
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        striped::StripedClient::read(self, offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        striped::StripedClient::write(self, offset, data)
    }
    fn flush(&mut self) -> anyhow::Result<()> {
        striped::StripedClient::flush(self)
    }
    fn trim(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        striped::StripedClient::trim(self, offset, len)
    }
    fn describe(&self) -> String {
        let (n, grain) = (self.servers.len(), self.layout().grain());
        format!(
            "size {} bytes striped over {n} server(s) at a {grain}-byte grain, {}",
            self.size(),
            access(self.read_only())
        )
    }
}

/// A size in bytes: a number with an optional `K`/`KiB` or `M`/`MiB` suffix (`32K`).
pub fn parse_bytes(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.find(|c: char| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some(i) => match t[i..].to_ascii_lowercase().as_str() {
            "k" | "kib" => (&t[..i], 1 << 10),
            "m" | "mib" => (&t[..i], 1 << 20),
            _ => return Err(format!("{s:?}: a size is a number with an optional K or M suffix")),
        },
    };
    let n: u64 = num.parse().map_err(|_| format!("{s:?}: a size is a number with an optional K or M suffix"))?;
    n.checked_mul(mult).and_then(|b| u32::try_from(b).ok()).ok_or_else(|| format!("{s:?}: too large"))
}

/// CPU time this process has used, in seconds (user + system, all threads).
pub fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Parse a peer `ID=IP:PORT`.
pub fn parse_peer(s: &str) -> Result<(u16, std::net::SocketAddr), String> {
    trapeze_vnic::link::backend::parse_peer(s).map_err(|e| e.to_string())
}
