// SPDX-License-Identifier: GPL-2.0-only
//! The engines' side of the link-level echo ([`crate::echo`]): queued probes sent, echo
//! requests answered, replies traced.

use super::SoftEngines;
use crate::echo::{EchoRepr, Handled};
use crate::trace::{EventLog, Kind};

/// Echo packets [`SoftEngines::link_rx_status`] handles per call at most before it lets
/// the firmware run again (a flood of echoes cannot hold the processor in the engine).
pub(super) const ECHOES_PER_POLL: usize = 16;

/// What one receive from the link brought.
pub(super) enum Received {
    /// A packet for the firmware, written to its posted buffer: (bytes, good, held).
    Packet(usize, bool, bool),
    /// An echo packet, handled by the NIC.
    Echo(Handled),
}

impl SoftEngines {
    /// Send the echo requests queued since the last call (`trapeze-nic ping`). Costs one
    /// atomic load, inlined into the engine's poll, when none is (nearly always: this runs
    /// on every receive poll).
    #[inline]
    pub(super) fn send_queued_probes(&mut self) {
        if self.stats.echo.any_queued() {
            self.send_probes_now();
        }
    }

    #[cold]
    fn send_probes_now(&mut self) {
        let mut out: Vec<EchoRepr> = Vec::new();
        self.stats.echo.take_queued(self.link.node(), &mut out);
        if out.is_empty() {
            return;
        }
        self.idle_since = None;
        for r in &out {
            if let Some(log) = self.trace.as_mut() {
                log.record(Kind::PingTx, r.dst, r.seq, 0, false);
            }
            // Send errors and unroutable nodes are counted by the link: the ping's
            // summary reads them from the link statistics published below.
            let _ = self.link.send_packet(&r.emit(), false);
        }
        self.publish_link_stats();
    }

    /// An echo packet was received and [`crate::echo::EchoBoard::handle_packet`] decided
    /// (and [`echo_traced`] traced it): send the reply to a request.
    pub(super) fn echo_handled(&mut self, h: Handled) {
        self.idle_since = None;
        match h {
            Handled::Answer(reply) => {
                let _ = self.link.send_packet(&reply.emit(), false);
            }
            Handled::Matched { .. } => {
                self.stats.echo.wake_waiters();
                self.publish_link_stats();
            }
            Handled::Dropped => {}
        }
    }
}

/// Trace a received echo packet as it is handled (while the link still lends it: the
/// time is the one the round trip was taken at).
pub(super) fn echo_traced(log: &mut EventLog, h: &Handled) {
    match *h {
        Handled::Answer(reply) => log.record(Kind::EchoRx, reply.dst, reply.seq, 0, false),
        Handled::Matched { peer, seq } => log.record(Kind::PingRx, peer, seq, 0, false),
        Handled::Dropped => {}
    }
}
