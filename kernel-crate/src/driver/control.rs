// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's control block as the driver uses it outside the endpoint API: the firmware's
//! ready word, the node id the NIC publishes, device requests (`ctrl::HOST_REQ`: halt the
//! NIC processor, start its firmware afresh) and detaching frames from the rings.

use super::params;
use crate::sys::{self, pci::IoMem};
use crate::tpz::iface::entry::{Ring, Segment, Slot};
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, FwState, NIC_NODE_VALID, RECV_RING_ENTRIES};
use crate::tpz::iface::mem::NicMemory;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// BAR0's doorbell register (ivshmem).
pub(super) const DOORBELL: usize = 0x0C;
/// Doorbell values `(peer 0 << 16) | vector`: vector 0 wakes the NIC processor, vector 1
/// asks the device to carry out `ctrl::HOST_REQ` (vnic `ivshmem::REQUEST_VECTOR`).
pub(super) const NIC_DOORBELL: u32 = 0;
pub(super) const REQUEST_DOORBELL: u32 = 1;
/// How often waits for the NIC look again (ms).
pub(super) const POLL_MS: u32 = 10;
pub(super) const READY_TIMEOUT_MS: u32 = 5_000;
/// A `START` waits for the firmware's ready word (the vNIC allows it 5 s).
pub(super) const REQUEST_TIMEOUT_MS: u32 = 10_000;

/// Wait (bounded) for the firmware's ready word; with `halted_ok`, a halted NIC (left so
/// by a previous driver) is an answer too.
pub(super) fn wait_firmware(nic: &impl NicMemory, halted_ok: bool) -> Result<FwState> {
    let mut waited = 0;
    loop {
        let raw = nic.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire);
        match FwState::from_u32(raw) {
            Some(FwState::Ready) => return Ok(FwState::Ready),
            Some(FwState::Halted) if halted_ok => return Ok(FwState::Halted),
            Some(FwState::Fault) => {
                pr_err!("firmware fault {:#010x}\n", nic.load_relaxed(ctrl_word(ctrl::FW_FAULT)));
                return Err(EIO);
            }
            _ => {}
        }
        if waited >= READY_TIMEOUT_MS {
            pr_err!("no ready word from the firmware within {} ms (state word {:#x})\n", READY_TIMEOUT_MS, raw);
            return Err(sys::etimedout());
        }
        sys::msleep(POLL_MS);
        waited += POLL_MS;
    }
}

/// The node id: `node=` if given, else the one the NIC publishes.
pub(super) fn choose_node(nic: &impl NicMemory) -> Result<u16> {
    let published = nic.load(ctrl_word(ctrl::NIC_NODE), Ordering::Acquire);
    let nic_node = (published & NIC_NODE_VALID != 0).then_some(published as u16);
    match (params::NODE.get(), nic_node) {
        (-1, Some(n)) => Ok(n),
        (-1, None) => {
            pr_err!("node= not given and the NIC publishes no node id\n");
            Err(EINVAL)
        }
        (p, n) => {
            let p = u16::try_from(p).map_err(|_| EINVAL)?;
            if let Some(n) = n.filter(|&n| n != p) {
                pr_warn!("node={} but the NIC is node {} on its link: packets for {} will not reach it\n", p, n, p);
            }
            Ok(p)
        }
    }
}

/// Ask the NIC device (not its firmware) to carry out `op` and wait (bounded) for it.
pub(super) fn device_request(nic: &impl NicMemory, regs: &IoMem, op: u32) -> Result {
    let prev = nic.load_relaxed(ctrl_word(ctrl::HOST_REQ));
    let seq = ((prev >> host_req::SEQ_SHIFT) + 1) & (u32::MAX >> host_req::SEQ_SHIFT);
    let req = seq.max(1) << host_req::SEQ_SHIFT | op;
    nic.store(ctrl_word(ctrl::HOST_REQ), req, Ordering::Release);
    regs.write32(DOORBELL, REQUEST_DOORBELL);
    let name = if op == host_req::HALT { "HALT" } else { "START" };
    let mut waited = 0;
    loop {
        if nic.load(ctrl_word(ctrl::HOST_REQ_DONE), Ordering::Acquire) == req {
            return match nic.load_relaxed(ctrl_word(ctrl::HOST_REQ_STATUS)) {
                host_req::STATUS_OK => Ok(()),
                s => {
                    pr_err!("the NIC refused device request {} (status {})\n", name, s);
                    Err(EIO)
                }
            };
        }
        if waited >= REQUEST_TIMEOUT_MS {
            pr_err!("the NIC did not carry out device request {} within {} ms\n", name, REQUEST_TIMEOUT_MS);
            return Err(sys::etimedout());
        }
        sys::msleep(POLL_MS);
        waited += POLL_MS;
    }
}

/// Take every receive frame off the rings (the NIC is halted): a firmware started later
/// without a new endpoint finds no frame to write.
pub(super) fn detach_frames(nic: &impl NicMemory) {
    for i in 0..RECV_RING_ENTRIES {
        let s = Slot::new(nic, Ring::Recv, i);
        s.set_nseg(0);
        s.set_segment(0, Segment::default());
    }
}
