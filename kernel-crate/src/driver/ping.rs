// SPDX-License-Identifier: GPL-2.0-only
//! The load-time ping test (`ping_peer=`): the pinger sends node P a control message and
//! a payload of `ping_bytes` and waits (bounded, with retries) for the pong; every node
//! answers a ping with a pong carrying the same payload back, and the pinger checks it
//! byte for byte against what it sent ([`proto`] describes the message).

#![forbid(unsafe_code)]

use super::{Core, Shared, PING_TRIES, PING_WAIT_MS, POLL_MS};
use crate::net::Frame;
use crate::proto::{self, Kind, Msg};
use crate::stats::STATS;
use crate::sys::{self, dma::DmaBuf, param};
use crate::tpz::endpoint::RecvMsg;
use core::sync::atomic::Ordering;
use kernel::{prelude::*, time::Ktime};

impl Shared {
    /// Answer a ping: copy its payload into a transmit frame and post a pong with the
    /// same control fields back to the sender. Whether a pong was posted.
    pub(super) fn answer_ping(&self, core: &mut Core, m: &RecvMsg, msg: &Msg, frame: Frame, payload_ok: bool) -> bool {
        if !payload_ok || msg.len != m.payload_len {
            pr_warn!("ping {} from node {}: payload unusable (flags {:#x}); not answered\n", msg.seq, m.src, m.flags);
            return false;
        }
        let len = m.payload_len as usize;
        let Some(t) = core.take_tx_frame() else {
            STATS.tx_no_frame.inc();
            return false;
        };
        let h = &mut core.node.host;
        let copied = h.ep.frame(frame).is_some_and(|f| h.tx[t].copy_from(0, f, 0, len).is_ok());
        if !copied {
            h.tx_busy &= !(1 << t);
            return false;
        }
        let pong = Msg { kind: Kind::Pong, ..*msg };
        if core.send(m.src, &pong.emit(), len, t).is_err() {
            return false;
        }
        STATS.pings_answered.inc();
        pr_info!("ping {} from node {}: {} bytes; answered with a pong\n", msg.seq, m.src, len);
        true
    }

    /// Check a pong against the ping it answers and wake the pinger.
    pub(super) fn check_pong(&self, core: &Core, m: &RecvMsg, msg: &Msg, frame: Frame, payload_ok: bool) {
        let want = self.ping_want.load(Ordering::Acquire);
        if want == 0 || msg.seq == 0 || msg.seq > want {
            STATS.pongs_stale.inc();
            pr_info!("pong {} from node {}: not waited for\n", msg.seq, m.src);
            return;
        }
        // The send time is kept for the latest try only.
        let rtt_us =
            (msg.seq == want).then(|| (Ktime::ktime_get().to_ns() - self.ping_sent_ns.load(Ordering::Relaxed)) / 1000);
        let len = m.payload_len as usize;
        let verdict = if !payload_ok || msg.len != m.payload_len || param::PING_BYTES.get() as u32 != msg.len {
            Err("wrong length or payload refused")
        } else {
            match core.node.host.frame(frame) {
                Some(f) => compare_payload(f, msg.seq, len, msg.crc),
                None => Err("no frame"),
            }
        };
        match verdict {
            Ok(()) => {
                STATS.pongs_ok.inc();
                match rtt_us {
                    Some(us) => pr_info!(
                        "pong {} from node {}: {} bytes verified byte for byte (crc {:08x}), round trip {} us\n",
                        msg.seq, m.src, len, msg.crc, us
                    ),
                    None => pr_info!(
                        "pong {} from node {}: {} bytes verified byte for byte (crc {:08x}), answering an earlier try\n",
                        msg.seq, m.src, len, msg.crc
                    ),
                };
                self.ping_result.store(1, Ordering::Release);
            }
            Err(why) => {
                STATS.pongs_bad.inc();
                pr_err!("pong {} from node {}: {} bytes: {}\n", msg.seq, m.src, len, why);
                self.ping_result.store(2, Ordering::Release);
            }
        }
        self.ping_want.store(0, Ordering::Release);
    }

    /// Ping `peer` with `bytes` of payload until a pong comes back (bounded).
    pub(super) fn ping(&self, peer: u16, bytes: usize) -> Result {
        for seq in 1..=PING_TRIES {
            {
                let mut core = self.core.lock();
                core.node.host.reap();
                let t = core.take_tx_frame().ok_or(EBUSY)?;
                let mut chunk = [0u8; 64];
                let mut off = 0;
                while off < bytes {
                    let n = (bytes - off).min(chunk.len());
                    proto::pattern(seq, off, &mut chunk[..n]);
                    core.node.host.tx[t].write(off, &chunk[..n])?;
                    off += n;
                }
                let msg = Msg { kind: Kind::Ping, seq, len: bytes as u32, crc: proto::pattern_crc(seq, bytes) };
                self.ping_result.store(0, Ordering::Relaxed);
                self.ping_sent_ns.store(Ktime::ktime_get().to_ns(), Ordering::Relaxed);
                self.ping_want.store(seq, Ordering::Release);
                core.send(peer, &msg.emit(), bytes, t)?;
            }
            self.ring_nic();
            STATS.pings_sent.inc();
            pr_info!("ping {} to node {}: {} bytes\n", seq, peer, bytes);
            let mut waited = 0;
            while waited < PING_WAIT_MS {
                sys::msleep(POLL_MS);
                waited += POLL_MS;
                match self.ping_result.load(Ordering::Acquire) {
                    1 => return Ok(()),
                    2 => return Err(EIO),
                    _ => {}
                }
            }
            pr_info!("no pong for ping {} within {} ms\n", seq, PING_WAIT_MS);
        }
        self.ping_want.store(0, Ordering::Release);
        Err(super::control::etimedout())
    }
}

/// Compare frame bytes with ping `seq`'s payload and checksum.
fn compare_payload(frame: &DmaBuf, seq: u32, len: usize, crc: u32) -> core::result::Result<(), &'static str> {
    if crc != proto::pattern_crc(seq, len) {
        return Err("checksum in the pong differs from the ping's");
    }
    if let Some((at, got, sent)) = crate::net::first_difference(frame, seq, len)? {
        pr_err!("pong {}: byte {} is {:#04x}, sent {:#04x}\n", seq, at, got, sent);
        return Err("payload differs from the ping's");
    }
    Ok(())
}
