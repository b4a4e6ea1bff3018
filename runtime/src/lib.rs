// SPDX-License-Identifier: GPL-2.0-only
//! The runtime between the sans-IO protocol cores and a NIC endpoint, written once for
//! user space and the kernel module.
//!
//! NetRPC ([`netrpc`]) and GMS decide *what* to send and receive; the host API
//! ([`endpoint`]) puts control messages into the NIC's rings. Between the two sits what
//! every node needs and what used to be written once per place: a pool of equal payload
//! frames, a frame attached to every receive slot and swapped out when an unsolicited
//! payload is handed up, IPT entries armed on frames for solicited replies and disarmed
//! (bounded, never an unbounded spin) when done, a limbo where frames wait until the sends
//! that carry them complete, posting with a bounded back-off when the send ring is full,
//! and the entries of the NIC's answer table it exports frames in. That is [`port::Port`].
//!
//! What differs between places is behind two small traits:
//! * [`frames::FrameMem`] — how frames are reached: a user-space region registered with
//!   the NIC (a frame is an offset), or the kernel's coherent DMA buffers (an index);
//! * [`storage::Storage`] — where the fixed-size tables and the endpoint live (allocated
//!   once, at set-up: the global allocator in user space, `kvmalloc`/`kmalloc` in the
//!   kernel).
//!
//! `core` only, no `unsafe`, nothing allocates after set-up. The kernel module compiles
//! these files as a module beside its own `endpoint`, `iface` and `netrpc` modules
//! (Kbuild passes `--cfg MODULE`), so inside them paths go through `super::`.

#![no_std]
#![forbid(unsafe_code)]

#[cfg(MODULE)]
pub(crate) use super::{endpoint, iface, netrpc};
#[cfg(not(MODULE))]
pub use netrpc;
#[cfg(not(MODULE))]
pub use trapeze_host::{endpoint, iface};

pub mod frames;
pub mod port;
pub mod storage;

pub use frames::FrameMem;
pub use port::{Exported, Port, PortStats};
pub use storage::Storage;
