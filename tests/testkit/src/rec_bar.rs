//! A `Bar` that reads zero and records every 32-bit write, for runners that
//! compare the doorbell and arming writes a piece of the driver makes.

use std::cell::RefCell;

use irdma_hal::Bar;

/// See the module docs.
#[derive(Debug, Default)]
pub struct RecBar {
    writes: RefCell<Vec<(usize, u32)>>,
}

impl RecBar {
    /// The `(offset, value)` writes recorded since the last call, in order.
    pub fn take(&self) -> Vec<(usize, u32)> {
        std::mem::take(&mut *self.writes.borrow_mut())
    }
}

impl Bar for RecBar {
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, offset: usize, value: u32) {
        self.writes.borrow_mut().push((offset, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_writes_in_order_and_take_empties() {
        let b = RecBar::default();
        b.write32(8, 1);
        b.write32(4, 2);
        assert_eq!(b.read32(8), 0);
        assert_eq!(b.take(), vec![(8, 1), (4, 2)]);
        assert_eq!(b.take(), vec![]);
    }
}
