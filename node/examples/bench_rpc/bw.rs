// SPDX-License-Identifier: GPL-2.0-only
//! Nonblocking NetRPC against raw Trapeze bandwidth, taking turns in stretches.

use super::*;

/// Replies each side of a comparison moves untimed before its first timed stretch (first
/// touches of a fresh node's frames, lanes filling).
pub(crate) const WARM_REPLIES: u32 = 4000;

/// Nonblocking 8 KB bandwidth of NetRPC (2-way `cont`, the table's traffic) against raw
/// Trapeze moving the same payloads the same way (solicited replies into IPT-armed
/// frames, unsolicited ones into receive buffers), `window` calls outstanding. Both
/// setups live side by side and take turns, `chunks` pairs of stretches of `chunk_calls`
/// replies each (order alternating, nothing outstanding at a switch), on the one client
/// thread (CPU 0) and the one server thread (CPU 1): this VM's phases, tens of percent
/// apart and about a second long, then fall on both sides alike. Seconds per stretch.
pub(crate) struct BwSeries {
    pub(crate) rpc: Vec<f64>,
    pub(crate) raw: Vec<f64>,
    pub(crate) chunk_calls: u32,
}

impl BwSeries {
    pub(crate) fn measure(kind: Kind, chunks: u32, chunk_calls: u32, window: u32) -> anyhow::Result<Self> {
        let (mut rpc, rpc_side) = rpc_setup(2)?;
        let sw = InProcSwitch::new();
        let mut raw =
            RawClient { port: node(&sw, 0, false)?, solicited: kind == Kind::Solicited, armed: Default::default() };
        let raw_side = ServerSide::Raw(Box::new(RawServer { port: node(&sw, 1, false)?, owed: Default::default() }));
        let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
            let rt = reply_to(p, kind)?;
            p.rpc
                .call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, mode)
                .map_err(|e| anyhow::anyhow!("call: {e:?}"))
        };
        let mut s = BwSeries { rpc: Vec::new(), raw: Vec::new(), chunk_calls };
        SharedServer::serve(vec![rpc_side, raw_side], |server| {
            server.switch_to(0);
            bandwidth(&mut rpc, "cont", FRAME_BYTES, WARM_REPLIES, window, &issue, &mut || {})?;
            server.switch_to(1);
            raw.run(WARM_REPLIES, window, &mut || {})?;
            for i in 0..chunks {
                for side in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                    server.switch_to(side);
                    if side == 0 {
                        s.rpc.push(bandwidth(&mut rpc, "cont", FRAME_BYTES, chunk_calls, window, &issue, &mut || {})?);
                    } else {
                        s.raw.push(raw.run(chunk_calls, window, &mut || {})?);
                    }
                }
            }
            Ok(())
        })?;
        Ok(s)
    }

    pub(crate) fn mb_s(&self, secs: &[f64]) -> f64 {
        secs.len() as f64 * self.chunk_calls as f64 * FRAME_BYTES as f64 / secs.iter().sum::<f64>() / 1e6
    }
    /// NetRPC's MB/s over all its stretches.
    pub(crate) fn rpc_mb_s(&self) -> f64 {
        self.mb_s(&self.rpc)
    }
    /// Raw Trapeze's MB/s over all its stretches.
    pub(crate) fn raw_mb_s(&self) -> f64 {
        self.mb_s(&self.raw)
    }
    /// NetRPC / raw over all stretches: the headline.
    pub(crate) fn ratio(&self) -> f64 {
        self.rpc_mb_s() / self.raw_mb_s()
    }
    /// NetRPC / raw of each pair of stretches, sorted.
    pub(crate) fn pair_ratios(&self) -> Vec<f64> {
        // Equal bytes per stretch: MB/s NetRPC / raw = raw seconds / NetRPC seconds.
        sorted_ratios(&self.raw, &self.rpc)
    }
}

/// Raw Trapeze's client in the bandwidth comparison (no NetRPC): keeps `window` small
/// requests outstanding; solicited, it arms an IPT frame per request and sends its
/// payload token, and frees the frame when the reply has landed in it.
pub(crate) struct RawClient {
    pub(crate) port: Port,
    pub(crate) solicited: bool,
    /// The frames armed for outstanding requests, in request order (one server answers
    /// in order).
    pub(crate) armed: std::collections::VecDeque<Frame>,
}

impl RawClient {
    /// Seconds for `count` 8 KB replies; nothing is outstanding before or after.
    pub(crate) fn run(&mut self, count: u32, window: u32, also: &mut dyn FnMut()) -> anyhow::Result<f64> {
        let p = &mut self.port;
        let t0 = Instant::now();
        let (mut sent, mut got, mut passes) = (0u32, 0u32, 0u32);
        while got < count {
            while sent < count && sent - got < window {
                let mut ctrl = [0u8; 8];
                if self.solicited {
                    let ReplyTo::Solicited { token, frame } = p.solicit()? else { unreachable!() };
                    ctrl = token.to_le_bytes();
                    self.armed.push_back(frame);
                }
                let request =
                    SendMsg { peer: 1, ctrl: &ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE };
                if !p.raw_send(&request) {
                    if let Some(f) = self.armed.pop_back().filter(|_| self.solicited) {
                        p.done_with(f);
                    }
                    break;
                }
                sent += 1;
            }
            let mut replies = 0;
            also();
            p.raw_recv_each(|payload, _| replies += (payload == FRAME_BYTES) as u32);
            for _ in 0..replies {
                if let Some(f) = self.armed.pop_front() {
                    p.done_with(f);
                }
            }
            got += replies;
            // The stall check reads the clock now and then, not on every pass (a clock read
            // costs more than an idle pass; NetRPC's loop reads it once per burst of calls).
            passes = passes.wrapping_add(1);
            anyhow::ensure!(
                !passes.is_multiple_of(1024) || t0.elapsed() < Duration::from_secs(30),
                "raw request/reply stalled at {got}/{count}"
            );
        }
        Ok(t0.elapsed().as_secs_f64())
    }
}

/// Raw Trapeze's server: answers each request with 8 KB of its page, into the frame whose
/// payload token the request carries, or a receive buffer when it carries none.
pub(crate) struct RawServer {
    pub(crate) port: Port,
    /// The payload token of each request owed a reply (NONE: unsolicited).
    pub(crate) owed: std::collections::VecDeque<PayloadToken>,
}

impl RawServer {
    pub(crate) fn poll(&mut self) -> bool {
        let seg = [Segment { addr: DEFAULT_REGION_BASE + self.port.node.service.page, len: FRAME_BYTES }];
        let (owed, mut busy) = (&mut self.owed, false);
        self.port.raw_recv_each(|_, ctrl| {
            let token = ctrl.get(..8).map_or(0, |t| u64::from_le_bytes(t.try_into().unwrap_or_default()));
            owed.push_back(PayloadToken(token));
            busy = true;
        });
        while let Some(&token) = owed.front() {
            let reply = SendMsg { peer: 0, ctrl: b"page", payload_len: FRAME_BYTES, segments: &seg, token };
            if !self.port.raw_send(&reply) {
                break;
            }
            owed.pop_front();
            busy = true;
        }
        busy
    }
}

/// `a[i] / b[i]` for each pair, sorted.
pub(crate) fn sorted_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    r.sort_by(f64::total_cmp);
    r
}
