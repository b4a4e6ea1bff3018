// SPDX-License-Identifier: GPL-2.0-only
//! The paper's Table 1 beside ours, and its relations checked in the same run.
//!
//! The figures are Table 1 of the RPC-variants seed (`gms-trapeze-rpc-variants.txt`:
//! gmsnet kernel-to-kernel RPCs on AlphaStations over Myrinet, 16 B request, reply
//! payload 0 / 4 KB / 8 KB): latency (µs) and bandwidth (MB/s; messages/s for 0 B).
//! Absolute figures are of 1998 hardware; what carries over are the relations the paper
//! draws from them, which [`relations`] checks on this run's rows.

use super::*;

/// (ways, variant, payload, kind) → (latency µs, MB/s or msgs/s).
const TABLE_1: [(u32, &str, u32, &str, f64, f64); 42] = [
    (2, "wait", 0, "none", 73.7, 13600.0),
    (2, "wait", 4096, "solicited", 127.6, 32.1),
    (2, "wait", 4096, "unsolicited", 134.0, 30.6),
    (2, "wait", 4096, "unsolicited+copy", 167.4, 24.5),
    (2, "wait", 8192, "solicited", 165.9, 48.8),
    (2, "wait", 8192, "unsolicited", 169.6, 48.0),
    (2, "wait", 8192, "unsolicited+copy", 217.2, 37.5),
    (2, "cont", 0, "none", 69.0, 64500.0),
    (2, "cont", 4096, "solicited", 125.8, 78.9),
    (2, "cont", 4096, "unsolicited", 128.0, 79.2),
    (2, "cont", 4096, "unsolicited+copy", 160.8, 69.7),
    (2, "cont", 8192, "solicited", 163.5, 95.1),
    (2, "cont", 8192, "unsolicited", 166.7, 97.4),
    (2, "cont", 8192, "unsolicited+copy", 210.8, 90.5),
    (2, "defer", 0, "none", 73.1, 64500.0),
    (2, "defer", 4096, "solicited", 131.6, 76.9),
    (2, "defer", 4096, "unsolicited", 135.2, 70.7),
    (2, "defer", 4096, "unsolicited+copy", 170.0, 50.4),
    (2, "defer", 8192, "solicited", 169.8, 94.9),
    (2, "defer", 8192, "unsolicited", 170.5, 96.7),
    (2, "defer", 8192, "unsolicited+copy", 218.3, 92.9),
    (3, "wait", 0, "none", 109.5, 9150.0),
    (3, "wait", 4096, "solicited", 163.4, 25.1),
    (3, "wait", 4096, "unsolicited", 168.8, 24.3),
    (3, "wait", 4096, "unsolicited+copy", 201.8, 20.3),
    (3, "wait", 8192, "solicited", 201.9, 40.3),
    (3, "wait", 8192, "unsolicited", 205.9, 39.7),
    (3, "wait", 8192, "unsolicited+copy", 254.0, 32.2),
    (3, "cont", 0, "none", 104.6, 64600.0),
    (3, "cont", 4096, "solicited", 162.6, 79.4),
    (3, "cont", 4096, "unsolicited", 163.6, 78.8),
    (3, "cont", 4096, "unsolicited+copy", 195.2, 63.6),
    (3, "cont", 8192, "solicited", 199.5, 94.7),
    (3, "cont", 8192, "unsolicited", 202.3, 97.1),
    (3, "cont", 8192, "unsolicited+copy", 246.4, 91.3),
    (3, "defer", 0, "none", 108.9, 64500.0),
    (3, "defer", 4096, "solicited", 166.6, 77.6),
    (3, "defer", 4096, "unsolicited", 169.6, 65.7),
    (3, "defer", 4096, "unsolicited+copy", 204.0, 47.9),
    (3, "defer", 8192, "solicited", 205.7, 95.5),
    (3, "defer", 8192, "unsolicited", 206.1, 96.3),
    (3, "defer", 8192, "unsolicited+copy", 254.4, 88.1),
];

/// The paper's (latency µs, bandwidth) for a row of ours.
pub(crate) fn table_1(r: &Row) -> Option<(f64, f64)> {
    TABLE_1.iter().find(|t| (t.0, t.1, t.2, t.3) == (r.ways, r.variant, r.payload, r.kind)).map(|t| (t.4, t.5))
}

/// One of the paper's relations, checked on this run.
pub(crate) struct Relation {
    pub(crate) name: &'static str,
    pub(crate) what: &'static str,
    /// Our figure, and the bound it must meet.
    pub(crate) ours: f64,
    pub(crate) bound: f64,
    pub(crate) holds: bool,
}

/// The paper's relations on this run's rows and the interleaved bandwidth comparison
/// (`cont_over_raw`: nonblocking NetRPC over raw Trapeze, 8 KB solicited).
pub(crate) fn relations(rows: &[Row], cont_over_raw: f64) -> Vec<Relation> {
    let get =
        |w: u32, v: &str, p: u32, k: &str| rows.iter().find(|r| (r.ways, r.variant, r.payload, r.kind) == (w, v, p, k));
    // Solicited over unsolicited latency, the worst over every ways/variant/payload.
    let mut sol = 0.0f64;
    // Copy's bandwidth over unsolicited's, the worst over the nonblocking rows.
    let mut copy = f64::INFINITY;
    for w in [2, 3] {
        for v in ["wait", "cont", "defer"] {
            for p in [4096, 8192] {
                if let (Some(s), Some(u), Some(c)) =
                    (get(w, v, p, "solicited"), get(w, v, p, "unsolicited"), get(w, v, p, "unsolicited+copy"))
                {
                    sol = sol.max(s.p50 / u.p50);
                    if v != "wait" {
                        copy = copy.min(c.mb_s / u.mb_s);
                    }
                }
            }
        }
    }
    vec![
        Relation {
            name: "solicited_no_dearer",
            what: "solicited p50 / unsolicited p50, the worst row (paper: solicited is cheaper)",
            ours: sol,
            bound: 1.0,
            holds: sol <= 1.0,
        },
        Relation {
            name: "copy_within_7pct",
            what: "unsolicited+copy MB/s / unsolicited MB/s, the worst nonblocking row (paper: at most 7 % lost)",
            ours: copy,
            bound: 0.93,
            holds: copy >= 0.93,
        },
        Relation {
            name: "cont_87pct_of_raw",
            what: "nonblocking NetRPC 8 KB MB/s / raw Trapeze, interleaved (paper: 87-92 % kept)",
            ours: cont_over_raw,
            bound: 0.87,
            holds: cont_over_raw >= 0.87,
        },
    ]
}

/// The relations as JSON: name → {ours, bound, holds}.
pub(crate) fn relations_json(rels: &[Relation]) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    for r in rels {
        o.insert(r.name.into(), json!({ "ours": r.ours, "bound": r.bound, "holds": r.holds }));
    }
    serde_json::Value::Object(o)
}
