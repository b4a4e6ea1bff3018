// SPDX-License-Identifier: GPL-2.0-only
//! The driver's self-tests, kept out of its body: the ping/pong message and its test
//! (`ping_peer=`), the NetRPC echo service every node runs and the echo calls
//! (`echo_peer=`), the GMS put/get test (`gms_test_pages=`) and the calls left in flight
//! for the unload test (`unload_inflight=`).
//!
//! The driver reaches them through a narrow interface: it implements [`TestNic`], plugs
//! [`SERVE`] into the runtime's host, hands the receive path's non-NetRPC messages to
//! [`on_message`], and runs [`at_probe`] and [`after_disk`] at the end of probe. Imports go
//! down only (the runtime layer, `sys`, `stats`, the shared crates), never to the driver.

mod echo;
mod nic;
mod params;
mod ping;
mod proto;
mod rpctest;

pub(crate) use echo::SERVE;
pub(crate) use nic::TestNic;
pub(crate) use ping::on_message;

use crate::net::FRAME_BYTES;
use kernel::prelude::*;

/// The tests probe runs once the NIC is up (before `/dev/gms0`): `ping_peer=`, `echo_peer=`.
pub(crate) fn at_probe(nic: &impl TestNic) {
    if let Ok(peer) = u16::try_from(params::PING_PEER.get()) {
        let bytes = params::PING_BYTES.get();
        match usize::try_from(bytes).ok().filter(|&b| (1..=FRAME_BYTES).contains(&b)) {
            Some(b) => {
                if let Err(e) = ping::ping(nic, peer, b) {
                    pr_err!("ping to node {} FAILED ({:?})\n", peer, e);
                }
            }
            None => pr_err!("ping_bytes={} is outside 1..={}: no ping\n", bytes, FRAME_BYTES),
        }
    }
    if let Ok(peer) = u16::try_from(params::ECHO_PEER.get()) {
        match rpctest::echo_test(nic, peer) {
            Ok(()) => pr_info!("netrpc echo with node {}: PASSED\n", peer),
            Err(e) => pr_err!("netrpc echo with node {} FAILED ({:?})\n", peer, e),
        }
    }
}

/// The tests probe runs last: `unload_inflight=`, `gms_test_pages=` (with `members` GMS
/// members).
pub(crate) fn after_disk(nic: &impl TestNic, members: usize) {
    let inflight = params::UNLOAD_INFLIGHT.get();
    if inflight > 0 {
        rpctest::leave_in_flight(nic, inflight as usize);
    }
    let pages = params::GMS_TEST_PAGES.get();
    if pages > 0 {
        if members < 2 {
            pr_err!("gms_test_pages={} needs gms_nodes= with another member\n", pages);
        } else {
            match rpctest::gms_test(nic, pages as usize) {
                Ok(()) => pr_info!("gms test: PASSED\n"),
                Err(e) => pr_err!("gms test FAILED ({:?})\n", e),
            }
        }
    }
}

/// `ping_peer=` (the load message names it).
pub(crate) fn ping_peer() -> i32 {
    params::PING_PEER.get()
}
