// SPDX-License-Identifier: GPL-2.0-only
//! The load-time NetRPC and GMS tests (process context, in probe).
//!
//! * `echo_peer=P`: NetRPC [`Echo`] calls to node P with a 4 KiB solicited reply payload:
//!   a **blocking** call (retried until P is up), a **nonblocking** call whose continuation
//!   runs from the receive path (the interrupt handler, core spinlock held), and a nonblocking
//!   call whose continuation finds its "lock" held, returns `false`, and is **deferred** to
//!   the work item. Every reply is checked: body, length, payload byte for byte.
//! * `gms_test_pages=N`: put N pages (8 KiB, a pattern per page) into the other members'
//!   memory (round robin; retried until they are up), then getpage each back into a
//!   solicited frame and check every byte.
//! * `unload_inflight=N`: leave N echo calls to a silent node and N getpages in flight.

use super::echo::{check_echo, compare, echo_continuation, fill, inflight_continuation, Echo, ECHO};
use super::nic::TestNic;
use crate::net::{now_ns, Frame, KHost, FRAME_BYTES, MEMBERS};
use crate::stats::STATS;
use crate::sys::{self, etimedout};
use crate::tpz::gms::prelude::*;
use crate::tpz::netrpc::prelude::*;
use core::sync::atomic::Ordering;
use kernel::{prelude::*, time::msecs_to_jiffies};

const ECHO_BYTES: u32 = 4096;
const ECHO_TRIES: u32 = 40;
const WAIT_MS: u32 = 5_000;
/// Longest sleep between checks while waiting for the receive path (ms).
const WAKE_MS: u32 = 10;
/// Blocking echo calls whose round trips are reported (after the first that worked).
const ECHO_TIMED: usize = 16;
/// Pages in flight at once (GMS has `net::OPS` operation slots).
const BATCH: usize = 16;
/// Rounds of retries for putpages the target could not take yet (not up, wrong view).
const PUT_ROUNDS: u32 = 40;
/// GMS space of node K's test pages.
const TEST_SPACE: u64 = 0x7e57_0000;

/// The echo test against `peer` (see the module doc).
pub(super) fn echo_test(nic: &impl TestNic, peer: u16) -> Result {
    let mut up = false;
    for seq in 1..=ECHO_TRIES {
        match echo_wait(nic, peer, seq, ECHO_BYTES) {
            Ok(us) => {
                STATS.echo_ok.inc();
                pr_info!(
                    "echo {} (wait) from node {}: {} bytes verified, answered within {} us\n",
                    seq,
                    peer,
                    ECHO_BYTES,
                    us
                );
                up = true;
                break;
            }
            Err(e) => {
                pr_info!("echo {} (wait) to node {}: {:?}; retrying\n", seq, peer, e);
                sys::msleep(250);
            }
        }
    }
    if !up {
        STATS.echo_bad.inc();
        return Err(etimedout());
    }
    // Round trips of blocking calls (4 KiB solicited reply), woken by the receive path.
    let mut rtt = [0u64; ECHO_TIMED];
    for (i, r) in rtt.iter_mut().enumerate() {
        *r = echo_wait(nic, peer, 100 + i as u32, ECHO_BYTES).inspect_err(|_| STATS.echo_bad.inc())?;
        STATS.echo_ok.inc();
    }
    rtt.sort_unstable();
    pr_info!(
            "echo (wait) to node {}: {} calls of {} bytes verified, round trip min {} us, median {} us, max {} us (TCG guests)\n",
            peer,
            ECHO_TIMED,
            ECHO_BYTES,
            rtt[0],
            rtt[ECHO_TIMED / 2],
            rtt[ECHO_TIMED - 1]
        );
    echo_nonblocking(nic, peer, 1000, ECHO_BYTES, false)?;
    echo_nonblocking(nic, peer, 1001, ECHO_BYTES, true)
}

/// One blocking echo call; the time to the answer (µs).
fn echo_wait(nic: &impl TestNic, peer: u16, seq: u32, len: u32) -> Result<u64> {
    let t0 = now_ns();
    let mut core = nic.core().lock();
    let c = &mut *core;
    let reply_to = c.node.host.solicit().ok_or(ENOMEM)?;
    let id = match c.rpc.call::<Echo>(t0, &mut c.node, peer, &Echo::body(seq, len), reply_to, Mode::Wait) {
        Ok(id) => id,
        Err(e) => {
            if let Some(f) = reply_to.caller_frame() {
                c.node.host.release(*f);
            }
            pr_err!("echo call: {:?}\n", e);
            return Err(EBUSY);
        }
    };
    if c.flush() {
        nic.ring_nic();
    }
    loop {
        let c = &mut *core;
        let now = now_ns();
        // NetRPC fails the call after its timeout (1 s): the loop ends.
        c.rpc.handle_timeouts(now, &mut c.node);
        if let Some(o) = c.rpc.take_outcome(id) {
            let v = check_echo(&mut c.node.host, &o, seq, len);
            if c.flush() {
                nic.ring_nic();
            }
            return match (v, o) {
                (Ok(()), _) => Ok((now - t0) / 1000),
                (Err(_), Err(RpcError::Timeout)) => Err(etimedout()),
                (Err(why), _) => {
                    pr_err!("echo {}: {}\n", seq, why);
                    Err(EIO)
                }
            };
        }
        // Woken by the receive path; the timeout only bounds a lost wakeup.
        let _ = nic.completed().wait_interruptible_timeout(&mut core, msecs_to_jiffies(WAKE_MS));
    }
}

/// One nonblocking echo call with [`echo_continuation`]; with `defer`, this thread
/// holds the continuation's lock until the reply has arrived.
fn echo_nonblocking(nic: &impl TestNic, peer: u16, seq: u32, len: u32, defer: bool) -> Result {
    {
        let mut core = nic.core().lock();
        let c = &mut *core;
        ECHO.result.store(0, Ordering::Relaxed);
        ECHO.busy.store(defer, Ordering::Release);
        let reply_to = c.node.host.solicit().ok_or(ENOMEM)?;
        let id =
            match c.rpc.call::<Echo>(now_ns(), &mut c.node, peer, &Echo::body(seq, len), reply_to, Mode::NonBlocking) {
                Ok(id) => id,
                Err(e) => {
                    if let Some(f) = reply_to.caller_frame() {
                        c.node.host.release(*f);
                    }
                    pr_err!("echo call: {:?}\n", e);
                    return Err(EBUSY);
                }
            };
        // Before the request leaves (flush), so no reply can beat it.
        if c.rpc.push_continuation(id, echo_continuation, (u64::from(seq) << 32) | u64::from(len)).is_err() {
            pr_err!("echo {}: cannot push the continuation\n", seq);
        }
        c.flush();
    }
    nic.ring_nic();
    let echo = || ECHO.result.load(Ordering::Acquire);
    if defer {
        // Wait for the reply to arrive and its continuation to be deferred.
        let mut waited = 0;
        while !nic.core().lock().rpc.has_deferred() && waited < WAIT_MS {
            sys::msleep(10);
            waited += 10;
        }
        let deferred = nic.core().lock().rpc.has_deferred();
        ECHO.busy.store(false, Ordering::Release);
        if !deferred {
            pr_err!("echo {}: the continuation was not deferred\n", seq);
            STATS.echo_bad.inc();
            return Err(EIO);
        }
        nic.queue_deferred();
    }
    let mut waited = 0;
    while echo() == 0 && waited < WAIT_MS {
        sys::msleep(10);
        waited += 10;
    }
    let ran_in = ECHO.ran_in.load(Ordering::Relaxed);
    let place =
        if ran_in == 2 { "the deferred-continuation work item" } else { "the receive path (the interrupt handler)" };
    match echo() {
        1 => {
            STATS.echo_ok.inc();
            pr_info!(
                "echo {} (nonblocking) from node {}: {} bytes verified by a continuation run from {}\n",
                seq,
                peer,
                len,
                place
            );
            if defer != (ran_in == 2) {
                pr_err!("echo {}: the continuation ran in the wrong place\n", seq);
                return Err(EIO);
            }
            Ok(())
        }
        0 => {
            STATS.echo_bad.inc();
            pr_err!("echo {} (nonblocking): no continuation within {} ms\n", seq, WAIT_MS);
            Err(etimedout())
        }
        _ => {
            STATS.echo_bad.inc();
            Err(EIO)
        }
    }
}

/// The GMS test (see the module doc).
pub(super) fn gms_test(nic: &impl TestNic, pages: usize) -> Result {
    let me = nic.node();
    let mut targets = [0u16; MEMBERS];
    let nt = {
        let core = nic.core().lock();
        let mut n = 0;
        for &m in core.node.members().ids().iter().filter(|&&m| m != me) {
            targets[n] = m;
            n += 1;
        }
        n
    };
    if nt == 0 {
        return Err(EINVAL);
    }
    let seq = |i: usize| (u32::from(me) << 20) | i as u32;
    let page = |i: usize| PageId::new(TEST_SPACE + u64::from(me), i as u64);
    let t0 = now_ns();
    let (mut stored, mut gets_ok) = (0usize, 0usize);
    let mut start = 0;
    while start < pages {
        let end = (start + BATCH).min(pages);
        stored += put_batch(nic, start, end, &targets[..nt], seq, page)?;
        start = end;
    }
    let put_ms = (now_ns() - t0) / 1_000_000;
    pr_info!("gms test: node {} stored {} of {} pages in other members' memory ({} ms)\n", me, stored, pages, put_ms);
    let t1 = now_ns();
    let mut start = 0;
    let (mut two, mut three) = (0, 0);
    while start < pages {
        let end = (start + BATCH).min(pages);
        let (ok, t2, t3) = get_batch(nic, start, end, seq, page)?;
        gets_ok += ok;
        two += t2;
        three += t3;
        start = end;
    }
    let get_ms = (now_ns() - t1) / 1_000_000;
    pr_info!(
        "gms test: node {} got {} of {} pages back verified byte for byte ({} 2-way, {} 3-way; {} ms)\n",
        me,
        gets_ok,
        pages,
        two,
        three,
        get_ms
    );
    if stored == pages && gets_ok == pages {
        Ok(())
    } else {
        Err(EIO)
    }
}

/// Put pages `start..end`, retrying those not stored; how many were stored.
fn put_batch(
    nic: &impl TestNic,
    start: usize,
    end: usize,
    targets: &[u16],
    seq: impl Fn(usize) -> u32,
    page: impl Fn(usize) -> PageId,
) -> Result<usize> {
    let mut done = [false; BATCH];
    let mut stored = 0;
    for round in 0..PUT_ROUNDS {
        let mut ops: [Option<(OpId, Frame)>; BATCH] = [None; BATCH];
        {
            let mut core = nic.core().lock();
            let c = &mut *core;
            // Completions of the disk's operations leave their slots before new ones
            // are issued (a slot is reused once its operation completed).
            c.settle();
            for i in start..end {
                if done[i - start] {
                    continue;
                }
                let Some(f) = c.node.host.alloc() else { break };
                let buf = c.node.host.frame(f).ok_or(EINVAL)?;
                fill(buf, seq(i), FRAME_BYTES)?;
                let target = targets[(i + round as usize) % targets.len()];
                let v = Version(u64::from(round) + 1);
                match c.node.putpage(
                    now_ns(),
                    &mut c.rpc,
                    page(i),
                    v,
                    f,
                    FRAME_BYTES as u32,
                    target,
                    false,
                    Mode::NonBlocking,
                ) {
                    Ok(op) => ops[i - start] = Some((op, f)),
                    Err(e) => {
                        c.node.host.release(f);
                        pr_info!("gms test: putpage {}: {:?}\n", i, e);
                    }
                }
            }
            c.flush();
        }
        nic.ring_nic();
        wait_ops(nic, &mut ops, |host, i, f, r| {
            host.retire(f);
            match r {
                OpResult::Put(PutResult::Stored { .. }) => {
                    done[i] = true;
                    stored += 1;
                    STATS.gms_put_stored.inc();
                }
                other => {
                    STATS.gms_put_failed.inc();
                    if round % 8 == 0 {
                        pr_info!("gms test: putpage {} round {}: {:?}\n", start + i, round, other);
                    }
                }
            }
        });
        if done[..end - start].iter().all(|&d| d) {
            break;
        }
        sys::msleep(250);
    }
    Ok(stored)
}

/// Get pages `start..end` back and check them: (verified, 2-way, 3-way).
fn get_batch(
    nic: &impl TestNic,
    start: usize,
    end: usize,
    seq: impl Fn(usize) -> u32,
    page: impl Fn(usize) -> PageId,
) -> Result<(usize, usize, usize)> {
    let mut ops: [Option<(OpId, Frame)>; BATCH] = [None; BATCH];
    {
        let mut core = nic.core().lock();
        let c = &mut *core;
        c.settle();
        for i in start..end {
            let reply_to = c.node.host.solicit().ok_or(ENOMEM)?;
            let Some(&f) = reply_to.caller_frame() else { continue };
            match c.node.getpage(now_ns(), &mut c.rpc, page(i), reply_to, Mode::NonBlocking) {
                Ok(op) => ops[i - start] = Some((op, f)),
                Err(e) => {
                    c.node.host.release(f);
                    pr_err!("gms test: getpage {}: {:?}\n", i, e);
                }
            }
        }
        c.flush();
    }
    nic.ring_nic();
    let (mut ok, mut two, mut three) = (0, 0, 0);
    wait_ops(nic, &mut ops, |host, i, mine, r| {
        let verdict = match r {
            OpResult::Get(GetResult::Hit { frame, len, via, held, .. }) => {
                let v = if len as usize != FRAME_BYTES {
                    Err("wrong length")
                } else {
                    host.frame(frame).ok_or("bad frame").and_then(|b| compare(b, seq(start + i), FRAME_BYTES))
                };
                match via {
                    Via::TwoWay => two += 1,
                    Via::ThreeWay => three += 1,
                    Via::Local => {}
                }
                // A moving read leaves GMS's frame with GMS; ours goes back.
                host.release(if held { mine } else { frame });
                v
            }
            OpResult::Get(GetResult::Miss { reason, frame }) => {
                if let Some(f) = frame {
                    host.release(f);
                }
                pr_err!("gms test: getpage {}: miss ({:?})\n", start + i, reason);
                Err("miss")
            }
            _ => {
                host.release(mine);
                Err("unexpected result")
            }
        };
        match verdict {
            Ok(()) => {
                ok += 1;
                STATS.gms_get_ok.inc();
            }
            Err(why) => {
                STATS.gms_get_bad.inc();
                pr_err!("gms test: page {}: {}\n", start + i, why);
            }
        }
    });
    Ok((ok, two, three))
}

/// Wait (bounded) for the operations in `ops`; `done(host, index, frame, result)` for
/// each completion (under the core lock: no sleeping). Operations still pending at
/// the end are reported and left to GMS's own timeouts.
fn wait_ops(
    nic: &impl TestNic,
    ops: &mut [Option<(OpId, Frame)>; BATCH],
    mut done: impl FnMut(&mut KHost, usize, Frame, OpResult<Frame>),
) {
    let deadline = now_ns() + u64::from(WAIT_MS) * 1_000_000;
    let mut core = nic.core().lock();
    loop {
        let c = &mut *core;
        let now = now_ns();
        c.rpc.handle_timeouts(now, &mut c.node);
        c.node.drive(now, &mut c.rpc);
        c.settle();
        for (i, o) in ops.iter_mut().enumerate() {
            if let Some((op, f)) = *o {
                if let Some(comp) = c.node.host.take_done(op) {
                    done(&mut c.node.host, i, f, comp.result);
                    *o = None;
                }
            }
        }
        if c.flush() {
            nic.ring_nic();
        }
        if ops.iter().all(|o| o.is_none()) || now >= deadline {
            break;
        }
        // Woken by the receive path; the timeout only bounds a lost wakeup.
        let _ = nic.completed().wait_interruptible_timeout(&mut core, msecs_to_jiffies(WAKE_MS));
    }
    drop(core);
    let left = ops.iter().filter(|o| o.is_some()).count();
    if left > 0 {
        pr_err!("gms test: {} operations unfinished after {} ms\n", left, WAIT_MS);
    }
}

/// Leave `n` nonblocking echo calls in flight to a node that does not answer.
pub(super) fn leave_in_flight(nic: &impl TestNic, n: usize) {
    const SILENT_NODE: u16 = 0x3ff;
    let sent = {
        let mut core = nic.core().lock();
        let c = &mut *core;
        c.settle();
        let mut issued = 0;
        for i in 0..n {
            let Some(reply_to) = c.node.host.solicit() else { break };
            let body = Echo::body(i as u32, 0);
            match c.rpc.call::<Echo>(now_ns(), &mut c.node, SILENT_NODE, &body, reply_to, Mode::NonBlocking) {
                Ok(id) => {
                    let _ = c.rpc.push_continuation(id, inflight_continuation, 0);
                    issued += 1;
                }
                Err(_) => {
                    if let Some(f) = reply_to.caller_frame() {
                        c.node.host.release(*f);
                    }
                    break;
                }
            }
        }
        // And getpages: those whose directory node is a silent member stay in flight.
        let mut gets = 0;
        for i in 0..n {
            let Some(reply_to) = c.node.host.solicit() else { break };
            let page = crate::tpz::gms::prelude::PageId::new(0xdead, i as u64);
            if c.node.getpage(now_ns(), &mut c.rpc, page, reply_to, Mode::NonBlocking).is_err() {
                if let Some(f) = reply_to.caller_frame() {
                    c.node.host.release(*f);
                }
                break;
            }
            gets += 1;
        }
        pr_info!("left {} echo calls to silent node {} and {} getpages in flight\n", issued, SILENT_NODE, gets);
        c.flush()
    };
    if sent {
        nic.ring_nic();
    }
}
