// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC against UDP and TCP with both ends on one core, taking turns.

use super::*;

/// The same-core comparison: NetRPC with both nodes polled by the calling thread against
/// blocking UDP and TCP with both ends on CPU 0 (their server ends block while the
/// others run, so all three setups can live side by side). They take turns in
/// `stretches` rounds of `calls` round trips each (order rotating), as the other
/// ratios do, so this VM's phases fall on all three alike. All latencies (ns) of each,
/// and each round's p50 ratios.
pub(crate) struct SameCore {
    pub(crate) rpc: Vec<u64>,
    pub(crate) udp: Vec<u64>,
    pub(crate) tcp: Vec<u64>,
    /// Per round, NetRPC p50 / UDP p50 and NetRPC p50 / TCP p50, sorted.
    pub(crate) over_udp: Vec<f64>,
    pub(crate) over_tcp: Vec<f64>,
}

impl SameCore {
    pub(crate) fn measure(stretches: u32, calls: u32) -> anyhow::Result<Self> {
        let mut udp = SocketPair::udp(false, Placement::SameCore)?;
        let mut tcp = SocketPair::tcp(false, Placement::SameCore)?;
        let sw = InProcSwitch::new();
        let mut client = node(&sw, 0, false)?;
        let mut server = node(&sw, 1, false)?;
        let mut s =
            SameCore { rpc: Vec::new(), udp: Vec::new(), tcp: Vec::new(), over_udp: Vec::new(), over_tcp: Vec::new() };
        let mut run = || -> anyhow::Result<()> {
            Placement::SameCore.pin(false)?;
            // Untimed warm-up of each.
            wait_8k_latencies(&mut client, 2, calls, || {
                server.poll();
            })?;
            udp.latencies(calls)?;
            tcp.latencies(calls)?;
            for i in 0..stretches {
                let mut p50 = [0.0; 3];
                for k in 0..3 {
                    let which = (i as usize + k) % 3;
                    let mut lat = match which {
                        0 => wait_8k_latencies(&mut client, 2, calls, || {
                            server.poll();
                        })?,
                        1 => udp.latencies(calls)?,
                        _ => tcp.latencies(calls)?,
                    };
                    [&mut s.rpc, &mut s.udp, &mut s.tcp][which].extend_from_slice(&lat);
                    p50[which] = pct(&mut lat, 0.5);
                }
                s.over_udp.push(p50[0] / p50[1]);
                s.over_tcp.push(p50[0] / p50[2]);
            }
            Ok(())
        };
        let result = run();
        let unpinned = Placement::unpin();
        let closed = udp.close().and(tcp.close());
        result?;
        unpinned?;
        closed?;
        s.over_udp.sort_by(f64::total_cmp);
        s.over_tcp.sort_by(f64::total_cmp);
        Ok(s)
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
