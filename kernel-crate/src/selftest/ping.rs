// SPDX-License-Identifier: GPL-2.0-only
//! The load-time ping test (`ping_peer=`): the pinger sends node P a control message and
//! a payload of `ping_bytes` and waits (bounded, with retries) for the pong; every node
//! answers a ping with a pong carrying the same payload back, and the pinger checks it
//! byte for byte against what it sent ([`proto`] describes the message). The receive
//! path hands this module every message that is not NetRPC's ([`on_message`]).

use super::echo::first_difference;
use super::nic::TestNic;
use super::params::PING_BYTES;
use super::proto::{self, Kind, Msg};
use crate::net::stack::Core;
use crate::net::{Frame, FRAME_BYTES};
use crate::stats::STATS;
use crate::sys::{self, dma::DmaBuf};
use crate::tpz::endpoint::RecvMsg;
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use kernel::{prelude::*, time::Ktime};

const PING_TRIES: u32 = 20;
const PING_WAIT_MS: u32 = 1_000;
const POLL_MS: u32 = 10;

/// Highest ping seq sent and not yet answered (0: none waited for); module-wide, one NIC
/// per guest like the counters.
static PING_WANT: AtomicU32 = AtomicU32::new(0);
/// 0 pending, 1 verified, 2 wrong.
static PING_RESULT: AtomicU32 = AtomicU32::new(0);
static PING_SENT_NS: AtomicI64 = AtomicI64::new(0);

/// A message that is not NetRPC's, from the receive path (core lock held): a ping is
/// answered, a pong checked. `None` if it is not one of ours; else whether a reply was
/// posted (the receive slot is the caller's to give back).
pub(crate) fn on_message<C>(core: &mut Core<C>, m: &RecvMsg) -> Option<bool> {
    let msg = Msg::parse(m.ctrl())?;
    if m.payload_refused() {
        STATS.rx_refused.inc();
    }
    let frame = core.node.host.slot_frame(m.slot).unwrap_or(0);
    let payload_ok = !m.payload_refused() && !m.via_ipt() && m.payload_len as usize <= FRAME_BYTES;
    Some(match msg.kind {
        Kind::Ping => answer_ping(core, m, &msg, frame, payload_ok),
        Kind::Pong => {
            check_pong(core, m, &msg, frame, payload_ok);
            false
        }
    })
}

/// Answer a ping: copy its payload into a transmit frame and post a pong with the
/// same control fields back to the sender. Whether a pong was posted.
fn answer_ping<C>(core: &mut Core<C>, m: &RecvMsg, msg: &Msg, frame: Frame, payload_ok: bool) -> bool {
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
fn check_pong<C>(core: &Core<C>, m: &RecvMsg, msg: &Msg, frame: Frame, payload_ok: bool) {
    let want = PING_WANT.load(Ordering::Acquire);
    if want == 0 || msg.seq == 0 || msg.seq > want {
        STATS.pongs_stale.inc();
        pr_info!("pong {} from node {}: not waited for\n", msg.seq, m.src);
        return;
    }
    // The send time is kept for the latest try only.
    let rtt_us = (msg.seq == want).then(|| (Ktime::ktime_get().to_ns() - PING_SENT_NS.load(Ordering::Relaxed)) / 1000);
    let len = m.payload_len as usize;
    let verdict = if !payload_ok || msg.len != m.payload_len || PING_BYTES.get() as u32 != msg.len {
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
                    msg.seq,
                    m.src,
                    len,
                    msg.crc,
                    us
                ),
                None => pr_info!(
                    "pong {} from node {}: {} bytes verified byte for byte (crc {:08x}), answering an earlier try\n",
                    msg.seq,
                    m.src,
                    len,
                    msg.crc
                ),
            };
            PING_RESULT.store(1, Ordering::Release);
        }
        Err(why) => {
            STATS.pongs_bad.inc();
            pr_err!("pong {} from node {}: {} bytes: {}\n", msg.seq, m.src, len, why);
            PING_RESULT.store(2, Ordering::Release);
        }
    }
    PING_WANT.store(0, Ordering::Release);
}

/// Ping `peer` with `bytes` of payload until a pong comes back (bounded).
pub(super) fn ping(nic: &impl TestNic, peer: u16, bytes: usize) -> Result {
    for seq in 1..=PING_TRIES {
        {
            let mut core = nic.core().lock();
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
            PING_RESULT.store(0, Ordering::Relaxed);
            PING_SENT_NS.store(Ktime::ktime_get().to_ns(), Ordering::Relaxed);
            PING_WANT.store(seq, Ordering::Release);
            core.send(peer, &msg.emit(), bytes, t)?;
        }
        nic.ring_nic();
        STATS.pings_sent.inc();
        pr_info!("ping {} to node {}: {} bytes\n", seq, peer, bytes);
        let mut waited = 0;
        while waited < PING_WAIT_MS {
            sys::msleep(POLL_MS);
            waited += POLL_MS;
            match PING_RESULT.load(Ordering::Acquire) {
                1 => return Ok(()),
                2 => return Err(EIO),
                _ => {}
            }
        }
        pr_info!("no pong for ping {} within {} ms\n", seq, PING_WAIT_MS);
    }
    PING_WANT.store(0, Ordering::Release);
    Err(sys::etimedout())
}

/// Compare frame bytes with ping `seq`'s payload and checksum.
fn compare_payload(frame: &DmaBuf, seq: u32, len: usize, crc: u32) -> core::result::Result<(), &'static str> {
    if crc != proto::pattern_crc(seq, len) {
        return Err("checksum in the pong differs from the ping's");
    }
    if let Some((at, got, sent)) = first_difference(frame, seq, len)? {
        pr_err!("pong {}: byte {} is {:#04x}, sent {:#04x}\n", seq, at, got, sent);
        return Err("payload differs from the ping's");
    }
    Ok(())
}
