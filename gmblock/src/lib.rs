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
//! [`frameio`] is the only `unsafe`: I/O vectors over the frames for `preadv`/`pwritev`.
//! The [`client`] library (and the `gmblock` command) has a station of its own, keeps a
//! window of chunks in flight and verifies nothing itself: the tests and `gmblock verify`
//! compare what they read with what they wrote.
//!
//! A write is acknowledged once `pwrite` with `O_DIRECT` returned (the data is in the
//! device, perhaps in its volatile cache); a `FLUSH` (`fdatasync`) acknowledged makes
//! every write acknowledged before it durable.

#![deny(unsafe_code)]

pub mod client;
pub mod disk;
pub mod frameio;
pub mod proto;
pub mod server;
pub mod station;

/// CPU time this process has used, in seconds (user + system, all threads).
pub fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Parse a peer `ID=IP:PORT`.
pub fn parse_peer(s: &str) -> Result<(u16, std::net::SocketAddr), String> {
    trapeze_vnic::link::backend::parse_peer(s).map_err(|e| e.to_string())
}
