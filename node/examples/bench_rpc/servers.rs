// SPDX-License-Identifier: GPL-2.0-only
//! The server thread: blocking 8 KB calls against it, and the server side shared between setups.

use super::*;

/// p50 (µs) of `calls` blocking 8 KB solicited calls from `p`, `ways` = 2 (to node 1) or 3
/// (node 1 delegates to node 2); `also` runs beside each poll of `p` (a same-thread
/// server). The clock is read only now and then while waiting: it is not part of the
/// round trip measured.
pub(crate) fn wait_8k_p50_on(p: &mut Port, ways: u32, calls: u32, also: impl FnMut()) -> anyhow::Result<f64> {
    Ok(pct(&mut wait_8k_latencies(p, ways, calls, also)?, 0.5))
}

/// The latencies (ns) behind [`wait_8k_p50_on`].
pub(crate) fn wait_8k_latencies(
    p: &mut Port,
    ways: u32,
    calls: u32,
    mut also: impl FnMut(),
) -> anyhow::Result<Vec<u64>> {
    let mut lat = Vec::with_capacity(calls as usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..calls {
        let t0 = Instant::now();
        let rt = p.solicit()?;
        // The call's start time is the one read for the latency (a socket round trip
        // below reads the clock twice per call too).
        let now = p.now_at(t0);
        let r = if ways == 2 {
            p.rpc.call::<Get2>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, Mode::Wait)
        } else {
            p.rpc.call::<Get3>(now, &mut p.node, 1, &req(FRAME_BYTES), rt, Mode::Wait)
        };
        let id = r.map_err(|e| anyhow::anyhow!("call: {e:?}"))?;
        let mut spins = 0u32;
        let o = loop {
            p.poll();
            also();
            if let Some(o) = p.rpc.take_outcome(id) {
                break o;
            }
            spins = spins.wrapping_add(1);
            anyhow::ensure!(!spins.is_multiple_of(1024) || Instant::now() < deadline, "{ways}-way call did not finish");
        };
        lat.push(t0.elapsed().as_nanos() as u64);
        finish(p, o, FRAME_BYTES)?;
    }
    Ok(lat)
}

/// Run `f` on a fresh client (node 0) facing `ways - 1` server nodes (node 1, the
/// directory when `ways` is 3, and holder node 2) polled by one thread of their own (a
/// thread per node would put three spinning threads on two cores in 3-way runs). Client
/// on CPU 0, servers on CPU 1, as the socket baselines are placed (left to the scheduler,
/// the two spinning threads sometimes shared a core). Afterwards, whatever `f` returned,
/// the servers stop and the client is unpinned.
pub(crate) fn with_servers<T>(ways: u32, f: impl FnOnce(&mut Port) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let (mut client, side) = rpc_setup(ways)?;
    SharedServer::serve(vec![side], |_| f(&mut client))
}

/// A fresh NetRPC setup on its own switch: the client (node 0) and its server side (node
/// 1; with `ways` = 3 node 1 is the directory and delegates to holder node 2).
pub(crate) fn rpc_setup(ways: u32) -> anyhow::Result<(Port, ServerSide)> {
    let sw = InProcSwitch::new();
    let client = node(&sw, 0, false)?;
    let mut servers = vec![node(&sw, 1, ways == 3)?];
    if ways == 3 {
        servers.push(node(&sw, 2, false)?);
    }
    Ok((client, ServerSide::Rpc(servers)))
}

/// The server end of one setup, as the server thread drives it.
pub(crate) enum ServerSide {
    /// NetRPC server nodes, each polled in turn.
    Rpc(Vec<Port>),
    /// A raw Trapeze server (no NetRPC).
    Raw(Box<RawServer>),
    /// Nothing to serve: the thread sleeps while another thread's server is measured.
    Idle,
}

impl ServerSide {
    /// One pass; true if anything moved.
    pub(crate) fn poll(&mut self) -> bool {
        match self {
            ServerSide::Rpc(ports) => ports.iter_mut().fold(false, |busy, p| p.poll() | busy),
            ServerSide::Raw(r) => r.poll(),
            ServerSide::Idle => {
                std::thread::sleep(Duration::from_micros(200));
                false
            }
        }
    }
}

/// The one server thread, pinned to CPU 1, polling the setup `active` names: setups
/// compared with each other take turns on it in short stretches, so the phases of this VM
/// (tens of percent apart, lasting about a second) fall on both alike, and an idle setup
/// never spins beside the measured one.
pub(crate) struct SharedServer {
    pub(crate) active: Arc<AtomicUsize>,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

/// `SharedServer::active` value that ends the thread.
pub(crate) const STOP: usize = usize::MAX;

impl SharedServer {
    pub(crate) fn spawn(mut sides: Vec<ServerSide>) -> Self {
        let active = Arc::new(AtomicUsize::new(0));
        let a = active.clone();
        let thread = spawn_named("rpc-server", move || {
            // Best effort: an unpinned server still answers.
            let _ = Placement::CrossCore.pin(true);
            let mut idle = 0u32;
            while let Some(side) = sides.get_mut(a.load(Ordering::Relaxed)) {
                if side.poll() {
                    idle = 0;
                } else {
                    idle += 1;
                    if idle >= SPIN_PASSES {
                        idle = 0;
                        std::thread::yield_now();
                    }
                }
            }
        });
        SharedServer { active, thread }
    }

    /// Serve setup `i` from the next pass on. The caller has nothing outstanding on the
    /// setup it leaves (its calls all finished).
    pub(crate) fn switch_to(&self, i: usize) {
        self.active.store(i, Ordering::Relaxed);
    }

    /// Serve `sides` (setup 0 first) while `f` runs as the client, pinned to CPU 0;
    /// afterwards, whatever `f` returned, the client is unpinned and the server stops.
    pub(crate) fn serve<T>(
        sides: Vec<ServerSide>,
        f: impl FnOnce(&SharedServer) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let server = SharedServer::spawn(sides);
        let result = Placement::CrossCore.pin(false).and_then(|()| f(&server));
        let unpinned = Placement::unpin();
        let stopped = server.stop();
        let r = result?;
        unpinned?;
        stopped?;
        Ok(r)
    }

    pub(crate) fn stop(self) -> anyhow::Result<()> {
        self.active.store(STOP, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("server panicked"))
    }
}
