//! A reader of structured values from the fuzzer's bytes. Every read succeeds: past the
//! end it yields zeros, so any input, however short, is a complete description (the
//! fuzzer's mutations then extend it), and [`Input::is_empty`] tells a loop to stop.

/// The unread rest of an input.
#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0; N];
        for b in &mut a {
            *b = self.u8();
        }
        a
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub(crate) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_then_zeros() {
        let mut i = Input::new(&[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(i.u8(), 1);
        assert_eq!(i.u16(), 0x0203);
        assert_eq!(i.bytes(2), &[4, 5]);
        assert!(!i.is_empty());
        assert_eq!(i.u32(), 0x0607_0000, "the missing bytes read as zeros");
        assert!(i.is_empty());
        assert_eq!(i.bytes(3), &[] as &[u8]);
        assert_eq!(i.array::<2>(), [0, 0]);
    }
}
