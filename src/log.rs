//! Crate-local logging macros.
//!
//! With the `defmt` feature they forward to `defmt`; without it they expand
//! to code that only type-checks its arguments, so the driver compiles to the
//! same logic either way and no formatting code is linked.

#[cfg(feature = "defmt")]
#[allow(unused_macros)]
macro_rules! log_at {
    ($lvl:ident, $($arg:tt)+) => { defmt::$lvl!($($arg)+) };
}

#[cfg(not(feature = "defmt"))]
#[allow(unused_macros)]
macro_rules! log_at {
    ($lvl:ident, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        $( let _ = &$arg; )*
    }};
}

/// Logs at error level.
#[allow(unused_macros)]
macro_rules! error { ($($arg:tt)+) => { log_at!(error, $($arg)+) }; }
/// Logs at warn level.
#[allow(unused_macros)]
macro_rules! warn { ($($arg:tt)+) => { log_at!(warn, $($arg)+) }; }
/// Logs at info level.
#[allow(unused_macros)]
macro_rules! info { ($($arg:tt)+) => { log_at!(info, $($arg)+) }; }
/// Logs at debug level.
#[allow(unused_macros)]
macro_rules! debug { ($($arg:tt)+) => { log_at!(debug, $($arg)+) }; }
/// Logs at trace level.
#[allow(unused_macros)]
macro_rules! trace { ($($arg:tt)+) => { log_at!(trace, $($arg)+) }; }
