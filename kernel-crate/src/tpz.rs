// SPDX-License-Identifier: GPL-2.0-only
//! The Trapeze host↔NIC interface and host API, compiled from the same source files as
//! user space: `iface/src/` (NIC-memory map, rings, IPT, wire format),
//! `host/src/{endpoint,keys}.rs` (the `tpz_*` API), NetRPC, GMS and the runtime between them
//! and the endpoint. Those files use only `core` and reach
//! each other through `super::` paths, so this module only places them side by side; the
//! `#[path]`s point at the workspace's files (relative to this file), nothing is copied.
//! They contain no `unsafe` code, and `forbid` keeps it that way here. They need rustc
//! 1.82 or newer (`Option::is_none_or`), which the pinned 1.95 that builds the kernel is.

#![forbid(unsafe_code)]

/// The host↔NIC interface (`iface/src/lib.rs`, the `trapeze-iface` crate).
#[allow(unreachable_pub, dead_code, unused_attributes, missing_docs)]
#[allow(clippy::wrong_self_convention, clippy::incompatible_msrv)]
#[path = "../../iface/src/lib.rs"]
pub(crate) mod iface;

/// The host side of an endpoint (`host/src/endpoint.rs`).
#[allow(unreachable_pub, dead_code, unused_attributes, missing_docs)]
#[allow(clippy::wrong_self_convention, clippy::incompatible_msrv)]
#[path = "../../host/src/endpoint.rs"]
pub(crate) mod endpoint;

/// IPT protection keys (`host/src/keys.rs`).
#[allow(unreachable_pub, dead_code, unused_attributes, missing_docs)]
#[allow(clippy::wrong_self_convention, clippy::incompatible_msrv)]
#[path = "../../host/src/keys.rs"]
pub(crate) mod keys;

/// NetRPC (`netrpc/src/lib.rs`): typed RPC with call records, continuations, deferred
/// continuations and delegation; `core` only, sans-IO.
/// `pub` (the crate's root keeps `tpz` private) because `gms` re-exports it.
#[allow(unreachable_pub, dead_code, unused_attributes, unused_imports, missing_docs, rustdoc::all)]
#[allow(clippy::all, clippy::incompatible_msrv)]
#[path = "../../netrpc/src/lib.rs"]
pub mod netrpc;

/// The Global Memory Service core (`gms/src/lib.rs`); its `net` names the sibling
/// [`netrpc`] here (`--cfg MODULE`).
#[allow(unreachable_pub, dead_code, unused_attributes, unused_imports, missing_docs, rustdoc::all)]
#[allow(clippy::all, clippy::incompatible_msrv)]
#[path = "../../gms/src/lib.rs"]
pub(crate) mod gms;

/// The runtime between NetRPC / GMS and the endpoint (`runtime/src/lib.rs`): frames,
/// receive slots, IPT arming, send limbo, posting; its `super::` paths name the siblings
/// here (`--cfg MODULE`).
#[allow(unreachable_pub, dead_code, unused_attributes, unused_imports, missing_docs, rustdoc::all)]
#[allow(clippy::all, clippy::incompatible_msrv)]
#[path = "../../runtime/src/lib.rs"]
pub(crate) mod runtime;
