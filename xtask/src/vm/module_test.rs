// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm module-test`: `trapeze.ko` in (at least) three guests.
//!
//! Builds `trapeze.ko` (`cargo xtask module`), boots the guests with it and
//! `kernel-crate/guest/ping.sh` as their script. First the ping: guest 0 loads it as node 0
//! and answers pings, every other guest K loads it as node K with `ping_peer=0`, which
//! sends node 0 a control message + 4 KB payload at load and checks the pong byte for
//! byte. Then NetRPC echo calls to node 0 and GMS put/get between the guests (guest 1 also
//! checks `/dev/gms0` on GMS), and an unload with calls and getpages in flight. It passes
//! when each guest's console shows the endpoint up, its side of the ping and of the later
//! phases, a clean `rmmod` (NIC halted, frames freed) whose link line names every refusal
//! of the link (MAC failures, replays, stale incarnations, forged trailers, …; none under
//! the run's key), the script's status 0, no oops/BUG/WARNING, and a clean power-off.

use super::report::{link_line_ok, rpc_phase_ok, yes_no, Mode};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/ping.sh";
/// Shortest power-off wait (boot, load, ping retries, unload).
const MIN_TIMEOUT: u64 = 120;

#[derive(clap::Args)]
pub struct ModuleTestArgs {
    /// Guests to boot, each with its own virtual NIC (all NICs on one UDP link); the
    /// NetRPC and GMS phases need three.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(3..=16))]
    guests: u16,
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: ModuleTestArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let setup = Setup { guests: a.guests, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let failures = s.report(true, |g| {
        // Three guests: ping, then NetRPC echo, GMS put/get between guests and an unload
        // with requests in flight.
        let (rpc_ok, rpc) = rpc_phase_ok(g.console, g.idx);
        eprintln!("guest {}: netrpc/gms phase: {rpc}", g.idx);
        // The unload names every refusal of the link, keyed as the run asked.
        let (link_ok, link) = link_line_ok(g.console, !a.common.no_key);
        eprintln!("guest {}: {} {link}", g.idx, if link_ok { "link line:" } else { "LINK LINE WRONG:" });
        let r = &g.report;
        let what = format!(
            "trapeze.ko up: {}; {}: {}; rmmod clean: {}; script status 0: {}; kernel quiet: {}",
            yes_no(r.trapeze_up),
            if g.idx == 0 { "answered a ping" } else { "pong verified" },
            yes_no(r.ping_ok),
            yes_no(r.trapeze_removed),
            yes_no(r.script_ok),
            yes_no(!r.kernel_trouble),
        );
        (r.ok(Mode::ModuleTest) && rpc_ok && link_ok, what)
    });
    s.finish(all_off, timeout, &failures, "module test", "module test passed")
}
