// SPDX-License-Identifier: GPL-2.0-only
//! The virtual NIC's DMA engines, in software: the firmware's [`Engines`] for native mode,
//! and the machinery behind the MMIO registers in flashed mode.
//!
//! Transfers complete when they are started (a `memcpy` is faster than any poll), so a
//! packet's cut-through pulses reach the link as fast as the firmware issues them. The
//! link-out engine gathers a packet's pulses and hands the whole packet to the [`Link`]
//! at its last pulse (a datagram link cannot stream a packet); link in delivers one whole
//! packet per posted buffer. Host memory is reached only through the [`DmaSpace`]: a
//! transfer outside every registered region is refused and counted.
//!
//! When the firmware finds nothing to do, [`SoftEngines::idle`] spins for a short budget
//! (a wakeup across cores costs tens of µs on these machines) and then parks in `poll(2)`
//! on the host doorbell, the link and the control eventfd.

use crate::dma::DmaSpace;
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
use trapeze_firmware::iface::wire::{HEADER_BYTES, TRAILER_BYTES};

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
    tx_buf: Vec<u8>,
    tx_over: bool,
    rx_post: Option<(u32, u32)>,
    rx: RxStatus,
    rx_buf: Vec<u8>,
    idle_since: Option<Instant>,
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
            nic,
            dma,
            link,
            notifier,
            wakers,
            stats,
            spin,
            hdma: EngineStatus::default(),
            tx: EngineStatus::default(),
            tx_buf: Vec::with_capacity(MAX_PACKET_BYTES),
            tx_over: false,
            rx_post: None,
            rx: RxStatus::default(),
            rx_buf: vec![0; MAX_PACKET_BYTES + TRAILER_BYTES as usize],
            idle_since: None,
        }
    }

    /// Forget any packet in progress (processor reset). The link is kept.
    pub fn reset(&mut self) {
        self.hdma = EngineStatus::default();
        self.tx = EngineStatus::default();
        self.tx_buf.clear();
        self.rx_post = None;
        self.rx = RxStatus::default();
        self.idle_since = None;
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
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as i64,
        };
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
    pub fn idle_wait(&mut self) -> Option<Wake> {
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

impl Engines for SoftEngines {
    fn host_dma_start(&mut self, dir: HostDir, host_addr: u64, nic_off: u32, len: u32) {
        self.idle_since = None;
        let ok = match self.dma.translate(host_addr, len as u64) {
            None => false,
            Some((map, off)) => match dir {
                HostDir::ToNic => self.nic.copy_from(nic_off as usize, &map, off, len as usize),
                HostDir::ToHost => map.copy_from(off, &self.nic, nic_off as usize, len as usize),
            },
        };
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
            self.tx_buf.clear();
            self.tx_over = false;
        }
        let at = self.tx_buf.len();
        if at + len as usize <= MAX_PACKET_BYTES {
            self.tx_buf.resize(at + len as usize, 0);
            if !self.nic.read(nic_off as usize, &mut self.tx_buf[at..]) {
                self.tx_over = true;
            }
        } else {
            self.tx_over = true;
        }
        if flags & tx_flags::LAST != 0 {
            let abort = flags & tx_flags::ABORT != 0 || self.tx_over;
            // Send errors are counted by the link; the firmware sees the packet sent.
            let _ = self.link.send_packet(&self.tx_buf, abort);
            self.stats.link_tx_packets.fetch_add(1, Ordering::Relaxed);
            self.tx_buf.clear();
        }
        self.tx = EngineStatus { busy: false, done: len, error: false };
    }

    fn link_tx_status(&mut self) -> EngineStatus {
        self.tx
    }

    fn link_rx_post(&mut self, nic_off: u32, cap: u32) {
        self.rx_post = Some((nic_off, cap));
        self.rx = RxStatus { posted: true, bytes: 0, complete: false, crc_ok: false };
    }

    fn link_rx_status(&mut self) -> RxStatus {
        // Held (reordered) frames and stale reassemblies have deadlines; errors are counted.
        let _ = self.link.poll_timers();
        if let Some((off, cap)) = self.rx_post {
            if let Some(p) = self.link.poll_packet(&mut self.rx_buf) {
                self.idle_since = None;
                let n = p.len.min(cap as usize);
                let wrote = self.nic.write(off as usize, &self.rx_buf[..n]);
                self.rx = RxStatus {
                    posted: false,
                    bytes: n as u32,
                    complete: true,
                    crc_ok: p.crc_ok && wrote && p.len <= cap as usize,
                };
                self.rx_post = None;
            }
        }
        self.rx
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
