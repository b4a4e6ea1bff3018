// SPDX-License-Identifier: GPL-2.0-only
//! One case with every node polled by one thread: the mode to profile a path with.

use super::*;

/// What `--same-thread-only` runs, every node polled by the calling thread: a
/// deterministic amount of work per call, so an instruction count (callgrind) divided by
/// the calls is the CPU cost of that path.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub(crate) enum SameThreadCase {
    /// 2-way blocking 8 KB solicited call (p50 µs).
    Wait2,
    /// 3-way blocking 8 KB solicited call, delegated by node 1 to node 2 (p50 µs).
    Wait3,
    /// Nonblocking 2-way 8 KB solicited calls, `--window` outstanding (µs per call).
    Cont,
    /// Raw Trapeze request / 8 KB solicited reply, `--window` outstanding (µs per reply).
    Raw,
    /// 2-way blocking 8 KB solicited call over the UDP link (two NICs on loopback, no
    /// cluster key) (p50 µs): what a call costs over the deployed transport, for
    /// callgrind (instructions) and `perf stat` (system calls) per call.
    Wait2Udp,
    /// The same under a cluster key: the link MAC's tags and replay stamps on every
    /// packet (`mac_cost`'s keyed side), for callgrind.
    Wait2UdpKey,
}

pub(crate) fn same_thread_on(case: SameThreadCase, calls: u32, window: u32) -> anyhow::Result<f64> {
    if matches!(case, SameThreadCase::Wait2Udp | SameThreadCase::Wait2UdpKey) {
        let key = (case == SameThreadCase::Wait2UdpKey).then(trapeze_vnic::key::ClusterKey::random).transpose()?;
        let (mut client, mut server) = mac_setup(MacLink::Udp, key.as_ref())?;
        return wait_8k_p50_on(&mut client, 2, calls, || {
            server.poll();
        });
    }
    let sw = InProcSwitch::new();
    let mut client = node(&sw, 0, false)?;
    let mut server = node(&sw, 1, case == SameThreadCase::Wait3)?;
    Ok(match case {
        SameThreadCase::Wait2 => wait_8k_p50_on(&mut client, 2, calls, || {
            server.poll();
        })?,
        SameThreadCase::Wait3 => {
            let mut holder = node(&sw, 2, false)?;
            wait_8k_p50_on(&mut client, 3, calls, || {
                server.poll();
                holder.poll();
            })?
        }
        SameThreadCase::Cont => {
            let issue = |p: &mut Port, mode: Mode, now: u64| -> anyhow::Result<CallId> {
                let rt = p.solicit()?;
                p.rpc
                    .call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, mode)
                    .map_err(|e| anyhow::anyhow!("call: {e:?}"))
            };
            let secs = bandwidth(&mut client, "cont", FRAME_BYTES, calls, window, &issue, &mut || {
                server.poll();
            })?;
            secs * 1e6 / calls as f64
        }
        SameThreadCase::Wait2Udp | SameThreadCase::Wait2UdpKey => unreachable!("answered above"),
        SameThreadCase::Raw => {
            let mut raw = RawClient { port: client, solicited: true, armed: Default::default() };
            let mut srv = RawServer { port: server, owed: Default::default() };
            let secs = raw.run(calls, window, &mut || {
                srv.poll();
            })?;
            secs * 1e6 / calls as f64
        }
    })
}
