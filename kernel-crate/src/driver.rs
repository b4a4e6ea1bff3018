// SPDX-License-Identifier: GPL-2.0-only
//! The NIC driver proper, in safe Rust: probe brings up the NIC's endpoint on BAR2, the
//! threaded MSI-X handler drains the receive ring (answering pings, checking pongs), and
//! remove quiesces the NIC before anything it could DMA into is freed.
//!
//! Probe order, each step bounded in time:
//! 1. enable the function, request its regions, map BAR0 (registers) and BAR2 (NIC
//!    memory, at least `NIC_MEM_BYTES`), bus mastering, 64-bit DMA mask;
//! 2. read the firmware's ready word (`Ready`, or `Halted` if a previous driver left it);
//! 3. ask the device to `HALT` (`ctrl::HOST_REQ`), so no packet is delivered while the
//!    rings are rebuilt;
//! 4. allocate receive and transmit frames (coherent DMA; the bus address is the
//!    guest-physical address the NIC's DMA space uses) and `Endpoint::init` the rings;
//! 5. ask for `START`: the firmware boots on the fresh rings and our configuration;
//! 6. MSI-X vector 0 (the NIC's host interrupt) with a threaded handler, then drain once
//!    (interrupts raised before the handler existed are lost);
//! 7. join the GMS members and start the ticker; then the self-tests (`selftest`) and
//!    `/dev/gms0` on GMS.
//!
//! The driver owns the device: it takes the core lock, rings the doorbell, and calls the
//! runtime (`net`), the disk (`gms_backend`: after each batch of input, settled and its
//! finished pages completed outside the lock) and the self-tests (`selftest`, through
//! [`crate::selftest::TestNic`]). Nothing below it names the driver.
//!
//! Remove (drop of [`Device`]): free the IRQ, let posted sends finish, `HALT` the NIC,
//! detach the frames from the rings, print the counters; then the frames, mappings,
//! regions and the device go. If the NIC does not confirm the halt, the frames are leaked
//! rather than freed under a NIC that may still write them.

mod control;
mod member;
mod params;
mod receive;
mod remove;
mod shared;

pub(crate) use params::{check as check_params, gms_fail_ms, NODE};

/// Whether `gms_disk_pages=` asks for `/dev/gms0` on GMS (a RAM disk beside it is then
/// `/dev/gmsram0`).
pub(crate) fn gms_disk_asked() -> bool {
    params::GMS_DISK_PAGES.get() > 0
}
pub(crate) use shared::{BOUND, IDS};

use crate::gms_backend::DiskCore;
use crate::net::{self, stack::new_core, KHost};
use crate::nicmem::BarMem;
use crate::selftest;
use crate::sys::irq::{IrqVectors, ThreadedIrq};
use crate::sys::lock::IrqSpinLock;
use crate::sys::pci::{self, PciDev};
use crate::sys::work::Worked;
use crate::sys::{self, dma::DmaBuf};
use crate::tpz::endpoint::{Endpoint, EndpointConfig};
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, notify, Policy, NIC_MEM_BYTES};
use crate::tpz::iface::mem::NicMemory;
use control::{choose_node, device_request, wait_firmware};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::sync::Arc;
use kernel::{c_str, new_condvar, prelude::*};
use shared::{Device, Shared, FRAME_BYTES, NIC_BAR, REGS_BAR, REGS_BYTES, RX_FRAMES, SPARE_FRAMES, TX_FRAMES};

/// The PCI driver.
pub(crate) struct TrapezeDriver;

impl pci::Driver for TrapezeDriver {
    type Data = Device;
    fn probe(dev: &PciDev) -> Result<KBox<Device>> {
        Device::probe(dev)
    }
}

impl Device {
    /// Probe in three frames that never nest: [`Self::bring_up`] (steps 1–7, the core
    /// made in [`make_core`]) returns before the self-tests and `/dev/gms0`'s set-up run,
    /// whose kernel calls go deep (`add_disk` scans partitions through blk-mq and back
    /// into the driver). `cargo xtask module` bounds the deepest chain of the module's
    /// frames.
    fn probe(pdev: &PciDev) -> Result<KBox<Self>> {
        let (mut dev, members) = Self::bring_up(pdev)?;
        if members > 1 {
            // What runs at load (the self-tests, the disk's volume load) acts on the
            // members heard: wait for liveness to settle (at most `gms_fail_ms`).
            dev.shared.settle();
        }
        selftest::at_probe(&dev.shared);
        if let Ok(pages @ 1..) = u64::try_from(params::GMS_DISK_PAGES.get()) {
            match dev.shared.gms_disk(&dev.shared, pages) {
                Ok(disk) => dev.disk = Some(disk),
                Err(e) => pr_err!("/dev/gms0 on GMS: not created ({:?})\n", e),
            }
        }
        selftest::after_disk(&dev.shared, members);
        Ok(dev)
    }

    /// The NIC up, GMS joined and the ticker started: the device and the members joined.
    #[inline(never)]
    fn bring_up(pdev: &PciDev) -> Result<(KBox<Self>, usize)> {
        let (vendor, device) = pdev.ids();
        let bar_len = pdev.mem_bar_len(NIC_BAR);
        pr_info!("{}: NIC {:04x}:{:04x}, BAR2 {} KiB\n", pdev.name(), vendor, device, bar_len / 1024);
        let enabled = pdev.enable()?;
        let regions = pdev.request_regions(c_str!("trapeze"))?;
        if bar_len < u64::from(NIC_MEM_BYTES) {
            pr_err!("{}: BAR2 is {} bytes; NIC memory needs {}\n", pdev.name(), bar_len, NIC_MEM_BYTES);
            return Err(ENODEV);
        }
        let nic = BarMem::new(pdev.iomap(NIC_BAR, NIC_MEM_BYTES as usize)?, NIC_MEM_BYTES).ok_or(ENODEV)?;
        let ctl = BarMem::new(pdev.iomap(NIC_BAR, NIC_MEM_BYTES as usize)?, NIC_MEM_BYTES).ok_or(ENODEV)?;
        let regs = pdev.iomap(REGS_BAR, REGS_BYTES)?;
        let master = pdev.set_master();
        pdev.set_dma_mask(64)?;

        let state = wait_firmware(&nic, true)?;
        let v = nic.load_relaxed(ctrl_word(ctrl::FW_VERSION));
        pr_info!(
            "{}: firmware {}.{}.{} build {:08x}: {:?}, heartbeat {}\n",
            pdev.name(),
            v >> 16,
            (v >> 8) & 0xFF,
            v & 0xFF,
            nic.load_relaxed(ctrl_word(ctrl::FW_BUILD_ID)),
            state,
            nic.load_relaxed(ctrl_word(ctrl::FW_HEARTBEAT)),
        );
        let node = choose_node(&nic)?;
        let fail_ms = gms_fail_ms()?;

        device_request(&nic, &regs, host_req::HALT)?;
        let budget = params::gms_budget_pages();
        let core = make_core(pdev, nic, node, budget)?;
        let shared = Arc::pin_init(
            Worked::new(pin_init!(Shared {
                core <- IrqSpinLock::new(core, c_str!("trapeze::core"), kernel::static_lock_class!()),
                completed <- new_condvar!("trapeze::completed"),
                admitted: AtomicU64::new(0),
                fail_ms,
                regs,
                ctl,
                node,
                closing: AtomicBool::new(false),
            })),
            GFP_KERNEL,
        )?;
        // From here on, dropping `dev` halts the NIC before the frames go.
        let mut dev = KBox::new(
            Device {
                disk: None,
                irq: None,
                shared,
                _master: master,
                _regions: regions,
                _enabled: enabled,
                pdev: pdev.clone(),
            },
            GFP_KERNEL,
        )?;
        dev.shared.start()?;
        let vectors = IrqVectors::msix(pdev, 1, 2)?;
        let nvec = vectors.count();
        let irq = ThreadedIrq::request(vectors, 0, c_str!("trapeze"), dev.shared.clone())?;
        let irq_no = irq.irq();
        dev.irq = Some(irq);
        let early = dev.shared.poll();
        let members = dev.shared.join_gms();
        if members > 1 {
            // The ticker runs until remove (`closing`), on the queue for long work items.
            Worked::queue_long(dev.shared.clone());
        }
        BOUND.fetch_add(1, Ordering::Relaxed);
        pr_info!(
            "{}: node {} up: endpoint live, {} NetRPC/GMS frames + {} transmit frames of {} KiB, MSI-X {} vectors, IRQ {}{}\n",
            pdev.name(),
            node,
            RX_FRAMES + SPARE_FRAMES + budget,
            TX_FRAMES,
            FRAME_BYTES / 1024,
            nvec,
            irq_no,
            if early > 0 { " (drained messages that arrived before the IRQ)" } else { "" },
        );
        Ok((dev, members))
    }
}

/// Step 4: the frames, and NetRPC and the GMS node over them, storing up to `budget`
/// pages, on the endpoint of NIC memory `nic` (its rings reset for node `node`).
fn make_core(pdev: &PciDev, nic: BarMem, node: u16, budget: usize) -> Result<DiskCore> {
    let pool = net::Pool::new(alloc_frames(pdev, RX_FRAMES + SPARE_FRAMES + budget)?, pdev)?;
    let tx = alloc_frames(pdev, TX_FRAMES)?;
    let ep = endpoint(nic, node, &pool)?;
    let mut host = KHost::new(ep, pool, tx)?;
    // The self-tests' echo service answers beside GMS (every node runs it).
    host.serve = Some(selftest::SERVE);
    new_core(node, budget, params::gms_dir_pages(), host, None)
}

/// The endpoint over NIC memory `nic`, its receive slots given `pool`'s first frames, on
/// the heap. A frame of its own: the endpoint (~2 KiB) is built on the stack once, moved
/// into its box, and the frame is gone before anything deeper runs.
#[inline(never)]
fn endpoint(nic: BarMem, node: u16, pool: &net::Pool) -> Result<KBox<Endpoint<BarMem, usize>>> {
    let cfg = EndpointConfig {
        node_id: node,
        policy: Policy::Eager,
        send_pulse: 512,
        recv_pulse: 512,
        mtu: net::MTU as u32,
        notify: notify::IRQ_ON_RECV,
    };
    let seed = [sys::random_u64(), sys::random_u64()];
    Ok(KBox::new(Endpoint::init(nic, &cfg, seed, |i| net::KPort::slot_segment(pool, i)), GFP_KERNEL)?)
}

/// `n` coherent DMA frames (one `dma_alloc_attrs` of a page each: no contiguous block); the vector itself from allocator `A` (`KVVec` for the pool of
/// thousands of frames).
fn alloc_frames<A: kernel::alloc::Allocator>(pdev: &PciDev, n: usize) -> Result<kernel::alloc::Vec<DmaBuf, A>> {
    let mut v = kernel::alloc::Vec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(DmaBuf::alloc_coherent(pdev, FRAME_BYTES)?, GFP_KERNEL)?;
    }
    Ok(v)
}
