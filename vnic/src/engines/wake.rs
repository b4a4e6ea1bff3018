// SPDX-License-Identifier: GPL-2.0-only
//! Waking and parking the NIC's processor: host interrupts, doorbells, the control eventfd, the idle wait.

use super::SoftEngines;
use crate::trace::{Kind, Record};
use rustix::event::{poll, PollFd, PollFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::ipt;

/// The longest park while the firmware holds work it cannot move yet (a packet waiting for
/// its host to free a receive slot: the host frees slots without ringing a doorbell).
pub const BUSY_PARK: Duration = Duration::from_micros(100);

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

impl SoftEngines {
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
        // A park is traced only when something woke it: an idle NIC parks every 100 ms,
        // and recording those timeouts made an idle trace grow without bound. The park's
        // start is taken now and written with its end.
        let parked_at = self.trace.as_mut().map(|log| {
            log.flush();
            log.now_ns()
        });
        let _ = poll(&mut fds, Some(&ts));
        let ready = |f: &PollFd<'_>| !f.revents().is_empty();
        let wake = Wake {
            control: ready(&fds[0]),
            doorbell: fds[1..1 + doorbells.len()].iter().any(ready),
            link: has_link_fd && fds.last().is_some_and(ready),
        };
        if let (Some(log), Some(t)) = (self.trace.as_mut(), parked_at) {
            if wake != Wake::default() {
                log.push(&Record { t_ns: t, kind: Kind::Park, solicited: false, peer: 0, seq: 0, payload: 0 });
                log.record(Kind::Unpark, 0, 0, 0, false);
            }
        }
        drop(fds);
        self.link.end_wait();
        drain_eventfd(&self.wakers.control);
        for d in &doorbells {
            drain_eventfd(d);
        }
        wake
    }

    /// When the link's timers next need running (a frame due off the wire-delay line, a
    /// held reordered frame, a stale reassembly), if ever: a caller that sleeps instead of
    /// polling wakes by then.
    pub fn link_deadline(&self) -> Option<Instant> {
        self.link.poll_deadline()
    }

    /// A caller that drives the firmware itself is about to sleep on the link's descriptor:
    /// whether it may (`false`: a packet already waits in the link, so poll again). After
    /// the sleep, [`Self::end_wait`].
    pub fn prepare_wait(&self) -> bool {
        self.link.prepare_wait()
    }

    /// The sleep [`Self::prepare_wait`] allowed is over.
    pub fn end_wait(&self) {
        self.link.end_wait()
    }

    /// One idle pass, as [`Engines::idle`](trapeze_firmware::hal::Engines::idle) does it:
    /// spin (return `None` at once) until the spin budget since the first idle pass is used
    /// up — or the reply spin, while the host awaits a reply (an IPT entry armed): its
    /// reply then finds the processor awake instead of paying a wakeup — then park for up
    /// to 100 ms (or until the link's next timer) and report what woke it. Any engine start
    /// ends the idle stretch. `busy`: the firmware still holds work it cannot move now (a
    /// packet waiting for its host to free a receive slot, which rings no doorbell): park
    /// for `BUSY_PARK` (100 µs) at most.
    pub fn idle_wait(&mut self, busy: bool) -> Option<Wake> {
        // Frames due off the link's delay line, and echo requests just asked for, leave
        // before the processor idles.
        let _ = self.link.poll_timers();
        self.send_queued_probes();
        let now = Instant::now();
        let since = *self.idle_since.get_or_insert(now);
        let idle = now.duration_since(since);
        if idle < self.spin || (idle < self.reply_spin && ipt::any_armed(&self.words)) {
            // Yield rather than burn the core: hosts and other NICs often share it.
            std::thread::yield_now();
            return None;
        }
        // Sleep until a wakeup or the link's next timer (held frames, reassembly).
        let mut timeout = if busy { BUSY_PARK } else { Duration::from_millis(100) };
        if let Some(d) = self.link.poll_deadline() {
            timeout = timeout.min(d.saturating_duration_since(now));
        }
        let wake = self.park_events(timeout);
        self.idle_since = None;
        Some(wake)
    }
}
