// SPDX-License-Identifier: GPL-2.0-only
//! The raw Trapeze round trip (no NetRPC) that splits NetRPC's latency.

use super::*;

/// Raw Trapeze round trip, one at a time, no NetRPC: node 0 sends a small request, node
/// 1 answers with `reply` bytes of its page; p50 in µs. Splits NetRPC's latency into the
/// NIC path's share and the RPC layer's.
pub(crate) fn raw_round_trip(calls: u32, reply: u32) -> anyhow::Result<f64> {
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let srv = std::thread::spawn(move || {
        let seg = [Segment { addr: DEFAULT_REGION_BASE + server.node.service.page, len: reply }];
        let segs: &[Segment] = if reply > 0 { &seg } else { &[] };
        let msg = SendMsg { peer: 0, ctrl: b"page", payload_len: reply, segments: segs, token: PayloadToken::NONE };
        let (mut owed, mut idle) = (0u32, 0u32);
        while !st.load(Ordering::Relaxed) {
            let (a, b) = server.raw_recv();
            owed += a + b;
            while owed > 0 && server.raw_send(&msg) {
                owed -= 1;
            }
            idle += 1;
            if idle >= SPIN_PASSES {
                idle = 0;
                std::thread::yield_now();
            }
        }
    });
    let request = SendMsg { peer: 1, ctrl: b"get", payload_len: 0, segments: &[], token: PayloadToken::NONE };
    let mut lat = Vec::with_capacity(calls as usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..calls {
        let t0 = Instant::now();
        while !client.raw_send(&request) {}
        for pass in 0u32.. {
            let (a, b) = client.raw_recv();
            if a + b > 0 {
                break;
            }
            if pass % 1024 == 1023 && Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                anyhow::bail!("raw round trip stalled");
            }
        }
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    stop.store(true, Ordering::Relaxed);
    srv.join().map_err(|_| anyhow::anyhow!("server panicked"))?;
    Ok(pct(&mut lat, 0.5))
}
