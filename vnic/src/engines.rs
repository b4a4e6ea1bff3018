// SPDX-License-Identifier: GPL-2.0-only
//! The virtual NIC's DMA engines, in software: the firmware's [`Engines`] for native mode,
//! and the machinery behind the MMIO registers in flashed mode.
//!
//! Transfers complete when they are started (a `memcpy` is faster than any poll), so a
//! packet's cut-through pulses reach the link as fast as the firmware issues them. The
//! link-out engine notes where a packet's pulses lie in send staging and at its last
//! pulse has the [`Link`] copy the whole packet from there straight into its frames (a
//! datagram link cannot stream a packet; the firmware keeps a packet's staging until
//! its last pulse completed, so the pulses' bytes are still there); link in delivers one
//! whole packet per posted buffer, written into receive staging straight from the
//! link's frame — only its header and control message at once when the link keeps that
//! frame ([`Link::held_packet`]): the payload's host-bus writes then read the frame, and
//! whatever is left goes to staging before the link receives again (one copy of the
//! payload fewer; what the firmware sees is the same). Host memory is reached only
//! through the [`DmaSpace`]: a transfer outside every registered region is refused and
//! counted.
//!
//! When the firmware finds nothing to do, [`SoftEngines::idle`] spins for a short budget
//! (a wakeup across cores costs tens of µs on these machines) and then parks in `poll(2)`
//! on the host doorbell, the link and the control eventfd.

use crate::dma::{DmaSpace, DmaView};
use crate::link::{Link, LinkStats};
use crate::shm::Mapping;
use crate::trace::{EventLog, Kind, Record};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trapeze_firmware::hal::{EngineStatus, Engines, HostDir, RxStatus};
use trapeze_firmware::iface::answer;
use trapeze_firmware::iface::layout::{LinkCounter, CTRL_MSG_BYTES, MAX_MTU_BYTES, NIC_LOCAL_DMA_BASE};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_firmware::iface::regs::tx_flags;
use trapeze_firmware::iface::wire::{self, HEADER_BYTES};

/// Largest packet on the link, trailer excluded.
pub const MAX_PACKET_BYTES: usize = (HEADER_BYTES + CTRL_MSG_BYTES + MAX_MTU_BYTES) as usize;

mod echo;
mod staging;
#[cfg(test)]
mod tests;
mod wake;

pub use wake::{new_eventfd, Notifier, Wake, Wakers, BUSY_PARK};

use echo::{echo_traced, Received, ECHOES_PER_POLL};
use staging::{
    read_staging, settle_deferred, settle_held, write_from_held, Deferred, Vouched, DEFERRED_MAX, RX_PREFIX_BYTES,
};

/// Engine counters visible outside the processor thread.
#[derive(Default)]
pub struct EngineStats {
    /// Bytes the host DMA engine moved to or from host RAM.
    pub host_dma_bytes: AtomicU64,
    /// Bytes it moved to or from NIC-local memory ([`NIC_LOCAL_DMA_BASE`] and up): none of
    /// them crossed host RAM.
    pub nic_local_dma_bytes: AtomicU64,
    pub link_tx_packets: AtomicU64,
    pub parks: AtomicU64,
    /// Received packets whose header named another sender than the NIC that sent them:
    /// the header's source was set to the sending NIC's link address.
    pub src_stamped: AtomicU64,
    /// Answers sent aborted because their entry changed after the firmware checked it
    /// and before link out read the payload from the host's frame (see `vouch_answer`).
    pub answers_torn: AtomicU64,
    pub link: Mutex<LinkStats>,
    /// The link-level echo: probes to send, replies come back, counters ([`crate::echo`]).
    pub echo: crate::echo::EchoBoard,
}

/// The engines of one NIC.
pub struct SoftEngines {
    nic: Arc<Mapping>,
    dma: Arc<DmaSpace>,
    link: Link,
    notifier: Arc<Notifier>,
    wakers: Arc<Wakers>,
    stats: Arc<EngineStats>,
    spin: Duration,
    /// How long an idle stretch keeps polling while the host awaits a reply (an IPT entry
    /// armed and not delivered), beyond `spin`.
    reply_spin: Duration,
    /// NIC memory as words, for the IPT check.
    words: crate::nicmem::NicMem,
    hdma: EngineStatus,
    tx: EngineStatus,
    /// The packet being sent: its pulses as (NIC offset, length), in order (one run
    /// when the pulses are contiguous, as the firmware's are), and its length so far.
    tx_pulses: Vec<(u32, u32)>,
    tx_len: usize,
    tx_over: bool,
    /// The answer payload the firmware vouched for, still in host memory: its staging
    /// range and the entry link out checks again once it has read it.
    tx_vouched: Option<Vouched>,
    rx_post: Option<(u32, u32)>,
    rx: RxStatus,
    /// A received packet whose bytes past [`RX_PREFIX_BYTES`] are still only in the
    /// link's held frame ([`Link::held_packet`]): (NIC offset of the packet, its length).
    /// Host-bus writes from that range are served from the frame; the rest is copied to
    /// staging before the link receives again or when asked for otherwise.
    rx_held: Option<(u32, u32)>,
    /// Host-bus reads into send staging whose bytes are still only in host memory (see
    /// [`Deferred`]), oldest first, at most [`DEFERRED_MAX`].
    tx_deferred: Vec<Deferred>,
    /// This engine's copy of the DMA regions (no lock per transfer).
    dma_view: DmaView,
    /// Whether host-bus reads into send staging may be deferred: only while the native
    /// firmware drives the engines (it reports released staging and never reads payload
    /// bytes); a flashed image may do anything with NIC memory.
    defer_reads: bool,
    idle_since: Option<Instant>,
    /// The event trace, when asked for ([`crate::trace`]).
    trace: Option<EventLog>,
}

impl SoftEngines {
    pub fn new(
        nic: Arc<Mapping>,
        dma: Arc<DmaSpace>,
        link: Link,
        notifier: Arc<Notifier>,
        wakers: Arc<Wakers>,
        stats: Arc<EngineStats>,
        spin: Duration,
    ) -> Self {
        SoftEngines {
            words: crate::nicmem::NicMem::new(nic.clone()),
            nic,
            dma,
            link,
            notifier,
            wakers,
            stats,
            spin,
            reply_spin: Duration::ZERO,
            hdma: EngineStatus::default(),
            tx: EngineStatus::default(),
            tx_pulses: Vec::with_capacity(8),
            tx_len: 0,
            tx_over: false,
            tx_vouched: None,
            rx_post: None,
            rx: RxStatus::default(),
            rx_held: None,
            tx_deferred: Vec::with_capacity(DEFERRED_MAX),
            dma_view: DmaView::default(),
            defer_reads: true,
            idle_since: None,
            trace: None,
        }
    }

    /// Record what the engines do from now on in `log` (`None`: stop).
    pub fn set_trace(&mut self, log: Option<EventLog>) {
        self.trace = log;
    }

    /// Keep polling for up to `d` of an idle stretch while the host awaits a reply (see
    /// [`idle_wait`](Self::idle_wait)); zero (the default) parks after the spin alone.
    pub fn set_reply_spin(&mut self, d: Duration) {
        self.reply_spin = d;
    }

    /// Allow or forbid deferring host-bus reads into send staging (see `Deferred`); a
    /// flashed image's processor forbids it. Forbidding settles what is deferred.
    pub fn set_defer_reads(&mut self, on: bool) {
        if !on {
            settle_deferred(&mut self.tx_deferred, &self.nic, None);
        }
        self.defer_reads = on;
    }

    /// Forget any packet in progress (processor reset). The link is kept.
    pub fn reset(&mut self) {
        self.hdma = EngineStatus::default();
        self.tx = EngineStatus::default();
        self.tx_pulses.clear();
        self.tx_len = 0;
        self.tx_vouched = None;
        self.rx_post = None;
        self.rx = RxStatus::default();
        self.rx_held = None;
        settle_deferred(&mut self.tx_deferred, &self.nic, None);
        self.idle_since = None;
    }

    /// Copy the rest of a held received packet into receive staging (the link is about
    /// to receive again, which gives its frame back).
    fn settle_held(&mut self) {
        settle_held(&mut self.rx_held, &self.link, &self.nic);
    }

    pub fn wakers(&self) -> &Arc<Wakers> {
        &self.wakers
    }

    /// Publish the link's statistics: to the NIC's own status ([`crate::nic::link_stats`])
    /// and to the hosts, as the control block's link counters (`ctrl::LINK_COUNTERS`).
    pub(crate) fn publish_link_stats(&self) {
        let s = self.link.stats();
        for c in LinkCounter::ALL {
            self.words.store_u64(c.offset(), s.counter(c));
        }
        *self.stats.link.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }
}

impl Engines for SoftEngines {
    fn host_dma_start(&mut self, dir: HostDir, host_addr: u64, nic_off: u32, len: u32) {
        self.idle_since = None;
        let SoftEngines { dma, nic, link, rx_held, tx_deferred, dma_view, defer_reads, .. } = self;
        // Whatever this transfer overwrites or reads in NIC memory must be there first.
        settle_deferred(tx_deferred, nic, Some((nic_off, len)));
        // The mapping is lent for the transfer (no reference count taken per DMA).
        let ok = dma
            .with_translated_in(dma_view, host_addr, len as u64, |map, off| match dir {
                HostDir::ToNic => {
                    let in_nic = (nic_off as usize).checked_add(len as usize).is_some_and(|e| e <= nic.len());
                    if !in_nic || off.checked_add(len as usize).is_none_or(|e| e > map.len()) {
                        return false;
                    }
                    if !*defer_reads {
                        return nic.copy_from(nic_off as usize, map, off, len as usize);
                    }
                    if tx_deferred.len() == DEFERRED_MAX {
                        tx_deferred.remove(0).settle(nic);
                    }
                    tx_deferred.push(Deferred { nic_off, len, map: map.clone(), map_off: off });
                    true
                }
                HostDir::ToHost => match write_from_held(rx_held, link, nic_off, map, off, len) {
                    Some(ok) => ok,
                    None => {
                        if rx_held.is_some_and(|(o, l)| nic_off < o + l && o < nic_off + len) {
                            settle_held(rx_held, link, nic);
                        }
                        map.copy_from(off, nic, nic_off as usize, len as usize)
                    }
                },
            })
            .unwrap_or(false);
        if ok {
            let local = host_addr >= NIC_LOCAL_DMA_BASE;
            let counter = if local { &self.stats.nic_local_dma_bytes } else { &self.stats.host_dma_bytes };
            counter.fetch_add(len as u64, Ordering::Relaxed);
        }
        self.hdma = EngineStatus { busy: false, done: if ok { len } else { 0 }, error: !ok };
    }

    fn host_dma_status(&mut self) -> EngineStatus {
        self.hdma
    }

    fn link_tx_start(&mut self, nic_off: u32, len: u32, flags: u32) {
        self.idle_since = None;
        if flags & tx_flags::FIRST != 0 {
            self.tx_pulses.clear();
            self.tx_len = 0;
            self.tx_over = false;
        }
        if self.tx_len + len as usize > MAX_PACKET_BYTES || nic_off as usize + len as usize > self.nic.len() {
            self.tx_over = true;
        } else if len > 0 {
            match self.tx_pulses.last_mut() {
                Some((off, l)) if *off + *l == nic_off => *l += len,
                _ => self.tx_pulses.push((nic_off, len)),
            }
            self.tx_len += len as usize;
        }
        if flags & tx_flags::LAST != 0 {
            let abort = flags & tx_flags::ABORT != 0 || self.tx_over;
            let (nic, pulses, deferred) = (&self.nic, &self.tx_pulses, &self.tx_deferred);
            let (vouched, words, mut torn) = (self.tx_vouched.take(), &self.words, false);
            // Staging bytes at `off`, and once they complete a vouched payload, whether its
            // entry still holds what the firmware checked (a seqlock's second look).
            let mut piece = |off: usize, buf: &mut [u8]| {
                let ok = read_staging(deferred, nic, off, buf);
                match vouched {
                    Some(v) if v.completed_by(off, buf.len()) && !answer::still(words, &v.entry) => {
                        torn = true;
                        false
                    }
                    _ => ok,
                }
            };
            // Packet offset `at` → the pulse holding it; `read` asks for bytes in order.
            let (mut i, mut base) = (0usize, 0usize);
            let mut read = |at: usize, buf: &mut [u8]| {
                if let [(off, l)] = pulses[..] {
                    // One pulse (a control message, a packet staged whole): the bytes are
                    // at `off + at`, no cursor to keep (the loop below would find the same).
                    if at + buf.len() <= l as usize {
                        return piece(off as usize + at, buf);
                    }
                }
                if at < base {
                    // Asked again from before the cursor (the link's route peek): restart.
                    (i, base) = (0, 0);
                }
                let mut done = 0;
                while done < buf.len() {
                    while i < pulses.len() && at + done >= base + pulses[i].1 as usize {
                        base += pulses[i].1 as usize;
                        i += 1;
                    }
                    let Some(&(off, l)) = pulses.get(i) else { return false };
                    let skip = at + done - base;
                    let n = (l as usize - skip).min(buf.len() - done);
                    if !piece(off as usize + skip, &mut buf[done..done + n]) {
                        return false;
                    }
                    done += n;
                }
                true
            };
            // Traced as it leaves: a receiver may log the packet before this call returns.
            let mut header = [0u8; HEADER_BYTES as usize];
            let traced = match self.trace.as_ref() {
                Some(log) if !abort && read(0, &mut header) => {
                    Record::packet(Kind::Tx, log.now_ns(), u16::from_le_bytes([header[6], header[7]]), &header)
                }
                _ => None,
            };
            // Send errors are counted by the link; the firmware sees the packet sent.
            let _ = self.link.send_packet_from(self.tx_len, abort, &mut read);
            if torn {
                self.stats.answers_torn.fetch_add(1, Ordering::Relaxed);
            }
            if let (Some(log), Some(r)) = (self.trace.as_mut(), traced) {
                log.push(&r);
            }
            self.stats.link_tx_packets.fetch_add(1, Ordering::Relaxed);
            // The packet's deferred reads are dropped when the firmware releases its
            // staging (`tx_staging_released`), sent or failed.
            self.tx_pulses.clear();
            self.tx_len = 0;
        }
        self.tx = EngineStatus { busy: false, done: len, error: false };
    }

    fn link_tx_status(&mut self) -> EngineStatus {
        self.tx
    }

    fn tx_staging_released(&mut self, nic_off: u32, len: u32) {
        // Those bytes are dead: whatever a deferred read owed them is never needed.
        if self.tx_deferred.iter().any(|d| d.overlaps(nic_off, len)) {
            self.tx_deferred.retain(|d| !d.overlaps(nic_off, len));
        }
    }

    fn vouch_answer(&mut self, nic_off: u32, len: u32, entry: &answer::Found) {
        // Bytes still in the host's frame are read by link out after the firmware's check:
        // it checks the entry again after reading them (no copy into staging first).
        let deferred = self.tx_deferred.iter().any(|d| d.overlaps(nic_off, len));
        self.tx_vouched = deferred.then_some(Vouched { off: nic_off, len, entry: *entry });
    }

    fn completes_at_once(&self) -> bool {
        // Host DMA and link out copy within their start calls.
        true
    }

    fn link_rx_post(&mut self, nic_off: u32, cap: u32) {
        // Link in will write there: bytes a deferred read still owes must land first.
        settle_deferred(&mut self.tx_deferred, &self.nic, Some((nic_off, cap)));
        if let Some((off, len)) = self.rx_held {
            if nic_off < off + len && off < nic_off + cap {
                // The firmware reuses that staging: it is done with the held packet.
                self.rx_held = None;
            }
        }
        self.rx_post = Some((nic_off, cap));
        self.rx = RxStatus { posted: true, bytes: 0, complete: false, crc_ok: false };
    }

    fn link_rx_status(&mut self) -> RxStatus {
        // Held (reordered) frames and stale reassemblies have deadlines; errors are counted.
        let _ = self.link.poll_timers();
        self.send_queued_probes();
        if let Some((off, cap)) = self.rx_post {
            // Receiving gives the link's held frame back: settle the held packet first.
            self.settle_held();
            // Echo packets are the NIC's own (`crate::echo`): answered or matched here and
            // never given to the firmware; a bounded number per call, then the firmware
            // runs again.
            for _ in 0..ECHOES_PER_POLL {
                let node = self.link.node();
                let (nic, stats, trace) = (&self.nic, &self.stats, &mut self.trace);
                let got = self.link.poll_packet_held_with(|bytes, src, crc_ok, held| {
                    if crate::echo::is_echo(bytes) {
                        let h = stats.echo.handle_packet(node, bytes, src, crc_ok);
                        if let Some(log) = trace.as_mut() {
                            echo_traced(log, &h);
                        }
                        return Received::Echo(h);
                    }
                    if let Some(log) = trace.as_mut() {
                        if let Some(r) = Record::packet(Kind::Rx, log.now_ns(), src, bytes) {
                            log.push(&r);
                        }
                    }
                    let n = bytes.len().min(cap as usize);
                    let fits = bytes.len() <= cap as usize;
                    // The firmware reads the header and control message from staging; a held
                    // packet's payload can wait in the link's frame for the host-bus write
                    // (one copy fewer), everything else is written now.
                    let now = if held && fits { n.min(RX_PREFIX_BYTES) } else { n };
                    let mut wrote = nic.write(off as usize, &bytes[..now]) && off as usize + n <= nic.len();
                    // The sender is the NIC the link says sent it, whatever its host wrote in
                    // the header: a host cannot claim another node's id.
                    let at = wire::SRC_OFFSET;
                    if at + 2 <= n && bytes[at..at + 2] != src.to_le_bytes() {
                        stats.src_stamped.fetch_add(1, Ordering::Relaxed);
                        wrote &= nic.write(off as usize + at, &src.to_le_bytes());
                    }
                    Received::Packet(n, crc_ok && wrote && fits, now < n)
                });
                match got {
                    Some(Received::Packet(n, ok, held)) => {
                        self.idle_since = None;
                        self.rx = RxStatus { posted: false, bytes: n as u32, complete: true, crc_ok: ok };
                        self.rx_post = None;
                        self.rx_held = held.then_some((off, n as u32));
                        break;
                    }
                    Some(Received::Echo(h)) => self.echo_handled(h),
                    None => break,
                }
            }
        }
        self.rx
    }

    fn link_rx_pending(&mut self) -> bool {
        // Frames on the link's delay line (or a reordered one) go out when due even while
        // the firmware posts no receive buffer (link_rx_status runs their timers too).
        // (poll_timers returns at once when the link has none.)
        let _ = self.link.poll_timers();
        self.send_queued_probes();
        self.link.rx_pending()
    }

    fn raise_host_irq(&mut self) {
        if let Some(log) = self.trace.as_mut() {
            log.record(Kind::Irq, 0, 0, 0, false);
        }
        self.notifier.raise();
    }

    /// Soft transfers finish when started, so no engine is ever mid-transfer here: an idle
    /// pass always means "wait for the host or the link".
    fn idle(&mut self, engines_busy: bool) {
        self.idle_wait(engines_busy);
    }
}
