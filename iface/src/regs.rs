// SPDX-License-Identifier: GPL-2.0-only
//! MMIO register map of the NIC processor (flashed mode): DMA engines, link, doorbell,
//! host interrupt, log FIFO and clock. The NIC maps NIC memory at [`NIC_MEM_BASE`] in
//! the processor's address space and these registers at [`REGS_BASE`]. All registers
//! are 32 bits wide. Writing a `*_CMD` register starts the engine with the parameters
//! written before it.

/// Where NIC memory appears to the NIC processor.
pub const NIC_MEM_BASE: u32 = 0x8000_0000;
pub const REGS_BASE: u32 = 0x1000_0000;
pub const REGS_BYTES: u32 = 0x1000;

/// ro: [`ID_VALUE`].
pub const ID: u32 = 0x00;
pub const ID_VALUE: u32 = 0x4349_4E54; // "TNIC"
/// ro: blocks until a host doorbell or an engine event (or a short timeout), then
/// returns and clears the pending [`event`] bits.
pub const WAIT_EVENT: u32 = 0x04;
/// wo: any write raises the host interrupt.
pub const HOST_IRQ: u32 = 0x08;
/// wo: one byte (bits 0..8) of defmt log output.
pub const LOG_FIFO: u32 = 0x0C;
/// ro: nanoseconds since the core started, low and high words (read LO first).
pub const TIME_LO: u32 = 0x10;
pub const TIME_HI: u32 = 0x14;
/// wo: the firmware's fault code; the core halts after the write.
pub const HALT: u32 = 0x18;

/// Host-bus DMA engine (one transfer at a time, either direction).
pub const HDMA_HOST_LO: u32 = 0x40;
pub const HDMA_HOST_HI: u32 = 0x44;
pub const HDMA_NIC_OFF: u32 = 0x48;
pub const HDMA_LEN: u32 = 0x4C;
/// wo: [`HDMA_TO_NIC`] or [`HDMA_TO_HOST`]: start.
pub const HDMA_CMD: u32 = 0x50;
/// ro: bytes of the current (or last) transfer completed so far.
pub const HDMA_DONE: u32 = 0x54;
/// ro: [`status`] bits.
pub const HDMA_STATUS: u32 = 0x58;
pub const HDMA_TO_NIC: u32 = 1;
pub const HDMA_TO_HOST: u32 = 2;

/// Link-out engine.
pub const TX_NIC_OFF: u32 = 0x80;
pub const TX_LEN: u32 = 0x84;
/// wo: [`tx_flags`]: start.
pub const TX_CMD: u32 = 0x88;
pub const TX_DONE: u32 = 0x8C;
pub const TX_STATUS: u32 = 0x90;

/// Link-in engine.
pub const RX_NIC_OFF: u32 = 0xC0;
pub const RX_CAP: u32 = 0xC4;
/// wo: 1 = post the buffer for the next packet.
pub const RX_CMD: u32 = 0xC8;
/// ro: bytes of the current packet written so far.
pub const RX_BYTES: u32 = 0xCC;
/// ro: [`rx_status`] bits.
pub const RX_STATUS: u32 = 0xD0;

/// Engine status bits (host DMA, link out).
pub mod status {
    pub const BUSY: u32 = 1 << 0;
    /// The last transfer was refused (host DMA: address outside registered memory).
    pub const ERROR: u32 = 1 << 1;
}

/// Link-out command flags.
pub mod tx_flags {
    /// First transfer of a packet.
    pub const FIRST: u32 = 1 << 0;
    /// Last transfer of a packet: the engine appends the CRC trailer.
    pub const LAST: u32 = 1 << 1;
    /// Abort the packet in progress: the trailer is made invalid so the receiver drops it.
    pub const ABORT: u32 = 1 << 2;
}

/// Link-in status bits.
pub mod rx_status {
    /// A buffer is posted and not yet completed.
    pub const POSTED: u32 = 1 << 0;
    /// The packet in the posted buffer ended; `RX_BYTES` is its length without trailer.
    pub const COMPLETE: u32 = 1 << 1;
    /// The trailer checked (only meaningful with COMPLETE).
    pub const CRC_OK: u32 = 1 << 2;
    /// The packet was longer than the buffer; the rest was discarded (CRC_OK clear).
    pub const OVERFLOW: u32 = 1 << 3;
}

/// Event bits returned by [`WAIT_EVENT`].
pub mod event {
    pub const DOORBELL: u32 = 1 << 0;
    pub const HDMA: u32 = 1 << 1;
    pub const TX: u32 = 1 << 2;
    pub const RX: u32 = 1 << 3;
    pub const TIMEOUT: u32 = 1 << 4;
}
