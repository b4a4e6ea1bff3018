// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd`: the Global Memory Service as processes. One daemon per node runs a GMS node (the
//! user-space runtime's `trapeze_node::gms::GmsPort`) on a virtual NIC it creates with
//! `trapeze_vnic` ([`daemon`]) on a UDP or raw-Ethernet link ([`link`]), watches its peers with heartbeats ([`peers`]) and
//! serves local clients on a UNIX socket ([`control`], protocol in [`proto`]); the
//! [`client`] library and the `gms` command talk to it. What happens to a client's page —
//! placement, versions, retries, re-replication, recovery after a restart — is decided by
//! the client core `gms::store`, the one the kernel's `/dev/gms0` runs, one store per
//! volume this daemon writes ([`volumes`]); liveness is `gms::store::liveness`
//! ([`peers`]). No `unsafe` here.

#![forbid(unsafe_code)]

pub mod client;
pub mod control;
pub mod daemon;
pub mod hist;
pub mod link;
pub mod peers;
pub mod proto;
pub mod units;
pub mod volumes;
