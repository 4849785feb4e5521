//! Blocks, their contents (a pattern from each block's key), and the
//! lock-free rings that hand blocks from one thread to another.

use super::*;

// ---------------------------------------------------------------------------
// Blocks and their contents

/// A live block of the model. An address rather than a pointer, so that it
/// crosses threads.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub addr: usize,
    pub size: usize,
    pub align: usize,
    /// The pattern's key; unique per block.
    pub key: u64,
}

/// splitmix64's finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The pattern's period, a prime: byte `b` of a block with key `k` is
/// `pattern()[(k + b) % PERIOD]`, wherever the block has been moved or
/// resized to, so two live blocks share their bytes only if their keys
/// agree modulo the period. Filling is a copy and checking a comparison
/// of slices (`memcpy`, `bcmp`): a fuzzer instruments every comparison in
/// Rust code, and a byte loop made checks most of a run's time.
pub(super) const PERIOD: usize = 65_521;
/// Contents are written and compared in runs of at most this many bytes.
pub(super) const RUN_BYTES: usize = 4096;

/// `PERIOD + RUN_BYTES` bytes of noise, repeating after `PERIOD`.
pub(super) fn pattern() -> &'static [u8] {
    static PATTERN: OnceLock<Box<[u8]>> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let period: Vec<u8> = (0..PERIOD as u64).map(|i| mix(i) as u8).collect();
        period.iter().chain(&period[..RUN_BYTES]).copied().collect()
    })
}

impl Block {
    pub fn layout(&self) -> Layout {
        Layout::from_size_align(self.size, self.align).unwrap()
    }

    pub fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// The pattern of bytes `lo..lo + len` (`len <= RUN_BYTES`).
    fn expected(&self, lo: usize, len: usize) -> &'static [u8] {
        let start = (self.key as usize % PERIOD + lo) % PERIOD;
        &pattern()[start..start + len]
    }

    /// Calls `f(offset, len)` for each kept run (at most `RUN_BYTES`) of
    /// bytes in `from..to`. Kept whatever the block's size: all of the first
    /// `FULL_BYTES`, then 64 bytes every `SAMPLE_BYTES`; and the last
    /// `TAIL_BYTES` of a block of `tail_of` bytes (clipped to `from..to`).
    fn for_each_kept(from: usize, to: usize, tail_of: usize, mut f: impl FnMut(usize, usize)) {
        let mut lo = from;
        while lo < to.min(FULL_BYTES) {
            let hi = (lo + RUN_BYTES).min(to).min(FULL_BYTES);
            f(lo, hi - lo);
            lo = hi;
        }
        let mut k = (from / SAMPLE_BYTES).max(1); // sample 0 lies in the head
        while k * SAMPLE_BYTES < to {
            let lo = (k * SAMPLE_BYTES).max(from);
            let hi = (k * SAMPLE_BYTES + 64).min(to);
            if lo < hi {
                f(lo, hi - lo);
            }
            k += 1;
        }
        let mut lo = tail_of.saturating_sub(TAIL_BYTES).max(from);
        while lo < tail_of.min(to) {
            let hi = (lo + RUN_BYTES).min(tail_of.min(to));
            f(lo, hi - lo);
            lo = hi;
        }
    }

    /// The bytes `lo..lo + len` of the live block.
    #[allow(clippy::mut_from_ref)]
    fn bytes(&self, lo: usize, len: usize) -> &mut [u8] {
        assert!(lo + len <= self.size);
        // SAFETY: inside the live block, which only its holder touches, and
        // the slice does not outlive the call that uses it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().add(lo), len) }
    }

    /// Writes the pattern into the kept bytes from `from` on, and into the
    /// whole tail (writing the pattern never makes the block inconsistent).
    pub fn fill(&self, from: usize) {
        let write =
            |lo: usize, len: usize| self.bytes(lo, len).copy_from_slice(self.expected(lo, len));
        Self::for_each_kept(from, self.size, 0, write);
        Self::for_each_kept(
            self.size.saturating_sub(TAIL_BYTES),
            self.size,
            self.size,
            write,
        );
    }

    /// Checks the kept bytes below `upto`, with the tail of a block of
    /// `tail_of` bytes (the block's size, or its size before a realloc).
    pub fn check(&self, upto: usize, tail_of: usize, when: &str) {
        Self::for_each_kept(0, upto, tail_of, |lo, len| {
            let got = self.bytes(lo, len);
            let want = self.expected(lo, len);
            if got != want {
                let i = (0..len).find(|&i| got[i] != want[i]).unwrap_or(0);
                self.differs(lo + i, got[i], want[i], when);
            }
        });
    }

    /// Checks the whole block (its kept bytes).
    pub fn check_all(&self, when: &str) {
        self.check(self.size, self.size, when)
    }

    /// Checks that the kept bytes are zero.
    pub fn check_zero(&self, when: &str) {
        static ZEROS: [u8; RUN_BYTES] = [0; RUN_BYTES];
        Self::for_each_kept(0, self.size, self.size, |lo, len| {
            let got = self.bytes(lo, len);
            if got != &ZEROS[..len] {
                let i = got.iter().position(|&b| b != 0).unwrap_or(0);
                self.differs(lo + i, got[i], 0, when);
            }
        });
    }

    #[cold]
    fn differs(&self, offset: usize, got: u8, want: u8, when: &str) -> ! {
        panic!("{when}: byte {offset} of {self:x?} is {got:#x}, not {want:#x}: contents changed")
    }
}

// ---------------------------------------------------------------------------
// Hand-offs: one lock-free single-producer single-consumer ring per ordered
// pair of threads, in fixed storage (a hand-off allocates nothing).

pub struct Ring {
    head: AtomicUsize,
    tail: AtomicUsize,
    slots: [UnsafeCell<MaybeUninit<Block>>; RING],
}

// SAFETY: a slot is written by the one producer before the Release store of
// `tail` that publishes it and read by the one consumer after the Acquire
// load that sees it; the producer reuses it only after the consumer's
// Release store of `head` says it was read.
unsafe impl Sync for Ring {}

impl Ring {
    pub const fn new() -> Ring {
        Ring {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            slots: [const { UnsafeCell::new(MaybeUninit::uninit()) }; RING],
        }
    }

    /// Producer side; false if the ring is full.
    pub fn push(&self, b: Block) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the consumer's Release store of `head`.
        if t - self.head.load(Ordering::Acquire) == RING {
            return false;
        }
        // SAFETY: the slot is not readable by the consumer (t >= head + 0
        // and not yet published) and we are the only producer.
        unsafe { (*self.slots[t % RING].get()).write(b) };
        // Release: publishes the slot; pairs with the Acquire in `pop`.
        self.tail.store(t + 1, Ordering::Release);
        true
    }

    /// Consumer side.
    pub fn pop(&self) -> Option<Block> {
        let h = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release store of `tail`.
        if h == self.tail.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: published by the producer (h < tail) and not yet released.
        let b = unsafe { (*self.slots[h % RING].get()).assume_init_read() };
        // Release: hands the slot back; pairs with the Acquire in `push`.
        self.head.store(h + 1, Ordering::Release);
        Some(b)
    }
}
