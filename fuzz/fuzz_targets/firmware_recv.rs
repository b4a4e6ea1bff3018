// SPDX-License-Identifier: GPL-2.0-only
//! libFuzzer entry point of the `firmware_recv` target (logic in `trapeze_fuzz::targets`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| trapeze_fuzz::targets::firmware_recv(data));
