// SPDX-License-Identifier: GPL-2.0-only
//! What the self-tests use of a bound NIC ([`TestNic`]): the driver implements it, so the
//! tests reach the device only through this narrow interface.

use crate::net::stack::{Client, Core};
use crate::sys::lock::IrqSpinLock;
use kernel::sync::CondVar;

/// A bound NIC as the self-tests see it.
pub(crate) trait TestNic {
    /// The runtime's client (the disk), settled before a test issues GMS operations.
    type Client: Client;
    /// NetRPC and the GMS node, under the lock the receive path takes.
    fn core(&self) -> &IrqSpinLock<Core<Self::Client>>;
    /// Notified when the receive path (or the ticker) took input.
    fn completed(&self) -> &CondVar;
    /// Tell the NIC that sends were posted.
    fn ring_nic(&self);
    /// Queue the deferred-continuation work item.
    fn queue_deferred(&self);
    /// This node's id.
    fn node(&self) -> u16;
}
