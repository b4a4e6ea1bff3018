// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC against busy-polled socket echoes, each end on its own core: the headline
//! comparison on equal terms (issue 33). Every side busy-polls at both ends and is
//! placed alike (client on CPU 0, server on CPU 1):
//!
//! - NetRPC over the UDP link (two NICs on UDP loopback, no cluster key): the deployed
//!   transport, against the echo over the same kind of socket (`rpc_udp_over_udp_echo`);
//! - NetRPC over the in-process link (the table rows' setup): the cross-core headline
//!   against the same echo (`rpc_over_udp_echo`);
//! - a UDP and a TCP (NODELAY) echo, 16 B request and 8 KB reply, non-blocking sockets
//!   spun on at both ends.
//!
//! The four take turns in `rounds` rounds of `calls` round trips each, the order
//! rotating. The NetRPC servers share the one server thread (`SharedServer`), which
//! sleeps while a socket echo is measured; each echo's server thread is made for its
//! stretch and ended after it, so nothing idle spins beside what is measured.

use super::*;

/// Latencies (ns) of each side (NetRPC over the UDP link, over the in-process link, the
/// UDP echo, the TCP echo), and per round the p50 ratios of the two NetRPC sides
/// over the UDP echo and of NetRPC over UDP over the TCP echo, sorted.
pub(crate) struct EchoSeries {
    pub(crate) lat: [Vec<u64>; 4],
    pub(crate) udp_link_over_udp: Vec<f64>,
    pub(crate) udp_link_over_tcp: Vec<f64>,
    pub(crate) memory_over_udp: Vec<f64>,
}

impl EchoSeries {
    pub(crate) fn measure(rounds: u32, calls: u32) -> anyhow::Result<Self> {
        let (mut udp_link, udp_side) = mac_setup(MacLink::Udp, None)?;
        let (mut memory, memory_side) = rpc_setup(2)?;
        let mut s = EchoSeries {
            lat: Default::default(),
            udp_link_over_udp: Vec::new(),
            udp_link_over_tcp: Vec::new(),
            memory_over_udp: Vec::new(),
        };
        SharedServer::serve(vec![udp_side, memory_side, ServerSide::Idle], |server| {
            for i in 0..=rounds {
                let mut p50 = [0.0; 4];
                for k in 0..4 {
                    let side = (i as usize + k) % 4;
                    let mut lat = match side {
                        0 | 1 => {
                            server.switch_to(side);
                            let p = if side == 0 { &mut udp_link } else { &mut memory };
                            wait_8k_latencies(p, 2, calls, || {})?
                        }
                        _ => {
                            server.switch_to(2);
                            let make = if side == 2 { SocketPair::udp } else { SocketPair::tcp };
                            let mut pair = make(true, Placement::CrossCore)?;
                            let lat = pair.latencies(calls);
                            pair.close()?;
                            lat?
                        }
                    };
                    p50[side] = pct(&mut lat, 0.5);
                    // Round 0 warms every side up and is not counted.
                    if i > 0 {
                        s.lat[side].extend_from_slice(&lat);
                    }
                }
                if i > 0 {
                    s.udp_link_over_udp.push(p50[0] / p50[2]);
                    s.udp_link_over_tcp.push(p50[0] / p50[3]);
                    s.memory_over_udp.push(p50[1] / p50[2]);
                }
            }
            Ok(())
        })?;
        for v in [&mut s.udp_link_over_udp, &mut s.udp_link_over_tcp, &mut s.memory_over_udp] {
            v.sort_by(f64::total_cmp);
        }
        Ok(s)
    }

    /// p50 (µs) of all of side `i`'s round trips.
    pub(crate) fn p50(&mut self, i: usize) -> f64 {
        pct(&mut self.lat[i], 0.5)
    }

    /// The JSON of the comparison: each side's p50, and each ratio (p50 over p50 of all
    /// round trips) with its rounds' p10, median and p90.
    pub(crate) fn json(&mut self, rounds: u32, calls: u32) -> serde_json::Value {
        let p: Vec<f64> = (0..4).map(|i| self.p50(i)).collect();
        let ratio = |r: f64, v: &[f64]| json!({ "p50": r, "rounds_p10": quantile(v, 0.1), "rounds_median": median(v), "rounds_p90": quantile(v, 0.9) });
        json!({ "rpc_udp_link_p50_us": p[0], "rpc_memory_link_p50_us": p[1], "udp_echo_spin_p50_us": p[2],
                "tcp_echo_spin_p50_us": p[3], "rounds": rounds, "calls_each": calls,
                "rpc_udp_over_udp_echo": ratio(p[0] / p[2], &self.udp_link_over_udp),
                "rpc_udp_over_tcp_echo": ratio(p[0] / p[3], &self.udp_link_over_tcp),
                "rpc_over_udp_echo": ratio(p[1] / p[2], &self.memory_over_udp) })
    }

    /// The lines printed for people.
    pub(crate) fn print(&mut self, rounds: u32, calls: u32) {
        let p: Vec<f64> = (0..4).map(|i| self.p50(i)).collect();
        println!(
            "\nequal terms: every side busy-polls both ends, client on CPU 0, server on CPU 1; 2-way 8 KB p50 over {rounds} rounds of {calls} round trips each, taking turns:"
        );
        println!(
            "  NetRPC over the UDP link {:.1} µs, over the in-process link {:.1} µs; UDP echo {:.1} µs, TCP echo {:.1} µs",
            p[0], p[1], p[2], p[3]
        );
        let line = |name: &str, r: f64, v: &[f64], target: &str| {
            println!(
                "  {name} {r:.3} (rounds p10 {:.3} median {:.3} p90 {:.3}){target}",
                quantile(v, 0.1),
                median(v),
                quantile(v, 0.9)
            );
        };
        line("rpc_udp_over_udp_echo", p[0] / p[2], &self.udp_link_over_udp, " (target <= 1.25)");
        line("rpc_udp_over_tcp_echo", p[0] / p[3], &self.udp_link_over_tcp, "");
        line("rpc_over_udp_echo (in-process link)", p[1] / p[2], &self.memory_over_udp, "");
    }
}
