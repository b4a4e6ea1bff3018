// SPDX-License-Identifier: GPL-2.0-only
//! The NetRPC echo operation of the self-tests: the service every node runs (plugged into
//! the runtime's host as its [`Serve`]), the checks of a reply, and the continuations of
//! the nonblocking calls (`echo_peer=`, `unload_inflight=`).

use super::proto;
use crate::net::{Frame, KHost, Node, Serve, FRAME_BYTES};
use crate::stats::STATS;
use crate::sys::dma::DmaBuf;
use crate::tpz::gms::prelude::Host;
use crate::tpz::netrpc::prelude::*;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::prelude::*;

/// NetRPC echo: the server answers with the request's body and a payload of `len` bytes
/// of the [`proto::pattern`] of `seq`, tagged with the caller's IPT token (solicited).
/// Body: `seq`, `len`, CRC-32 of the pattern (little-endian `u32`s).
pub(super) struct Echo;
impl Operation for Echo {
    const OP: u16 = 0x7E01;
    type Request = Bytes<12>;
    type Reply = Bytes<12>;
}

/// Error code (≥ 64) an echo server answers when it has no free frame or a bad length.
const ECHO_NO_FRAME: u16 = 64;
const ECHO_BAD_LEN: u16 = 65;

impl Echo {
    pub(super) fn body(seq: u32, len: u32) -> Bytes<12> {
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&seq.to_le_bytes());
        b[4..8].copy_from_slice(&len.to_le_bytes());
        b[8..12].copy_from_slice(&proto::pattern_crc(seq, len as usize).to_le_bytes());
        Bytes(b)
    }
    fn parse(b: &[u8]) -> Option<(u32, u32, u32)> {
        let w = |i: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(4 * i..4 * i + 4)?.try_into().ok()?)) };
        Some((w(0)?, w(1)?, w(2)?))
    }
}

/// Outcome slots of the echo test (0 pending, 1 verified, 2 wrong).
pub(super) struct EchoState {
    /// Held by the issuing thread while it "holds a lock the continuation needs": the
    /// continuation then returns `false` and is deferred to the work item.
    pub(super) busy: AtomicBool,
    pub(super) result: AtomicU32,
    /// Where the continuation ran: 1 the receive path (the interrupt handler), 2 the work item.
    pub(super) ran_in: AtomicU32,
}

/// The echo test's outcome (module-wide: one NIC per guest, like the counters).
pub(super) static ECHO: EchoState =
    EchoState { busy: AtomicBool::new(false), result: AtomicU32::new(0), ran_in: AtomicU32::new(0) };

/// The echo service ([`Serve`]): answer [`Echo`] with the pattern of the request's `seq`.
pub(crate) const SERVE: Serve = serve;

fn serve(host: &mut KHost, inc: &Incoming<'_, Frame>) -> Action<Frame> {
    if inc.op != Echo::OP {
        return Action::Error(RpcError::UnknownOp);
    }
    let Some((seq, len, _)) = Echo::parse(inc.body) else {
        return Action::Error(RpcError::Malformed);
    };
    if len as usize > FRAME_BYTES {
        return Action::Error(RpcError::Remote(ECHO_BAD_LEN));
    }
    if len == 0 {
        if seq == 0 {
            STATS.heartbeats.inc();
        } else {
            STATS.echo_served.inc();
        }
        return Action::reply(&Echo::body(seq, 0), None);
    }
    let Some(f) = host.alloc() else {
        return Action::Error(RpcError::Remote(ECHO_NO_FRAME));
    };
    let mut chunk = [0u8; 64];
    let mut off = 0;
    while off < len as usize {
        let n = (len as usize - off).min(chunk.len());
        proto::pattern(seq, off, &mut chunk[..n]);
        if !host.ep.frame(f).is_some_and(|b| b.write(off, &chunk[..n]).is_ok()) {
            host.release(f);
            return Action::Error(RpcError::Remote(ECHO_BAD_LEN));
        }
        off += n;
    }
    // The reply carries the frame: free it after that send.
    host.retire(f);
    STATS.echo_served.inc();
    Action::reply(&Echo::body(seq, len), if len > 0 { Some((f, len)) } else { None })
}

/// Check an echo reply against request `seq` of `len` bytes: the body, then the payload
/// byte for byte. Releases the reply's frame.
pub(super) fn check_echo(
    host: &mut KHost,
    o: &Outcome<Frame>,
    seq: u32,
    len: u32,
) -> core::result::Result<(), &'static str> {
    let r = match o {
        Ok(r) => r,
        Err(_) => return Err("the call failed"),
    };
    let frame = match r.payload {
        Payload::Frame { frame, .. } | Payload::Buffer { frame, .. } => Some(frame),
        Payload::None => None,
    };
    let verdict = (|| {
        let (s, l, crc) = Echo::parse(r.body.as_slice()).ok_or("malformed reply body")?;
        if (s, l) != (seq, len) || crc != proto::pattern_crc(seq, len as usize) {
            return Err("reply body differs from the request");
        }
        let got_len = match r.payload {
            Payload::Frame { len, .. } | Payload::Buffer { len, .. } => len,
            Payload::None => 0,
        };
        if got_len != len {
            return Err("reply payload has the wrong length");
        }
        match frame {
            Some(f) => compare(host.frame(f).ok_or("bad frame")?, seq, len as usize),
            None if len == 0 => Ok(()),
            None => Err("no payload"),
        }
    })();
    if let Some(f) = frame {
        host.release(f);
    }
    verdict
}

/// Compare `len` bytes of a frame with the pattern of `seq`.
pub(super) fn compare(frame: &DmaBuf, seq: u32, len: usize) -> core::result::Result<(), &'static str> {
    match first_difference(frame, seq, len)? {
        None => Ok(()),
        Some(_) => Err("payload differs from the pattern"),
    }
}

/// The first of `len` frame bytes that differs from the pattern of `seq`, if any: its
/// offset, the byte found and the byte expected.
pub(super) fn first_difference(
    frame: &DmaBuf,
    seq: u32,
    len: usize,
) -> core::result::Result<Option<(usize, u8, u8)>, &'static str> {
    let (mut got, mut want) = ([0u8; 64], [0u8; 64]);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(got.len());
        frame.read(off, &mut got[..n]).map_err(|_| "frame too small")?;
        proto::pattern(seq, off, &mut want[..n]);
        if let Some(k) = (0..n).find(|&k| got[k] != want[k]) {
            return Ok(Some((off + k, got[k], want[k])));
        }
        off += n;
    }
    Ok(None)
}

/// Fill `len` bytes of a frame with the pattern of `seq`.
pub(super) fn fill(frame: &DmaBuf, seq: u32, len: usize) -> Result {
    let mut chunk = [0u8; 64];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(chunk.len());
        proto::pattern(seq, off, &mut chunk[..n]);
        frame.write(off, &chunk[..n])?;
        off += n;
    }
    Ok(())
}

/// The nonblocking echo's continuation: runs from the receive path (the interrupt
/// handler, core spinlock held: must not sleep) or, deferred, from the work item. Returns `false` with
/// no side effect while the issuing thread holds `echo.busy`.
pub(super) fn echo_continuation(node: &mut Node, o: &Outcome<Frame>, arg: u64) -> bool {
    let host = &mut node.host;
    if ECHO.busy.load(Ordering::Acquire) {
        return false;
    }
    STATS.continuations.inc();
    let (seq, len) = ((arg >> 32) as u32, arg as u32);
    let ok = match check_echo(host, o, seq, len) {
        Ok(()) => 1,
        Err(why) => {
            pr_err!("echo {}: {}\n", seq, why);
            2
        }
    };
    ECHO.ran_in.store(if host.in_work { 2 } else { 1 }, Ordering::Relaxed);
    ECHO.result.store(ok, Ordering::Release);
    true
}

/// The continuation of the calls `unload_inflight=` leaves in flight: remove fails them
/// (they time out at once), and this counts the failure.
pub(super) fn inflight_continuation(node: &mut Node, o: &Outcome<Frame>, _arg: u64) -> bool {
    if o.is_err() {
        STATS.inflight_failed.inc();
    } else if let Ok(Reply { payload: Payload::Frame { frame, .. } | Payload::Buffer { frame, .. }, .. }) = o {
        node.host.release(*frame);
    }
    true
}
