// SPDX-License-Identifier: GPL-2.0-only
//! Receiving on the link: frames reassembled into packets, MAC tags, stamps and trailers checked, packets copied or lent.

use super::mac::{LinkMac, TagCheck, SEAL_BYTES};
use super::replay::{Freshness, Stamp, Windows, STAMP_BYTES};
use super::{frame, Link, LinkStats, RxPacket, TRAILER_BYTES};
use std::io;
use std::time::Instant;

/// Frames taken from the backend per `poll_packet` call at most, so a flood of bad
/// frames cannot keep the caller inside the link.
const RX_FRAMES_PER_POLL: usize = 1024;

impl Link {
    /// Take frames that have arrived (without blocking) and return the next complete
    /// packet, copied into `out` without its tag and trailer, or `None` if no packet is
    /// complete. Under a key, a packet whose tag does not check is dropped (counted in
    /// `mac_rejected`, or `trailer_forged`) and never returned, and so is one whose
    /// stamp is not fresh (`replayed`, `replay_stale_epoch`, `replay_table_full`).
    /// If `out` is shorter than the packet, the first `out.len()` bytes are delivered
    /// with `len == out.len()` and `crc_ok == false` (counted in `rx_truncated`).
    /// Packets come out in the order they completed.
    ///
    /// Over a medium whose looks are system calls
    /// ([`LinkBackend::looks_are_system_calls`](super::LinkBackend::looks_are_system_calls):
    /// UDP), for a caller that asks [`Link::rx_pending`] before it receives (an inline
    /// NIC, whose passes run only when something may have come), the receive right after
    /// one that delivered a packet does not look at the medium: it returns packets already
    /// put together and runs the timers, but leaves a frame that may have come since for
    /// the next receive or `rx_pending`. A NIC answering a request then sends the reply
    /// with no `recvfrom` before it that finds nothing (one system call fewer per request
    /// on its path); nothing waits longer than one more receive, and the descriptor stays
    /// readable meanwhile ([`Link::readable_fd`] polls level-triggered). A caller that
    /// never asks `rx_pending` (a NIC on its own thread, which idles when a pass finds
    /// nothing) looks in every receive.
    pub fn poll_packet(&mut self, out: &mut [u8]) -> Option<RxPacket> {
        let (rx, truncated) = self.poll_packet_with(|body, src, crc_ok| {
            if out.len() >= body.len() {
                out[..body.len()].copy_from_slice(body);
                (RxPacket { len: body.len(), src, crc_ok }, false)
            } else {
                let n = out.len();
                out.copy_from_slice(&body[..n]);
                (RxPacket { len: n, src, crc_ok: false }, true)
            }
        })?;
        if truncated {
            self.stats.rx_truncated += 1;
        }
        Some(rx)
    }

    /// [`poll_packet`](Self::poll_packet), lending the next complete packet (without its
    /// trailer) to `take` with its source node and whether its CRC checked, and returning
    /// what `take` returns. A packet that is one frame is lent straight from the
    /// backend's buffer when the backend lends frames (no copy in the link).
    pub fn poll_packet_with<R>(&mut self, take: impl FnOnce(&[u8], u16, bool) -> R) -> Option<R> {
        self.poll_packet_held_with(|body, src, crc_ok, _held| take(body, src, crc_ok))
    }

    /// [`poll_packet_with`](Self::poll_packet_with), telling `take` also whether the
    /// packet's bytes stay readable, unchanged, through [`held_packet`](Self::held_packet)
    /// until the next call that receives (this one, [`poll_packet`](Self::poll_packet)):
    /// then a receiver may leave them where they are instead of copying them out now.
    pub fn poll_packet_held_with<R>(&mut self, take: impl FnOnce(&[u8], u16, bool, bool) -> R) -> Option<R> {
        self.held = None;
        // One-shot: only the receive right after a delivery skips its look.
        let skip_look = std::mem::replace(&mut self.skip_look, false);
        if self.has_timers() {
            // A send error here is counted; the receive path has nothing to add to it.
            let _ = self.poll_timers();
        }
        let mut take = Some(take);
        let mut out = None;
        let mut now = None;
        let mut budget = if skip_look { 0 } else { RX_FRAMES_PER_POLL };
        let (keeps, memory, node) = (self.keeps_last_frame, self.memory_medium, self.node);
        let verdict_medium = self.verdict_medium;
        let mut held = None;
        while !self.rx.has_ready() && out.is_none() && budget > 0 {
            budget -= 1;
            let (rx, stats, mac, windows) = (&mut self.rx, &mut self.stats, self.mac.as_ref(), &mut *self.windows);
            let r = self.backend.recv_frame_with(&mut self.rx_frame, &mut |frame| {
                stats.frames_received += 1;
                // A whole-frame packet needs no time: its key is stamped at the next
                // clock read, at the latest every STAMP_FRAMES frames (so its
                // duplicate window can only grow; see `reassembly`).
                let t = (stats.frames_received % STAMP_FRAMES == 0).then(|| *now.get_or_insert_with(Instant::now));
                match rx.take_whole(frame, t, memory) {
                    Some((src, bytes, flags)) => {
                        let verdict = (flags & frame::FLAG_VERDICT != 0).then_some(verdict_medium);
                        let seal = mac.map(|m| (m, &mut *windows));
                        let Some((body, crc_ok)) = check_packet(bytes, src, node, flags, verdict, seal, stats) else {
                            return;
                        };
                        if keeps {
                            // Where the body lies in the frame the backend keeps.
                            held = Some((body.as_ptr() as usize - frame.as_ptr() as usize, body.len()));
                        }
                        out = take.take().map(|f| f(body, src, crc_ok, keeps));
                    }
                    None => {
                        let t = *now.get_or_insert_with(Instant::now);
                        rx.handle_frame(frame, t, stats)
                    }
                }
            });
            match r {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.stats.recv_errors += 1;
                    break;
                }
            }
        }
        if out.is_some() {
            self.held = held;
            self.skip_look = self.looks_are_system_calls && self.caller_looks;
            return out;
        }
        let take = take.take()?;
        loop {
            let ready = self.rx.pop()?;
            let seal = self.mac.as_ref().map(|m| (m, &mut *self.windows));
            let checked = check_packet(&ready.bytes, ready.src, self.node, ready.flags, None, seal, &mut self.stats);
            if let Some((body, crc_ok)) = checked {
                let r = take(body, ready.src, crc_ok, false);
                self.rx.recycle(ready.bytes);
                self.skip_look = self.looks_are_system_calls && self.caller_looks;
                return Some(r);
            }
            self.rx.recycle(ready.bytes);
        }
    }
}

/// Received frames between clock reads while whole-frame packets arrive (each read
/// stamps and expires the duplicate keys remembered since the last).
const STAMP_FRAMES: u64 = 64;

/// Check a whole packet (bytes, stamp and tag under a key, trailer) from `src` to `node`
/// with frame flags `flags` and count it: `None` if it is refused (see [`super::mac`] and
/// [`super::replay`]; counted by why), else the packet's bytes and whether its trailer
/// checked. `verdict`: `None` for a CRC trailer (over the bytes, stamp and tag); for a
/// [`frame::FLAG_VERDICT`] packet, whether it came over a medium where verdicts are
/// believed (memory, or one that checks its frames; see the module doc of `link`).
/// `seal`: the MAC and the receive windows, under a key.
#[inline(always)]
fn check_packet<'p>(
    bytes: &'p [u8],
    src: u16,
    node: u16,
    flags: u8,
    verdict: Option<bool>,
    seal: Option<(&LinkMac, &mut Windows)>,
    stats: &mut LinkStats,
) -> Option<(&'p [u8], bool)> {
    let len = bytes.len() - TRAILER_BYTES;
    let (body, trailer) = bytes.split_at(len);
    let tagged = flags & frame::FLAG_MAC != 0;
    // What the trailer says: good, or aborted (or damaged, which a tag cannot tell apart).
    let good = match verdict {
        None => crc32fast::hash(body).to_le_bytes() == trailer,
        Some(_) => trailer == frame::VERDICT_GOOD,
    };
    // The tag first (with the trailer's verdict): nothing of a packet that fails it is
    // looked at further; then the stamp.
    let packet = match seal {
        Some((m, windows)) => {
            let Some(n) = body.len().checked_sub(SEAL_BYTES).filter(|_| tagged) else {
                return mac_rejected(src, stats);
            };
            let (sealed, tag) = body.split_at(n + STAMP_BYTES);
            match m.check(src, node, sealed, !good, tag) {
                TagCheck::Good => {}
                TagCheck::OtherVerdict => {
                    stats.trailer_forged += 1;
                    return None;
                }
                TagCheck::Bad => return mac_rejected(src, stats),
            }
            let mut stamp = [0u8; STAMP_BYTES];
            stamp.copy_from_slice(&sealed[n..]);
            let refused = match windows.handle(src, Stamp::parse(&stamp)) {
                Freshness::Fresh => None,
                Freshness::Replayed => Some(&mut stats.replayed),
                Freshness::StaleEpoch => Some(&mut stats.replay_stale_epoch),
                Freshness::TableFull => Some(&mut stats.replay_table_full),
            };
            if let Some(count) = refused {
                *count += 1;
                stats.replay_rejected_by.record(src);
                return None;
            }
            &body[..n]
        }
        None if tagged => return mac_rejected(src, stats),
        None => body,
    };
    let crc_ok = good && verdict != Some(false);
    stats.packets_received += 1;
    if !crc_ok {
        stats.crc_errors += 1;
    }
    Some((packet, crc_ok))
}

/// Count a packet whose MAC did not check (or that has a tag no key can check).
#[cold]
fn mac_rejected<T>(src: u16, stats: &mut LinkStats) -> Option<T> {
    stats.mac_rejected += 1;
    stats.mac_rejected_by.record(src);
    None
}
