// SPDX-License-Identifier: GPL-2.0-only
//! The plugin's entry point, `plugin_init`: the one symbol nbdkit looks up in the shared
//! object. The `nbdkit` crate's `plugin!` macro writes it (an unmangled `extern` function
//! returning the callback table for [`Export`]); the `unsafe` behind it — C strings, the
//! handle pointers nbdkit passes back — is in that crate, so this module only allows the
//! `no_mangle` the macro emits.

#![allow(unsafe_code)]

use crate::Export;

nbdkit::plugin!(Export {
    config,
    config_complete,
    after_fork,
    thread_model,
    write_at,
    flush,
    trim,
    can_write,
    can_flush,
    can_trim,
    can_fua,
    can_multi_conn
});
