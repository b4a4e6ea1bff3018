// SPDX-License-Identifier: GPL-2.0-only
//! The deterministic simulation the protocol tests share: one seeded generator
//! ([`rng`]), a lossy network ([`net`]) and a virtual clock ([`clock`]).
pub mod clock;
pub mod gms;
pub mod net;
pub mod rng;
