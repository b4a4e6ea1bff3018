// SPDX-License-Identifier: GPL-2.0-only
//! Shared helpers for the cross-crate tests in `tests/`.
