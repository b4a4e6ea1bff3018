// SPDX-License-Identifier: GPL-2.0-only
//! The deterministic simulation the protocol tests share: one seeded generator, one
//! simulated network, one virtual clock, and on top of them the simulated GMS cluster and
//! its history checker. A dev-dependency only: nothing here runs outside tests.
//!
//! # Parts
//!
//! - [`rng::Rng`]: splitmix64. Every random choice of a scenario comes from it; a
//!   scenario is a function of its seed. Independent sources of choices take independent
//!   streams of one seed ([`rng::Rng::new`]`(seed, stream)`), so that new draws in one
//!   (a new fault) leave the others' sequences, and the scenarios they make, unchanged.
//! - [`net::Net`]: messages between node ids, with per-message latency, loss,
//!   duplication (the copy reaches the receiving protocol as a second message; the link's
//!   reassembler, which drops back-to-back copies, is not modelled), reordering, and
//!   partitions that heal. It owns no generator: each call takes the scenario's
//!   [`rng::Rng`], and the module doc lists the draws in order. A test may hold back,
//!   take or inject packets through [`net::Net::queue_mut`].
//! - [`clock::Clock`]: simulated time. A driver steps it, or jumps it to the earliest of
//!   the cores' `poll_timeout()`s and the network's next arrival.
//! - [`gms`]: 3–5 nodes, each a `GmsNode` and its NetRPC `Rpc`, over a [`net::Net`] on a
//!   [`clock::Clock`]; the harness plays every runtime (frames, the NIC's payload table).
//!   Faults: the network's, crash and restart of any node (a new incarnation that
//!   rejoins), false suspicion (a live node declared failed keeps its state and is heard
//!   again). Every operation and fault goes into a [`gms::history::History`], which
//!   [`gms::history::check`] judges.
//!
//! # Replaying a seed
//!
//! A scenario derives every choice from its seed, so the seed a failure prints replays it
//! exactly: same plan, same faults, same interleaving. The GMS history checker prints a
//! ready line, e.g. `GMS_HISTORY_SEED="0x… short moves" cargo test -p trapeze-gms --test
//! history replay -- --ignored --nocapture` (`GMS_TRACE=1` prints every message). Stream
//! 0 of a seed is the seed itself, the sequence the simulators drew before they shared
//! this crate, so seeds recorded then still replay.
//!
//! ```
//! use sim::clock::Clock;
//! use sim::net::{Fate, Faults, Net};
//! use sim::rng::Rng;
//!
//! let mut rng = Rng::new(0x5eed, 0);
//! let mut clock = Clock::new();
//! let faults = Faults { loss_pct: 10, dup_pct: 10, reorder: true, latency: (1, 5) };
//! let mut net = Net::new(faults);
//! for m in 0..100u32 {
//!     net.send(&mut rng, clock.now(), 0, 1, m);
//! }
//! let mut arrived = 0;
//! while !net.is_empty() {
//!     clock.jump([net.poll_timeout()], 1000);
//!     while let Some(d) = net.poll(&mut rng, clock.now(), true) {
//!         arrived += u32::from(d.fate == Fate::Arrives);
//!     }
//! }
//! let s = net.stats();
//! assert_eq!(s.arrived + s.lost, s.sent + s.duplicated);
//! assert_eq!(u64::from(arrived), s.arrived);
//! ```

pub mod clock;
pub mod gms;
pub mod net;
pub mod rng;
