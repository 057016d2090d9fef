//! `Display` and `core::error::Error` for the hal's error types (kept
//! together so every error reads the same way).

use core::fmt;

use crate::dma::DmaError;
use crate::pci::BarError;

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DmaError::NoMemory => "no DMA memory left for the request",
            DmaError::NotShareable => "buffer cannot be made visible to the device",
        })
    }
}

impl core::error::Error for DmaError {}

impl fmt::Display for BarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BarError::BadIndex => "BAR index above 5, or a 64-bit BAR starting at slot 5",
            BarError::IoBar => "the BAR is an I/O BAR",
            BarError::NotImplemented => "the BAR is not implemented (sizes to zero)",
            BarError::BadType => "the BAR type bits are reserved",
        })
    }
}

impl core::error::Error for BarError {}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn every_error_formats() {
        let all: [&dyn core::error::Error; 6] = [
            &DmaError::NoMemory,
            &DmaError::NotShareable,
            &BarError::BadIndex,
            &BarError::IoBar,
            &BarError::NotImplemented,
            &BarError::BadType,
        ];
        for e in all {
            let s = e.to_string();
            assert!(!s.is_empty() && !s.contains("Error"), "{s:?}");
        }
        assert_eq!(DmaError::NoMemory.to_string(), "no DMA memory left for the request");
    }
}
