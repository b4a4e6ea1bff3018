// SPDX-License-Identifier: GPL-2.0-only
//! NIC memory map: where the firmware image, the control block, the rings, the IPT, the
//! staging buffers and the answer table live inside the 1 MiB of NIC memory, and the
//! control-block words.
//!
//! ```text
//! 0x00000 ┌──────────────────────┐
//!         │ firmware image       │ code + rodata (IMAGE_TEXT_BYTES)
//! 0x08000 ├──────────────────────┤
//!         │ firmware RAM         │ data + bss + stack (IMAGE_RAM_BYTES)
//! 0x0C000 ├──────────────────────┤
//!         │ control block        │ config, status, counters, interrupt words
//! 0x0D000 ├──────────────────────┤
//!         │ send ring            │ SEND_RING_ENTRIES × 256 B
//! 0x0F000 ├──────────────────────┤
//!         │ receive ring         │ RECV_RING_ENTRIES × 256 B
//! 0x11000 ├──────────────────────┤
//!         │ IPT                  │ IPT_ENTRIES × 128 B
//! 0x15000 ├──────────────────────┤
//!         │ send staging         │ packets between host bus and link out
//! 0x2A800 ├──────────────────────┤
//!         │ receive staging      │ packets between link in and host bus
//! 0x40000 ├──────────────────────┤
//!         │ answer table         │ ANSWER_ENTRIES × 64 B: host memory the NIC sends
//!         │                      │ by itself (`answer`)
//! 0x100000└──────────────────────┘
//! ```

/// Total NIC memory: the 256 KiB of a LANai 4 Myrinet adapter for the endpoint, and as
/// much again three times over for the answer table (later LANai boards had 2 MiB).
pub const NIC_MEM_BYTES: u32 = 1024 * 1024;

/// Firmware code and read-only data.
pub const IMAGE_TEXT_OFF: u32 = 0x0_0000;
pub const IMAGE_TEXT_BYTES: u32 = 0x8000;
/// Firmware data, bss and stack.
pub const IMAGE_RAM_OFF: u32 = 0x0_8000;
pub const IMAGE_RAM_BYTES: u32 = 0x4000;
/// Everything the image may occupy.
pub const IMAGE_BUDGET_BYTES: u32 = IMAGE_TEXT_BYTES + IMAGE_RAM_BYTES;

pub const CTRL_OFF: u32 = 0x0_C000;
pub const CTRL_BYTES: u32 = 0x1000;

/// Size of one ring entry: 128 bytes of header fields + a 128-byte control message.
pub const RING_ENTRY_BYTES: u32 = 256;
pub const SEND_RING_ENTRIES: u32 = 32;
pub const RECV_RING_ENTRIES: u32 = 32;
pub const SEND_RING_OFF: u32 = 0x0_D000;
pub const RECV_RING_OFF: u32 = SEND_RING_OFF + SEND_RING_ENTRIES * RING_ENTRY_BYTES;

pub const IPT_ENTRY_BYTES: u32 = 128;
pub const IPT_ENTRIES: u32 = 128;
pub const IPT_OFF: u32 = RECV_RING_OFF + RECV_RING_ENTRIES * RING_ENTRY_BYTES;

pub const STAGING_OFF: u32 = IPT_OFF + IPT_ENTRIES * IPT_ENTRY_BYTES;
pub const STAGING_BYTES: u32 = ANSWER_OFF - STAGING_OFF;
pub const SEND_STAGING_OFF: u32 = STAGING_OFF;
pub const SEND_STAGING_BYTES: u32 = STAGING_BYTES / 2;
pub const RECV_STAGING_OFF: u32 = SEND_STAGING_OFF + SEND_STAGING_BYTES;
pub const RECV_STAGING_BYTES: u32 = STAGING_BYTES - SEND_STAGING_BYTES;

/// The answer table (`answer`): entries of host memory the NIC may send by itself.
pub const ANSWER_OFF: u32 = 0x4_0000;
pub const ANSWER_ENTRY_BYTES: u32 = 64;
pub const ANSWER_ENTRIES: u32 = (NIC_MEM_BYTES - ANSWER_OFF) / ANSWER_ENTRY_BYTES;

/// Largest control message.
pub const CTRL_MSG_BYTES: u32 = 128;
/// Largest payload any configuration may allow (scatter/gather over several frames).
pub const MAX_MTU_BYTES: u32 = 64 * 1024;
/// Scatter/gather segments per ring entry or IPT entry.
pub const MAX_SEGMENTS: u32 = 8;

/// DMA addresses at or above this name memory on the NIC's side of the host bus — a
/// buffer bank on the card that a host maps as a BAR (Myrinet's LANai SRAM in the gmblock
/// paper, a P2PDMA BAR today) — not host RAM. A segment there is a payload already in NIC
/// memory: a NIC moves it without touching host memory, and counts it apart
/// (`nic_local_dma_bytes`) from host-RAM DMA. A host registers such a bank like any other
/// region, at this base.
pub const NIC_LOCAL_DMA_BASE: u64 = 0xF000_0000_0000_0000;

/// Control block: word offsets relative to [`CTRL_OFF`]. "host" words are written by the
/// host only, "fw" words by the firmware only.
pub mod ctrl {
    /// host: [`super::ENDPOINT_MAGIC`] once the host has initialised the endpoint.
    pub const MAGIC: u32 = 0x000;
    /// host: [`super::LAYOUT_VERSION`].
    pub const LAYOUT_VERSION: u32 = 0x004;
    /// host: this node's id on the link.
    pub const NODE_ID: u32 = 0x008;
    /// host: DMA policy ([`super::Policy`] as u32).
    pub const POLICY: u32 = 0x00C;
    /// host: send pulse threshold in bytes (host bus → link).
    pub const SEND_PULSE: u32 = 0x010;
    /// host: receive pulse threshold in bytes (link → host bus).
    pub const RECV_PULSE: u32 = 0x014;
    /// host: payload MTU in bytes (≤ MAX_MTU_BYTES).
    pub const MTU: u32 = 0x018;
    /// host: notification bits ([`super::notify`]).
    pub const NOTIFY: u32 = 0x01C;
    /// host: bumped after changing any config word; the firmware reloads config when it
    /// sees a new value and echoes it in [`FW_CONFIG_SEQ`].
    pub const CONFIG_SEQ: u32 = 0x020;
    /// host: a request to the NIC device itself, not to its firmware, for hosts that
    /// reach the NIC only through NIC memory and doorbells (a QEMU guest's driver):
    /// `seq << host_req::SEQ_SHIFT | op` ([`super::host_req`]). Write it with `Release`,
    /// then ring the device-request doorbell (ivshmem: vector 1 of peer 0); the device
    /// carries it out and echoes the word in [`HOST_REQ_DONE`]. A new request needs a new
    /// `seq`.
    pub const HOST_REQ: u32 = 0x024;
    /// host: non-zero while the host is taking messages off the receive ring anyway (its
    /// receive path is running): the firmware raises no receive interrupt meanwhile
    /// (NAPI-like). The host stores 0 with `SeqCst` before it looks at the ring a last
    /// time; the firmware publishes a slot, then loads this word `SeqCst`: one of the two
    /// sees the other, so no message waits for an interrupt that was never raised.
    pub const IRQ_HOLD: u32 = 0x028;

    /// fw: [`super::FwState`] — the ready word a loader waits for.
    pub const FW_STATE: u32 = 0x040;
    /// fw: firmware version (major << 16 | minor << 8 | patch).
    pub const FW_VERSION: u32 = 0x044;
    /// fw: build id (FNV-1a of the firmware sources the image was built from), 0 for
    /// native builds.
    pub const FW_BUILD_ID: u32 = 0x048;
    /// fw: main-loop iterations (wrapping) — a heartbeat.
    pub const FW_HEARTBEAT: u32 = 0x04C;
    /// fw: last CONFIG_SEQ applied.
    pub const FW_CONFIG_SEQ: u32 = 0x050;
    /// fw: receive sequence: bumped for every message made ready in the receive ring.
    pub const FW_RX_SEQ: u32 = 0x054;
    /// fw: send sequence: bumped for every send entry completed.
    pub const FW_TX_SEQ: u32 = 0x058;
    /// fw: why the firmware stopped, if FW_STATE is FAULT.
    pub const FW_FAULT: u32 = 0x05C;

    /// device (the NIC, not its firmware): 0 if the request in [`HOST_REQ_DONE`]
    /// succeeded, else a `host_req::STATUS_*` code; written before `HOST_REQ_DONE`.
    pub const HOST_REQ_STATUS: u32 = 0x0C0;
    /// device: the last [`HOST_REQ`] value carried out, stored with `Release` after
    /// [`HOST_REQ_STATUS`]. A host waits for it to equal the request it wrote.
    pub const HOST_REQ_DONE: u32 = 0x0C4;
    /// device: this NIC's node id on its link, as `super::NIC_NODE_VALID | id`, published
    /// by the NIC when it is created (like an adapter's burnt-in address); 0 if unknown.
    /// A host should configure `NODE_ID` to it: the link routes packets by node id.
    pub const NIC_NODE: u32 = 0x0C8;
    /// device: whether the NIC's link runs under a cluster key (every packet carries a MAC
    /// and a stamp: `super::LINK_KEYED`) or not (0), published when the NIC is created.
    pub const LINK_FLAGS: u32 = 0x0CC;

    /// fw: counters, [`super::Counter::COUNT`] × u64 (low word first).
    pub const COUNTERS: u32 = 0x100;
    /// device: the link's counters of packets it refused before the firmware saw them,
    /// [`super::LinkCounter::COUNT`] × u64 (low word first), counted since the NIC was
    /// created (a host's reload does not reset them) and published by the NIC whenever
    /// its processor parks and when it halts: a host reads them current after `HALT`.
    pub const LINK_COUNTERS: u32 = 0x200;
}

pub const ENDPOINT_MAGIC: u32 = 0x545A_5045; // "TPZE"
pub const LAYOUT_VERSION: u32 = 1;
/// Set in `ctrl::NIC_NODE` when the word holds a node id (bits 0..16).
pub const NIC_NODE_VALID: u32 = 1 << 31;
/// Set in `ctrl::LINK_FLAGS` when the NIC's link authenticates every packet under a
/// cluster key.
pub const LINK_KEYED: u32 = 1 << 0;

/// Requests to the NIC device in `ctrl::HOST_REQ` (see there for the handshake).
pub mod host_req {
    /// The operation is in bits 0..8 …
    pub const OP_MASK: u32 = 0xFF;
    /// … and a host-chosen sequence number above them.
    pub const SEQ_SHIFT: u32 = 8;
    /// Stop the NIC processor: no DMA and no delivery until `START`; `FW_STATE` reads
    /// `Halted` once done. Idempotent.
    pub const HALT: u32 = 1;
    /// Start the firmware afresh (halting it first if it runs): the firmware reads the
    /// control block's configuration and starts at ring position 0 on both rings, so the
    /// host initialises its endpoint while halted, then asks for `START`. Done once
    /// `FW_STATE` reads `Ready`.
    pub const START: u32 = 2;

    pub const STATUS_OK: u32 = 0;
    /// The device could not carry the request out (its log says why).
    pub const STATUS_FAILED: u32 = 1;
    /// Unknown operation.
    pub const STATUS_UNKNOWN_OP: u32 = 2;
}

/// Firmware life-cycle, published in `ctrl::FW_STATE`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwState {
    Halted = 0,
    Booting = 1,
    /// The main loop runs; the endpoint is live.
    Ready = 2,
    /// The firmware stopped on an internal error (see `ctrl::FW_FAULT`).
    Fault = 3,
}

impl FwState {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Halted),
            1 => Some(Self::Booting),
            2 => Some(Self::Ready),
            3 => Some(Self::Fault),
            _ => None,
        }
    }
}

/// Notification bits in `ctrl::NOTIFY`.
pub mod notify {
    /// Interrupt the host for every message made ready in the receive ring.
    pub const IRQ_ON_RECV: u32 = 1 << 0;
    /// Interrupt the host when a send entry completes.
    pub const IRQ_ON_SEND_DONE: u32 = 1 << 1;
}

/// How a sink DMA engine is fed from the bytes buffered in NIC memory.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Cut-through with eager DMA: start once `pulse` bytes are buffered, then move
    /// everything buffered (the pulse threshold is a minimum). Adapts under load.
    Eager = 0,
    /// Cut-through with fixed pulses: move exactly `pulse` bytes per transfer.
    FixedPulse = 1,
    /// Store-and-forward: move the packet once it is entirely buffered.
    StoreAndForward = 2,
}

impl Policy {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Eager),
            1 => Some(Self::FixedPulse),
            2 => Some(Self::StoreAndForward),
            _ => None,
        }
    }
}

/// Defaults applied when a config word is zero or out of range.
pub const DEFAULT_PULSE: u32 = 512;
pub const DEFAULT_MTU: u32 = 8192;

/// The control block's configuration words as one value: written by the host
/// ([`EndpointConfig::store`], then a `CONFIG_SEQ` bump), read by the firmware
/// ([`EndpointConfig::load`], which sanitises what it reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    pub node_id: u16,
    pub policy: Policy,
    /// Send pulse threshold in bytes (host bus → link).
    pub send_pulse: u32,
    /// Receive pulse threshold in bytes (link → host bus).
    pub recv_pulse: u32,
    /// Payload MTU in bytes (≤ [`MAX_MTU_BYTES`]).
    pub mtu: u32,
    /// [`notify`] bits.
    pub notify: u32,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            node_id: 0,
            policy: Policy::Eager,
            send_pulse: DEFAULT_PULSE,
            recv_pulse: DEFAULT_PULSE,
            mtu: DEFAULT_MTU,
            notify: 0,
        }
    }
}

impl EndpointConfig {
    /// Read the words; zero or out-of-range values become defaults (what the firmware
    /// applies, whatever a host wrote).
    pub fn load<M: super::mem::NicMemory + ?Sized>(mem: &M) -> Self {
        let w = |rel| mem.load_relaxed(ctrl_word(rel));
        let pulse = |v: u32| if v == 0 { DEFAULT_PULSE } else { v.min(MAX_MTU_BYTES) };
        EndpointConfig {
            node_id: w(ctrl::NODE_ID) as u16,
            policy: Policy::from_u32(w(ctrl::POLICY)).unwrap_or(Policy::Eager),
            send_pulse: pulse(w(ctrl::SEND_PULSE)),
            recv_pulse: pulse(w(ctrl::RECV_PULSE)),
            mtu: match w(ctrl::MTU) {
                0 => DEFAULT_MTU,
                v => v.min(MAX_MTU_BYTES),
            },
            notify: w(ctrl::NOTIFY),
        }
    }

    /// Write the words (relaxed: publish them with a release store of `CONFIG_SEQ`).
    pub fn store<M: super::mem::NicMemory + ?Sized>(&self, mem: &M) {
        for (rel, v) in [
            (ctrl::NODE_ID, self.node_id as u32),
            (ctrl::POLICY, self.policy as u32),
            (ctrl::SEND_PULSE, self.send_pulse),
            (ctrl::RECV_PULSE, self.recv_pulse),
            (ctrl::MTU, self.mtu),
            (ctrl::NOTIFY, self.notify),
        ] {
            mem.store_relaxed(ctrl_word(rel), v);
        }
    }
}

/// Firmware counters, each a u64 at `ctrl::COUNTERS + 8 * index`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    TxPackets = 0,
    TxBytes,
    RxPackets,
    RxBytes,
    /// Receive ring full: the packet waited in staging, the link back-pressured, until the
    /// host freed a slot.
    RxRingWait,
    /// Link CRC failed or the packet was aborted by its sender.
    RxDropCrc,
    /// Header malformed (magic, version, lengths): packet dropped.
    RxDropMalformed,
    /// Token failed validation: payload dropped, control message delivered with error.
    RxBadToken,
    /// Unsolicited payload with no (or too small a) receive frame attached.
    RxNoFrame,
    /// Payloads delivered through the IPT.
    RxIptDelivered,
    /// Host DMA refused by the bus (address outside registered host memory).
    DmaRefused,
    /// Send entries rejected as malformed (lengths, segments).
    TxMalformed,
    HostDmaTransfers,
    LinkTxTransfers,
    Interrupts,
    /// Answerable requests the NIC answered from its answer table, without its host.
    TxAnswers,
    /// Answers aborted on the link: their entry changed while the payload was read.
    TxAnswersAborted,
    /// Answerable requests handed to the host (entry empty or changing, another key).
    RxAnswerToHost,
}

impl Counter {
    pub const COUNT: usize = 18;
    pub const ALL: [Counter; Self::COUNT] = [
        Self::TxPackets,
        Self::TxBytes,
        Self::RxPackets,
        Self::RxBytes,
        Self::RxRingWait,
        Self::RxDropCrc,
        Self::RxDropMalformed,
        Self::RxBadToken,
        Self::RxNoFrame,
        Self::RxIptDelivered,
        Self::DmaRefused,
        Self::TxMalformed,
        Self::HostDmaTransfers,
        Self::LinkTxTransfers,
        Self::Interrupts,
        Self::TxAnswers,
        Self::TxAnswersAborted,
        Self::RxAnswerToHost,
    ];

    pub const fn offset(self) -> u32 {
        CTRL_OFF + ctrl::COUNTERS + 8 * self as u32
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::TxPackets => "tx_packets",
            Self::TxBytes => "tx_bytes",
            Self::RxPackets => "rx_packets",
            Self::RxBytes => "rx_bytes",
            Self::RxRingWait => "rx_ring_wait",
            Self::RxDropCrc => "rx_drop_crc",
            Self::RxDropMalformed => "rx_drop_malformed",
            Self::RxBadToken => "rx_bad_token",
            Self::RxNoFrame => "rx_no_frame",
            Self::RxIptDelivered => "rx_ipt_delivered",
            Self::DmaRefused => "dma_refused",
            Self::TxMalformed => "tx_malformed",
            Self::HostDmaTransfers => "host_dma_transfers",
            Self::LinkTxTransfers => "link_tx_transfers",
            Self::Interrupts => "interrupts",
            Self::TxAnswers => "tx_answers",
            Self::TxAnswersAborted => "tx_answers_aborted",
            Self::RxAnswerToHost => "rx_answer_to_host",
        }
    }
}

/// The link's refusals, each a u64 at `ctrl::LINK_COUNTERS + 8 * index`, written by the
/// NIC device (its link, below the firmware), read by hosts: what was dropped on arrival
/// and why. Names are those of the vNIC's `LinkStats` fields (`trapeze-nic status`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkCounter {
    /// Under a key: a missing or wrong MAC tag (a forgery, or a node under another key).
    MacRejected = 0,
    /// Under a key: a packet whose stamp was seen before (a replay).
    Replayed,
    /// Under a key: a packet of an older incarnation of its source (a replay across a
    /// restart).
    ReplayStaleEpoch,
    /// Under a key: a packet from a source beyond the receive windows the link keeps.
    ReplayTableFull,
    /// Under a key: a packet whose trailer (CRC or verdict) was changed on the way.
    TrailerForged,
    /// A trailer that did not check (damage, or a packet its sender aborted).
    CrcErrors,
    /// Frames that could not be parsed, were for another node or did not fit.
    BadFrames,
    /// Frames from an address that is not the node they name.
    ForeignFrames,
    /// Packets abandoned with a fragment missing.
    ReassemblyTimeouts,
    /// Packets dropped because the link's ready queue was full.
    RxQueueDrops,
}

impl LinkCounter {
    pub const COUNT: usize = 10;
    pub const ALL: [LinkCounter; Self::COUNT] = [
        Self::MacRejected,
        Self::Replayed,
        Self::ReplayStaleEpoch,
        Self::ReplayTableFull,
        Self::TrailerForged,
        Self::CrcErrors,
        Self::BadFrames,
        Self::ForeignFrames,
        Self::ReassemblyTimeouts,
        Self::RxQueueDrops,
    ];

    pub const fn offset(self) -> u32 {
        CTRL_OFF + ctrl::LINK_COUNTERS + 8 * self as u32
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::MacRejected => "mac_rejected",
            Self::Replayed => "replayed",
            Self::ReplayStaleEpoch => "replay_stale_epoch",
            Self::ReplayTableFull => "replay_table_full",
            Self::TrailerForged => "trailer_forged",
            Self::CrcErrors => "crc_errors",
            Self::BadFrames => "bad_frames",
            Self::ForeignFrames => "foreign_frames",
            Self::ReassemblyTimeouts => "reassembly_timeouts",
            Self::RxQueueDrops => "rx_queue_drops",
        }
    }
}

/// Absolute offset of a control-block word.
pub const fn ctrl_word(rel: u32) -> u32 {
    CTRL_OFF + rel
}

// Build-time checks of the map: regions are ordered, aligned and within NIC memory.
const _: () = {
    assert!(IMAGE_RAM_OFF == IMAGE_TEXT_OFF + IMAGE_TEXT_BYTES);
    assert!(CTRL_OFF == IMAGE_RAM_OFF + IMAGE_RAM_BYTES);
    assert!(SEND_RING_OFF >= CTRL_OFF + CTRL_BYTES);
    assert!(ctrl::COUNTERS + 8 * Counter::COUNT as u32 <= ctrl::LINK_COUNTERS);
    assert!(ctrl::LINK_COUNTERS + 8 * LinkCounter::COUNT as u32 <= CTRL_BYTES);
    assert!(ctrl::FW_FAULT < ctrl::HOST_REQ_STATUS && ctrl::LINK_FLAGS < ctrl::COUNTERS);
    assert!(SEND_RING_ENTRIES.is_power_of_two() && RECV_RING_ENTRIES.is_power_of_two());
    assert!(STAGING_OFF.is_multiple_of(8) && RECV_STAGING_OFF.is_multiple_of(8));
    assert!(RECV_STAGING_OFF + RECV_STAGING_BYTES == ANSWER_OFF);
    assert!(ANSWER_OFF + ANSWER_ENTRIES * ANSWER_ENTRY_BYTES == NIC_MEM_BYTES);
    assert!(NIC_MEM_BYTES.is_power_of_two()); // an ivshmem BAR
};
