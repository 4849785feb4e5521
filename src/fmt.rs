//! Formatting without allocating: a fixed stack buffer (`os::FdWriter` is
//! the sink that flushes one to a file descriptor).

use core::fmt;

/// A fixed-capacity byte buffer; text past the capacity is dropped.
pub struct FixedBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> Self {
        FixedBuf {
            buf: [0; N],
            len: 0,
        }
    }

    pub fn push_str(&mut self, s: &str) {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
    }

    pub fn push_hex(&mut self, v: u64) {
        self.push_radix(v, 16);
    }

    pub fn push_dec(&mut self, v: u64) {
        self.push_radix(v, 10);
    }

    /// `v` in base `radix` (at most 16), most significant digit first.
    fn push_radix(&mut self, v: u64, radix: u64) {
        let mut digits = [0u8; 64];
        let mut n = 0;
        let mut x = v;
        loop {
            digits[n] = b"0123456789abcdef"[(x % radix) as usize];
            n += 1;
            x /= radix;
            if x == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            if self.len < N {
                self.buf[self.len] = digits[n];
                self.len += 1;
            }
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> fmt::Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_str(s);
        Ok(())
    }
}
