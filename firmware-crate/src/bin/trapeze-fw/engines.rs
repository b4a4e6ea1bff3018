// SPDX-License-Identifier: GPL-2.0-only
//! [`Engines`] over the NIC processor's MMIO registers (through [`crate::hw`]; no
//! `unsafe` here). A command [`crate::hw`] refuses (it would reach outside the endpoint,
//! i.e. a firmware bug) is logged and reported through the engine's status as a failed
//! transfer, so the firmware's normal error paths drop the packet.

use crate::hw;
use trapeze_firmware::hal::{EngineStatus, Engines, HostDir, RxStatus};
use trapeze_firmware::iface::regs::{rx_status, status};

/// The three DMA engines and the host interrupt of the real NIC.
#[derive(Default)]
pub struct MmioEngines {
    /// The last host-DMA command was refused; status reports it until the next start.
    hdma_refused: bool,
    tx_refused: bool,
    rx_refused: bool,
}

impl MmioEngines {
    pub fn new() -> Self {
        Self::default()
    }
}

fn engine_status((bits, done): (u32, u32)) -> EngineStatus {
    EngineStatus { busy: bits & status::BUSY != 0, done, error: bits & status::ERROR != 0 }
}

/// What a refused command looks like to the firmware: finished, nothing moved, failed.
const REFUSED: EngineStatus = EngineStatus { busy: false, done: 0, error: true };

impl Engines for MmioEngines {
    fn host_dma_start(&mut self, dir: HostDir, host_addr: u64, nic_off: u32, len: u32) {
        self.hdma_refused = hw::hdma_start(dir, host_addr, nic_off, len).is_err();
        if self.hdma_refused {
            defmt::error!("host DMA refused: nic {=u32:#x} + {=u32} outside the endpoint", nic_off, len);
        }
    }

    fn host_dma_status(&mut self) -> EngineStatus {
        if self.hdma_refused {
            return REFUSED;
        }
        engine_status(hw::hdma_state())
    }

    fn link_tx_start(&mut self, nic_off: u32, len: u32, flags: u32) {
        self.tx_refused = hw::tx_start(nic_off, len, flags).is_err();
        if self.tx_refused {
            defmt::error!("link tx refused: nic {=u32:#x} + {=u32} outside the endpoint", nic_off, len);
        }
    }

    fn link_tx_status(&mut self) -> EngineStatus {
        if self.tx_refused {
            return REFUSED;
        }
        engine_status(hw::tx_state())
    }

    fn link_rx_post(&mut self, nic_off: u32, cap: u32) {
        self.rx_refused = hw::rx_post(nic_off, cap).is_err();
        if self.rx_refused {
            defmt::error!("link rx post refused: nic {=u32:#x} + {=u32} outside the endpoint", nic_off, cap);
        }
    }

    fn link_rx_status(&mut self) -> RxStatus {
        if self.rx_refused {
            // An empty packet with a bad trailer: the firmware drops it and posts again.
            return RxStatus { posted: false, bytes: 0, complete: true, crc_ok: false };
        }
        let (bits, bytes) = hw::rx_state();
        let complete = bits & rx_status::COMPLETE != 0;
        RxStatus {
            posted: bits & rx_status::POSTED != 0,
            bytes,
            complete,
            crc_ok: complete && bits & rx_status::CRC_OK != 0,
        }
    }

    fn raise_host_irq(&mut self) {
        hw::raise_host_irq();
    }

    /// With a transfer running, return at once: the firmware polls its progress counters
    /// to pipeline the packet. Otherwise block in WAIT_EVENT until a doorbell or an engine
    /// event; event bits are latched, so one that arrived during the last poll returns at
    /// once instead of being lost.
    fn idle(&mut self, engines_busy: bool) {
        if engines_busy {
            return;
        }
        let events = hw::wait_event();
        defmt::trace!("idle: events {=u32:#x}", events);
    }
}
