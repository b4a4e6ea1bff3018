// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's DMA engines as the firmware sees them: the only hardware the scheduler uses
//! besides NIC memory. Implemented by the timing model ([`crate::sim`]), by the virtual
//! NIC in native mode, and over MMIO registers ([`crate::iface::regs`]) in the flashed
//! image. Engines are started with a command and then polled: the firmware reads
//! progress counters to pipeline a packet through the NIC while a transfer still runs.

use crate::iface::answer;

/// Direction of a host-bus DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDir {
    /// Host memory → NIC memory (a send payload).
    ToNic,
    /// NIC memory → host memory (a received payload).
    ToHost,
}

/// Status of a host-DMA or link-out engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStatus {
    pub busy: bool,
    /// Bytes of the current (or last) transfer completed so far.
    pub done: u32,
    /// The last transfer was refused (no bytes moved after the refusal).
    pub error: bool,
}

/// Status of the link-in engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStatus {
    /// A buffer is posted and its packet has not completed.
    pub posted: bool,
    /// Bytes of the current packet in the buffer so far.
    pub bytes: u32,
    /// The packet ended (`bytes` is final).
    pub complete: bool,
    /// The link trailer checked (only with `complete`).
    pub crc_ok: bool,
}

/// The three DMA engines (host bus, link out, link in) plus host notification.
pub trait Engines {
    /// Start a host-bus transfer. Only called when the engine is not busy.
    fn host_dma_start(&mut self, dir: HostDir, host_addr: u64, nic_off: u32, len: u32);
    fn host_dma_status(&mut self) -> EngineStatus;
    /// Start a link-out transfer of `len` bytes at `nic_off` with [`crate::iface::regs::tx_flags`].
    /// Only called when the engine is not busy.
    fn link_tx_start(&mut self, nic_off: u32, len: u32, flags: u32);
    fn link_tx_status(&mut self) -> EngineStatus;
    /// Post a buffer for the next incoming packet. Only called when no buffer is posted.
    fn link_rx_post(&mut self, nic_off: u32, cap: u32);
    fn link_rx_status(&mut self) -> RxStatus;
    /// Whether [`link_rx_status`](Self::link_rx_status) could report anything new now (a
    /// packet waiting for the posted buffer, link timers due). `false` only when polling
    /// link in would surely find nothing; engines that cannot tell cheaply keep `true`.
    fn link_rx_pending(&mut self) -> bool {
        true
    }
    fn raise_host_irq(&mut self);
    /// Whether every transfer has finished by the time its start call returns (engines
    /// emulated in software copy at once). The firmware then credits a transfer in the
    /// pass that started it instead of the next. `false` for hardware engines.
    fn completes_at_once(&self) -> bool {
        false
    }
    /// The firmware is done with `len` bytes of send staging at `nic_off` (the packet was
    /// sent or failed): engines that keep state about those bytes may drop it. Default: nothing.
    fn tx_staging_released(&mut self, nic_off: u32, len: u32) {
        let _ = (nic_off, len);
    }
    /// The firmware is about to send `len` bytes of send staging at `nic_off` (an
    /// answer's payload) as long as answer entry `entry` still holds what the firmware
    /// found there, which it checks next ([`answer::still`]). Host-bus reads brought those
    /// bytes in, and the host may reuse the frame they came from as soon as it retracted
    /// the entry. Engines whose reads copied when they ran (hardware, the flashed image's
    /// registers) have nothing to do: the default. Engines that leave read bytes in host
    /// memory until link out sends them (the native engines: one copy fewer) must send
    /// what the check vouched for: copy them now, or check the entry again once link out
    /// has read them and send the packet aborted if it changed.
    fn vouch_answer(&mut self, nic_off: u32, len: u32, entry: &answer::Found) {
        let _ = (nic_off, len, entry);
    }
    /// Called when a main-loop iteration found nothing to do. `engines_busy` says a
    /// transfer is running (so progress will come without an event); an implementation
    /// may block until a doorbell or engine event, or return at once.
    fn idle(&mut self, engines_busy: bool) {
        let _ = engines_busy;
    }
}
