// SPDX-License-Identifier: GPL-2.0-only
//! Firmware event logging: `log::error!`, `warn!`, `info!`, `debug!`, `trace!` take a defmt
//! format string (`"bad token in slot {=u32}"`) and arguments.
//!
//! In the riscv32 image (feature `defmt`, which `image` enables) they are defmt's macros,
//! sent through the image's global logger to the log FIFO. Everywhere else (host, sim,
//! tests) they expand to nothing: the arguments are type-checked but never evaluated, and
//! defmt is not even a dependency, so the host build pays nothing.

// The macros are named `log_*` and re-exported as `log::*`: a macro named `warn` would be
// ambiguous with the built-in attribute at its definition site.
#[cfg(all(feature = "defmt", target_arch = "riscv32"))]
#[allow(unused_macros, unused_imports)]
mod imp {
    macro_rules! log_error { ($($t:tt)*) => { ::defmt::error!($($t)*) }; }
    macro_rules! log_warn { ($($t:tt)*) => { ::defmt::warn!($($t)*) }; }
    macro_rules! log_info { ($($t:tt)*) => { ::defmt::info!($($t)*) }; }
    macro_rules! log_debug { ($($t:tt)*) => { ::defmt::debug!($($t)*) }; }
    macro_rules! log_trace { ($($t:tt)*) => { ::defmt::trace!($($t)*) }; }
    pub(crate) use {log_debug as debug, log_error as error, log_info as info, log_trace as trace, log_warn as warn};
}

#[cfg(not(all(feature = "defmt", target_arch = "riscv32")))]
#[allow(unused_macros, unused_imports)]
mod imp {
    /// Accepts `fmt, args…` like defmt and does nothing; `if false` keeps the arguments
    /// type-checked (and "used") without evaluating them.
    macro_rules! nothing {
        ($fmt:literal $(, $arg:expr)* $(,)?) => {{
            if false {
                $( let _ = &$arg; )*
            }
        }};
    }
    macro_rules! log_error { ($($t:tt)*) => { $crate::log::nothing!($($t)*) }; }
    macro_rules! log_warn { ($($t:tt)*) => { $crate::log::nothing!($($t)*) }; }
    macro_rules! log_info { ($($t:tt)*) => { $crate::log::nothing!($($t)*) }; }
    macro_rules! log_debug { ($($t:tt)*) => { $crate::log::nothing!($($t)*) }; }
    macro_rules! log_trace { ($($t:tt)*) => { $crate::log::nothing!($($t)*) }; }
    pub(crate) use {
        log_debug as debug, log_error as error, log_info as info, log_trace as trace, log_warn as warn, nothing,
    };
}

#[allow(unused_imports)]
pub(crate) use imp::*;

#[cfg(test)]
mod tests {
    #[test]
    fn log_macros_compile_and_do_not_evaluate() {
        let mut evaluated = false;
        let mut touch = || {
            evaluated = true;
            1u32
        };
        crate::log::warn!("bad token in slot {=u32}", touch());
        crate::log::info!("plain message");
        crate::log::debug!("two {=u32} {=u8}", 1u32, 2u8,);
        assert!(!evaluated);
    }
}
