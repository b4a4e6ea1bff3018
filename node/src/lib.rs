// SPDX-License-Identifier: GPL-2.0-only
//! The user-space node: what runs on a host attached to a virtual NIC (`trapeze-vnic`, the
//! device), in a process of its own (`gmsd`) or several to a process (the in-process
//! cluster of the demo, the benches and the tests).
//!
//! * [`rpc`] — NetRPC (`netrpc`) in user space: [`rpc::RpcPort`] drives the sans-IO core
//!   over a [`trapeze_runtime::Port`] ([`rpc::Frames`]) whose frames are 8 KiB slots of a
//!   shared region registered with the NIC for DMA ([`rpc::RegionFrames`]).
//! * [`gms`] — the Global Memory Service's runtime on top of it: [`gms::GmsPort`] is one
//!   node of the `gms` core with a local page cache, read-ahead, putpages and the
//!   global LRU's epochs; [`gms::Cluster`] runs several on an in-process switch from one
//!   thread (`cargo xtask run`'s cluster, `trapeze-gms-demo`).
//! * [`host`] — the raw host binding ([`host::HostPort`]): the host API over a NIC's
//!   memory, payloads copied through a frame region, attached in process or through a
//!   running NIC's control socket. What the device's tests and tools drive it with.
//! * [`testbed`] — NICs in this process with a [`host::HostPort`] each, on an in-process
//!   switch or UDP, and the firmware image built on demand: the tests' and `bench_nic`'s
//!   harness.
//!
//! The benchmarks `cargo xtask bench rpc|gms|nic` run are this crate's examples.

pub mod gms;
pub mod host;
pub mod rpc;
pub mod testbed;
