// SPDX-License-Identifier: GPL-2.0-only
//! Staging bytes not copied yet: deferred host-bus reads, and the held received packet.

use crate::link::Link;
use crate::shm::Mapping;
use std::sync::Arc;
use trapeze_firmware::iface::answer::Found;
use trapeze_firmware::iface::layout::CTRL_MSG_BYTES;
use trapeze_firmware::iface::wire::HEADER_BYTES;

/// A host-bus read into send staging, not copied yet: link out takes the bytes straight
/// from host memory when it sends them (one copy of every payload fewer), and anything
/// else that could look at the range copies them into staging first. Hardware moves
/// host → SRAM → wire with two engines and no processor time; here every move is a
/// memcpy. The firmware never reads payload bytes in staging, and a host must not
/// change a frame before its send completes (which comes after link out read it), so the
/// packet carries the bytes the read would have copied. An answer (one-sided read) has no
/// send the host waits for: the firmware names the entry it checked
/// (`Engines::vouch_answer`, [`Vouched`]), and link out checks it again once it has read
/// the payload from the host's frame, sending the packet aborted if it changed — so what
/// leaves is what the check vouched for, with no copy into staging first.
pub(super) struct Deferred {
    pub(super) nic_off: u32,
    pub(super) len: u32,
    pub(super) map: Arc<Mapping>,
    pub(super) map_off: usize,
}

/// An answer's payload the firmware vouched for while its bytes were still in host memory:
/// link out checks `entry` again once it has read the last byte of `off..off + len`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Vouched {
    pub(super) off: u32,
    pub(super) len: u32,
    pub(super) entry: Found,
}

impl Vouched {
    /// Whether reading `len` bytes at `off` (the packet's bytes are read in order)
    /// completes the vouched range.
    pub(super) fn completed_by(&self, off: usize, len: usize) -> bool {
        let end = self.off as usize + self.len as usize;
        off < end && off + len >= end
    }
}

/// Deferred reads kept at most; the oldest is copied to make room.
pub(super) const DEFERRED_MAX: usize = 8;

impl Deferred {
    /// Copy the host bytes it owes into NIC memory (both ranges were checked when the
    /// read was deferred).
    pub(super) fn settle(&self, nic: &Mapping) {
        let _ = nic.copy_from(self.nic_off as usize, &self.map, self.map_off, self.len as usize);
    }

    /// Whether `off..off + len` (any values: a flashed image may pass anything) meets it.
    pub(super) fn overlaps(&self, off: u32, len: u32) -> bool {
        let (off, end) = (off as u64, off as u64 + len as u64);
        off < self.nic_off as u64 + self.len as u64 && (self.nic_off as u64) < end
    }
}

/// Copy into staging every deferred read overlapping `off..off + len` (all with `None`).
pub(super) fn settle_deferred(deferred: &mut Vec<Deferred>, nic: &Mapping, range: Option<(u32, u32)>) {
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
pub(super) fn read_staging(deferred: &[Deferred], nic: &Mapping, off: usize, out: &mut [u8]) -> bool {
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
pub(super) const RX_PREFIX_BYTES: usize = (HEADER_BYTES + CTRL_MSG_BYTES) as usize;

/// Copy the rest of a held received packet (`rx_held`, see [`SoftEngines`]) from the
/// link's frame into receive staging, and forget it.
pub(super) fn settle_held(rx_held: &mut Option<(u32, u32)>, link: &Link, nic: &Mapping) {
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
pub(super) fn write_from_held(
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
