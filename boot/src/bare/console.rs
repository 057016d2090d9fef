//! The text console both architectures share: `core::fmt` output on the
//! UART `serial::COM1` (x86_64: 16550 on COM1; aarch64: the PL011), with
//! `\n` sent as `\r\n`, and the `print!`/`println!` macros over it.

use super::serial;

/// `core::fmt` sink for `serial::COM1` that turns `\n` into `\r\n`.
pub struct Console;

impl core::fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for part in s.split_inclusive('\n') {
            match part.strip_suffix('\n') {
                Some(line) => {
                    serial::write_bytes(serial::COM1, line.as_bytes());
                    serial::write_bytes(serial::COM1, b"\r\n");
                }
                None => serial::write_bytes(serial::COM1, part.as_bytes()),
            }
        }
        Ok(())
    }
}

/// Prints to the console UART.
macro_rules! print {
    ($($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::bare::console::Console, format_args!($($arg)*));
    }};
}

/// Prints a line to the console UART.
macro_rules! println {
    () => { $crate::bare::console::print!("\n") };
    ($($arg:tt)*) => {{
        $crate::bare::console::print!($($arg)*);
        $crate::bare::console::print!("\n");
    }};
}

pub(crate) use {print, println};
