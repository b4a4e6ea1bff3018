// SPDX-License-Identifier: GPL-2.0-only
//! libFuzzer entry point of the `ivshmem` target (logic in `trapeze_fuzz::targets`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| trapeze_fuzz::targets::ivshmem(data));
