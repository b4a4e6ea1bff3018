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
use rustix::event::{poll, PollFd, PollFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trapeze_firmware::hal::{EngineStatus, Engines, HostDir, RxStatus};
use trapeze_firmware::iface::layout::{CTRL_MSG_BYTES, MAX_MTU_BYTES};
use trapeze_firmware::iface::regs::tx_flags;
use trapeze_firmware::iface::wire::HEADER_BYTES;

/// Largest packet on the link, trailer excluded.
pub const MAX_PACKET_BYTES: usize = (HEADER_BYTES + CTRL_MSG_BYTES + MAX_MTU_BYTES) as usize;

/// Host interrupts: eventfds to signal (a user-space host's, or a guest's MSI-X vector).
#[derive(Default)]
pub struct Notifier {
    fds: Mutex<Vec<Arc<OwnedFd>>>,
    raised: AtomicU64,
}

impl Notifier {
    pub fn add(&self, fd: Arc<OwnedFd>) {
        self.fds.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
    }
    pub fn remove(&self, fd: &Arc<OwnedFd>) {
        self.fds.lock().unwrap_or_else(|e| e.into_inner()).retain(|f| !Arc::ptr_eq(f, fd));
    }
    pub fn raise(&self) {
        self.raised.fetch_add(1, Ordering::Relaxed);
        for fd in self.fds.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // A full eventfd counter (EAGAIN) still wakes its reader; nothing to do.
            let _ = rustix::io::write(fd.as_fd(), &1u64.to_ne_bytes());
        }
    }
    pub fn raised(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }
}

/// Things that wake a parked NIC: host doorbells and a control eventfd.
pub struct Wakers {
    pub doorbells: Mutex<Vec<Arc<OwnedFd>>>,
    pub control: OwnedFd,
    pub stop: AtomicBool,
}

impl Wakers {
    pub fn new() -> std::io::Result<Self> {
        Ok(Wakers { doorbells: Mutex::new(Vec::new()), control: new_eventfd()?, stop: AtomicBool::new(false) })
    }
    pub fn add_doorbell(&self, fd: Arc<OwnedFd>) {
        self.doorbells.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
        self.kick();
    }
    pub fn remove_doorbell(&self, fd: &Arc<OwnedFd>) {
        self.doorbells.lock().unwrap_or_else(|e| e.into_inner()).retain(|f| !Arc::ptr_eq(f, fd));
    }
    /// Wake the processor (to stop it, or after changing something it should see).
    pub fn kick(&self) {
        let _ = rustix::io::write(self.control.as_fd(), &1u64.to_ne_bytes());
    }
}

pub fn new_eventfd() -> std::io::Result<OwnedFd> {
    Ok(rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK)?)
}

fn drain_eventfd(fd: &OwnedFd) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd.as_fd(), &mut b);
}

/// Engine counters visible outside the processor thread.
#[derive(Default)]
pub struct EngineStats {
    pub host_dma_bytes: AtomicU64,
    pub link_tx_packets: AtomicU64,
    pub parks: AtomicU64,
    pub link: Mutex<LinkStats>,
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
    hdma: EngineStatus,
    tx: EngineStatus,
    /// The packet being sent: its pulses as (NIC offset, length), in order (one run
    /// when the pulses are contiguous, as the firmware's are), and its length so far.
    tx_pulses: Vec<(u32, u32)>,
    tx_len: usize,
    tx_over: bool,
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
}

/// A host-bus read into send staging, not copied yet: link out takes the bytes straight
/// from host memory when it sends them (one copy of every payload fewer), and anything
/// else that could look at the range copies them into staging first. Hardware moves
/// host → SRAM → wire with two engines and no processor time; here every move is a
/// memcpy. The firmware never reads payload bytes in staging, and a host must not
/// change a frame before its send completes (which comes after link out read it), so the
/// packet carries the bytes the read would have copied.
struct Deferred {
    nic_off: u32,
    len: u32,
    map: Arc<Mapping>,
    map_off: usize,
}

/// Deferred reads kept at most; the oldest is copied to make room.
const DEFERRED_MAX: usize = 8;

impl Deferred {
    /// Copy the host bytes it owes into NIC memory (both ranges were checked when the
    /// read was deferred).
    fn settle(&self, nic: &Mapping) {
        let _ = nic.copy_from(self.nic_off as usize, &self.map, self.map_off, self.len as usize);
    }

    /// Whether `off..off + len` (any values: a flashed image may pass anything) meets it.
    fn overlaps(&self, off: u32, len: u32) -> bool {
        let (off, end) = (off as u64, off as u64 + len as u64);
        off < self.nic_off as u64 + self.len as u64 && (self.nic_off as u64) < end
    }
}

/// Copy into staging every deferred read overlapping `off..off + len` (all with `None`).
fn settle_deferred(deferred: &mut Vec<Deferred>, nic: &Mapping, range: Option<(u32, u32)>) {
    let owed = |d: &Deferred| range.is_none_or(|(off, len)| d.overlaps(off, len));
    // Usually nothing is owed there (a look, not a pass of `retain`).
    if !deferred.iter().any(owed) {
        return;
    }
    deferred.retain(|d| {
        if !owed(d) {
            return true;
        }
        // Both ranges were checked when the read was deferred.
        let _ = nic.copy_from(d.nic_off as usize, &d.map, d.map_off, d.len as usize);
        false
    });
}

/// Fill `out` with send staging from `off`, serving bytes a deferred read still holds in
/// host memory from there. `false` if the range is outside NIC memory.
fn read_staging(deferred: &[Deferred], nic: &Mapping, off: usize, out: &mut [u8]) -> bool {
    let mut done = 0;
    while done < out.len() {
        let at = off + done;
        let rest = out.len() - done;
        let hit = deferred.iter().rev().find(|d| (d.nic_off as usize..(d.nic_off + d.len) as usize).contains(&at));
        let n = match hit {
            Some(d) => {
                let n = rest.min((d.nic_off + d.len) as usize - at);
                if !d.map.read(d.map_off + (at - d.nic_off as usize), &mut out[done..done + n]) {
                    return false;
                }
                n
            }
            None => {
                // Up to where the next deferred read begins.
                let next = deferred.iter().map(|d| d.nic_off as usize).filter(|&o| o > at).min();
                let n = next.map_or(rest, |o| rest.min(o - at));
                if !nic.read(at, &mut out[done..done + n]) {
                    return false;
                }
                n
            }
        };
        done += n;
    }
    true
}

/// Bytes of a received packet link in always writes to receive staging at once: the
/// Trapeze header and the largest control message (what the firmware itself reads).
const RX_PREFIX_BYTES: usize = (HEADER_BYTES + CTRL_MSG_BYTES) as usize;

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
            nic,
            dma,
            link,
            notifier,
            wakers,
            stats,
            spin,
            hdma: EngineStatus::default(),
            tx: EngineStatus::default(),
            tx_pulses: Vec::with_capacity(8),
            tx_len: 0,
            tx_over: false,
            rx_post: None,
            rx: RxStatus::default(),
            rx_held: None,
            tx_deferred: Vec::with_capacity(DEFERRED_MAX),
            dma_view: DmaView::default(),
            defer_reads: true,
            idle_since: None,
        }
    }

    /// Allow or forbid deferring host-bus reads into send staging (see [`Deferred`]); a
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

    fn publish_link_stats(&self) {
        *self.stats.link.lock().unwrap_or_else(|e| e.into_inner()) = self.link.stats();
    }

    /// Block until a doorbell, a link frame or a control kick (or `timeout`).
    pub fn park(&mut self, timeout: Duration) {
        self.park_events(timeout);
    }

    /// [`park`](Self::park), reporting what woke it (flashed mode turns this into the
    /// WAIT_EVENT register's event bits).
    pub fn park_events(&mut self, timeout: Duration) -> Wake {
        self.publish_link_stats();
        // Let go of mappings unregistered meanwhile (guest RAM of a departed guest).
        self.dma.renew(&mut self.dma_view);
        self.stats.parks.fetch_add(1, Ordering::Relaxed);
        let doorbells = self.wakers.doorbells.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(doorbells.len() + 2);
        fds.push(PollFd::new(&self.wakers.control, PollFlags::IN));
        for d in &doorbells {
            fds.push(PollFd::new(d.as_ref(), PollFlags::IN));
        }
        if !self.link.prepare_wait() {
            // Frames arrived while we were deciding to sleep.
            return Wake { link: true, ..Wake::default() };
        }
        let has_link_fd = if let Some(l) = self.link.readable_fd() {
            fds.push(PollFd::from_borrowed_fd(l, PollFlags::IN));
            true
        } else {
            false
        };
        let ts = rustix::event::Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
        let _ = poll(&mut fds, Some(&ts));
        let ready = |f: &PollFd<'_>| !f.revents().is_empty();
        let wake = Wake {
            control: ready(&fds[0]),
            doorbell: fds[1..1 + doorbells.len()].iter().any(ready),
            link: has_link_fd && fds.last().is_some_and(ready),
        };
        drop(fds);
        self.link.end_wait();
        drain_eventfd(&self.wakers.control);
        for d in &doorbells {
            drain_eventfd(d);
        }
        wake
    }

    /// One idle pass, as [`Engines::idle`] does it: spin (return `None` at once) until
    /// the spin budget since the first idle pass is used up, then park for up to 100 ms
    /// (or until the link's next timer) and report what woke it. Any engine start ends the idle stretch.
    /// When the link's timers next need running (a frame due off the wire-delay line, a
    /// held reordered frame, a stale reassembly), if ever: a caller that sleeps instead of
    /// polling wakes by then.
    pub fn link_deadline(&self) -> Option<Instant> {
        self.link.poll_deadline()
    }

    pub fn idle_wait(&mut self) -> Option<Wake> {
        // Frames due off the link's delay line leave before the processor idles.
        let _ = self.link.poll_timers();
        let now = Instant::now();
        let since = *self.idle_since.get_or_insert(now);
        if now.duration_since(since) < self.spin {
            // Yield rather than burn the core: hosts and other NICs often share it.
            std::thread::yield_now();
            return None;
        }
        // Sleep until a wakeup or the link's next timer (held frames, reassembly).
        let mut timeout = Duration::from_millis(100);
        if let Some(d) = self.link.poll_deadline() {
            timeout = timeout.min(d.saturating_duration_since(now));
        }
        let wake = self.park_events(timeout);
        self.idle_since = None;
        Some(wake)
    }
}

/// What ended a [`SoftEngines::park_events`] (all false: the timeout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// A host doorbell eventfd was signalled.
    pub doorbell: bool,
    /// The link has frames to read.
    pub link: bool,
    /// The control eventfd was kicked (stop, or a change the processor should see).
    pub control: bool,
}

/// Copy the rest of a held received packet (`rx_held`, see [`SoftEngines`]) from the
/// link's frame into receive staging, and forget it.
fn settle_held(rx_held: &mut Option<(u32, u32)>, link: &Link, nic: &Mapping) {
    if let Some((off, len)) = rx_held.take() {
        if let Some(bytes) = link.held_packet() {
            let from = RX_PREFIX_BYTES.min(bytes.len());
            let to = (len as usize).min(bytes.len());
            if from < to {
                let _ = nic.write(off as usize + from, &bytes[from..to]);
            }
        }
    }
}

/// A host-bus write of `len` bytes from NIC offset `nic_off` to `map` at `off`, served
/// from the held packet (`rx_held`) if it lies inside it. `None` when it does not.
fn write_from_held(
    rx_held: &mut Option<(u32, u32)>,
    link: &Link,
    nic_off: u32,
    map: &Mapping,
    off: usize,
    len: u32,
) -> Option<bool> {
    let (p_off, p_len) = (*rx_held)?;
    let start = nic_off.checked_sub(p_off)? as usize;
    let end = start.checked_add(len as usize)?;
    if end > p_len as usize {
        return None;
    }
    let bytes = link.held_packet()?;
    let ok = map.write(off, bytes.get(start..end)?);
    if end == p_len as usize {
        // The packet's last bytes went to the host: the firmware is done with them.
        *rx_held = None;
    }
    Some(ok)
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
            self.stats.host_dma_bytes.fetch_add(len as u64, Ordering::Relaxed);
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
            // Packet offset `at` → the pulse holding it; `read` asks for bytes in order.
            let (mut i, mut base) = (0usize, 0usize);
            let mut read = |at: usize, buf: &mut [u8]| {
                if let [(off, l)] = pulses[..] {
                    // One pulse (a control message, a packet staged whole): the bytes are
                    // at `off + at`, no cursor to keep (the loop below would find the same).
                    if at + buf.len() <= l as usize {
                        return read_staging(deferred, nic, off as usize + at, buf);
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
                    if !read_staging(deferred, nic, off as usize + skip, &mut buf[done..done + n]) {
                        return false;
                    }
                    done += n;
                }
                true
            };
            // Send errors are counted by the link; the firmware sees the packet sent.
            let _ = self.link.send_packet_from(self.tx_len, abort, &mut read);
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
        if let Some((off, cap)) = self.rx_post {
            // Receiving gives the link's held frame back: settle the held packet first.
            self.settle_held();
            let nic = &self.nic;
            let got = self.link.poll_packet_held_with(|bytes, _src, crc_ok, held| {
                let n = bytes.len().min(cap as usize);
                let fits = bytes.len() <= cap as usize;
                // The firmware reads the header and control message from staging; a held
                // packet's payload can wait in the link's frame for the host-bus write
                // (one copy fewer), everything else is written now.
                let now = if held && fits { n.min(RX_PREFIX_BYTES) } else { n };
                let wrote = nic.write(off as usize, &bytes[..now]) && off as usize + n <= nic.len();
                (n, crc_ok && wrote && fits, now < n)
            });
            if let Some((n, ok, held)) = got {
                self.idle_since = None;
                self.rx = RxStatus { posted: false, bytes: n as u32, complete: true, crc_ok: ok };
                self.rx_post = None;
                self.rx_held = held.then_some((off, n as u32));
            }
        }
        self.rx
    }

    fn link_rx_pending(&mut self) -> bool {
        // Frames on the link's delay line (or a reordered one) go out when due even while
        // the firmware posts no receive buffer (link_rx_status runs their timers too).
        // (poll_timers returns at once when the link has none.)
        let _ = self.link.poll_timers();
        self.link.rx_pending()
    }

    fn raise_host_irq(&mut self) {
        self.notifier.raise();
    }

    /// Soft transfers finish when started, so no engine is ever mid-transfer here: an idle
    /// pass always means "wait for the host or the link".
    fn idle(&mut self, _engines_busy: bool) {
        self.idle_wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::backend::InProcSwitch;
    use crate::link::FaultConfig;

    fn engines(link: Link) -> (SoftEngines, Arc<Mapping>) {
        let nic = Arc::new(Mapping::create_memfd("eng-test", 64 * 1024).unwrap());
        let eng = SoftEngines::new(
            nic.clone(),
            Arc::new(DmaSpace::new()),
            link,
            Arc::new(Notifier::default()),
            Arc::new(Wakers::new().unwrap()),
            Arc::new(EngineStats::default()),
            Duration::ZERO,
        );
        (eng, nic)
    }

    /// A packet (32-byte header with dst node 2, then `len - 32` bytes) for the link.
    fn packet(len: usize, seed: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
        p[6..8].copy_from_slice(&2u16.to_le_bytes());
        p
    }

    #[test]
    fn link_out_sends_the_pulses_from_staging_in_order_even_when_apart() {
        let sw = InProcSwitch::new();
        let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE));
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let p = packet(3000, 3);
        // Three pulses: two contiguous, then one elsewhere in NIC memory.
        assert!(nic.write(1000, &p[..1200]));
        assert!(nic.write(9000, &p[1200..]));
        a.link_tx_start(1000, 700, tx_flags::FIRST);
        a.link_tx_start(1700, 500, 0);
        a.link_tx_start(9000, 1800, tx_flags::LAST);
        let mut out = vec![0u8; 4096];
        let rx = b.poll_packet(&mut out).expect("packet");
        assert_eq!((rx.len, rx.src, rx.crc_ok), (3000, 1, true));
        assert_eq!(&out[..3000], &p[..]);
        // A pulse outside NIC memory aborts the packet: the receiver sees a bad CRC.
        a.link_tx_start(1000, 1200, tx_flags::FIRST);
        a.link_tx_start(64 * 1024 - 10, 100, tx_flags::LAST);
        let rx = b.poll_packet(&mut out).expect("aborted packet");
        assert!(!rx.crc_ok);
    }

    #[test]
    fn delayed_frames_leave_when_due_with_no_receive_buffer_posted() {
        let sw = InProcSwitch::new();
        let wire = FaultConfig { delay_ns: 200_000, ..FaultConfig::NONE };
        let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), wire));
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let p = packet(2000, 5);
        assert!(nic.write(0, &p));
        let t0 = Instant::now();
        a.link_tx_start(0, 2000, tx_flags::FIRST | tx_flags::LAST);
        let mut out = vec![0u8; 4096];
        assert!(b.poll_packet(&mut out).is_none(), "the wire delay was skipped");
        // Only the checks the firmware makes while it posts no receive buffer (its
        // receive queue full): the delay line still drains.
        assert!(a.link_rx_pending(), "a frame on the delay line is pending work");
        let rx = loop {
            a.link_rx_pending();
            if let Some(rx) = b.poll_packet(&mut out) {
                break rx;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "the delayed frame never left");
        };
        assert!(t0.elapsed() >= Duration::from_micros(200));
        assert_eq!((rx.len, rx.crc_ok), (2000, true));
        assert_eq!(&out[..2000], &p[..]);
        assert!(!a.link_rx_pending());
    }

    #[test]
    fn link_in_reports_pending_input_only_while_a_packet_waits() {
        let sw = InProcSwitch::new();
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        let (mut b, _nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
        b.link_rx_post(2048, 1024);
        assert!(!b.link_rx_pending(), "nothing sent yet");
        assert!(!b.link_rx_status().complete);
        a.send_packet(&packet(300, 1), false).unwrap();
        assert!(b.link_rx_pending(), "a frame is queued");
        let st = b.link_rx_status();
        assert_eq!((st.complete, st.crc_ok, st.bytes), (true, true, 300));
        assert!(!b.link_rx_pending(), "the only packet was taken");
        // A packet in fragments on a small-frame link: pending until every part is in.
        a.send_packet(&packet(70_000, 2), false).unwrap();
        assert!(b.link_rx_pending());
    }

    #[test]
    fn link_in_writes_the_packet_into_the_posted_buffer() {
        let sw = InProcSwitch::new();
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        let (mut b, nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
        let p = packet(500, 9);
        a.send_packet(&p, false).unwrap();
        a.send_packet(&p, false).unwrap();
        b.link_rx_post(2048, 1024);
        let st = b.link_rx_status();
        assert_eq!((st.complete, st.crc_ok, st.bytes), (true, true, 500));
        // Header and control message are in staging at once; the rest by the time the
        // link receives again.
        let mut got = vec![0u8; 500];
        assert!(nic.read(2048, &mut got[..RX_PREFIX_BYTES]));
        assert_eq!(got[..RX_PREFIX_BYTES], p[..RX_PREFIX_BYTES]);
        // A packet larger than the posted buffer is cut and marked bad.
        b.link_rx_post(4096, 100);
        let st = b.link_rx_status();
        assert_eq!((st.complete, st.crc_ok, st.bytes), (true, false, 100));
        assert!(nic.read(2048, &mut got));
        assert_eq!(got, p);
    }

    /// Host-bus reads into send staging are deferred until link out sends the bytes;
    /// whatever else looks at those bytes, and however many reads wait, the packet and
    /// NIC memory show exactly what the reads would have copied.
    #[test]
    fn deferred_host_reads_send_and_settle_the_bytes_they_read() {
        let sw = InProcSwitch::new();
        let (mut a, nic) = engines(Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE));
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let host = Arc::new(Mapping::create_memfd("eng-host", 64 * 1024).unwrap());
        a.dma.register("host", 0x10_0000, host.clone(), 0, 64 * 1024).unwrap();
        let p = packet(9000, 11);
        assert!(host.write(0, &p));
        let mut out = vec![0u8; 16 * 1024];
        // Header from the firmware, payload read from the host in two transfers.
        assert!(nic.write(4096, &p[..32]));
        a.host_dma_start(HostDir::ToNic, 0x10_0000 + 32, 4096 + 32, 4000);
        a.host_dma_start(HostDir::ToNic, 0x10_0000 + 4032, 4096 + 4032, 4968);
        assert!(!a.host_dma_status().error);
        a.link_tx_start(4096, 9000, tx_flags::FIRST | tx_flags::LAST);
        let rx = b.poll_packet(&mut out).expect("packet");
        assert_eq!((rx.len, rx.crc_ok), (9000, true));
        assert_eq!(&out[..9000], &p[..]);
        // A second read over part of an unsent one: the packet carries the newer bytes.
        let q = packet(3000, 77);
        assert!(host.write(20_000, &q));
        a.host_dma_start(HostDir::ToNic, 0x10_0000, 8192, 3000);
        a.host_dma_start(HostDir::ToNic, 0x10_0000 + 20_000 + 1000, 8192 + 1000, 1000);
        let mut want = p[..3000].to_vec();
        want[1000..2000].copy_from_slice(&q[1000..2000]);
        // A host-bus write out of a range a read is still deferred in sees the read bytes.
        a.host_dma_start(HostDir::ToHost, 0x10_0000 + 60_000, 8192 + 1500, 100);
        let mut back = vec![0u8; 100];
        assert!(host.read(60_000, &mut back));
        assert_eq!(back, want[1500..1600]);
        a.link_tx_start(8192, 3000, tx_flags::FIRST | tx_flags::LAST);
        let rx = b.poll_packet(&mut out).expect("packet");
        assert_eq!((rx.len, rx.crc_ok), (3000, true));
        assert_eq!(&out[..3000], &want[..]);
        // More reads than are kept: the oldest settle into staging at once, the rest when
        // the processor resets; either way staging ends up with the bytes read.
        let n = DEFERRED_MAX as u32 + 4;
        for k in 0..n {
            a.host_dma_start(HostDir::ToNic, 0x10_0000 + k as u64 * 100, 30_000 + k * 1000, 500);
        }
        let staged = |k: u32| {
            let mut v = vec![0u8; 500];
            assert!(nic.read(30_000 + k as usize * 1000, &mut v));
            v
        };
        for k in 0..4 {
            assert_eq!(staged(k), p[k as usize * 100..k as usize * 100 + 500], "read {k} settled when pushed out");
        }
        assert_eq!(a.tx_deferred.len(), DEFERRED_MAX);
        a.reset();
        for k in 0..n {
            assert_eq!(staged(k), p[k as usize * 100..k as usize * 100 + 500], "read {k} settled by the reset");
        }
        assert!(a.tx_deferred.is_empty(), "nothing deferred after a reset");
    }

    #[test]
    fn host_bus_writes_of_a_held_packet_deliver_the_same_bytes() {
        let sw = InProcSwitch::new();
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        let (mut b, nic) = engines(Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE));
        let host = Arc::new(Mapping::create_memfd("eng-host", 64 * 1024).unwrap());
        b.dma.register("host", 0x10_0000, host.clone(), 0, 64 * 1024).unwrap();
        let p = packet(9000, 5);
        let read_host = |off: usize, len: usize| {
            let mut v = vec![0u8; len];
            assert!(host.read(off, &mut v));
            v
        };
        // The payload from the held frame, in two pulses (the second ends the packet).
        a.send_packet(&p, false).unwrap();
        b.link_rx_post(0, 16 * 1024);
        assert!(b.link_rx_status().complete);
        b.host_dma_start(HostDir::ToHost, 0x10_0000, 200, 3000);
        b.host_dma_start(HostDir::ToHost, 0x10_0000 + 3000, 3200, 5800);
        assert!(!b.host_dma_status().error);
        assert_eq!(read_host(0, 8800), p[200..]);
        // A packet the firmware writes out only after the link received again: the bytes
        // were settled into staging meanwhile and come from there.
        let q = packet(6000, 9);
        a.send_packet(&q, false).unwrap();
        b.link_rx_post(16 * 1024, 16 * 1024);
        assert!(b.link_rx_status().complete);
        a.send_packet(&p, false).unwrap();
        b.link_rx_post(32 * 1024, 16 * 1024);
        assert!(b.link_rx_status().complete);
        b.host_dma_start(HostDir::ToHost, 0x10_0000 + 20_000, 16 * 1024 + 160, 5840);
        assert_eq!(read_host(20_000, 5840), q[160..]);
        let mut staged = vec![0u8; 6000];
        assert!(nic.read(16 * 1024, &mut staged));
        assert_eq!(staged, q);
        // A transfer reaching past the held packet's end comes from staging, after the
        // packet was settled there.
        b.host_dma_start(HostDir::ToHost, 0x10_0000 + 40_000, 32 * 1024 + 8500, 1000);
        assert_eq!(read_host(40_000, 500), p[8500..9000]);
        let mut staged = vec![0u8; 9000];
        assert!(nic.read(32 * 1024, &mut staged));
        assert_eq!(staged, p);
    }
}
