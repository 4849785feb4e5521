//! The barns: per class, a few full sheaves that no thread holds (Linux's
//! per-node barn). A thread whose sheaf fills puts it in the barn whole
//! instead of flushing it back to the slabs; a thread whose sheaf and
//! detached list are empty takes one before it carves more of its active
//! slab. So blocks that one thread frees serve another's allocations with
//! no trip through their slabs, and a thread that allocates what others free
//! touches no fresh pages. Bounded (`BARN_SHEAVES` per class); a thread's
//! exit, `trim()` and every purge flush the barns back to the slabs
//! (`free::flush_barns`).

use core::cell::Cell;
use core::ptr;

use crate::size_class::{NUM_CLASSES, SHEAF_MAX};
use crate::sync::{AtomicU32, Locked, Ordering};

/// Full sheaves a class's barn holds: at most 8 x 16 KiB of blocks per
/// class (Linux keeps at most 10 full and 10 empty per node).
pub const BARN_SHEAVES: usize = 8;

struct Shelves {
    blocks: [[*mut u8; SHEAF_MAX]; BARN_SHEAVES],
    lens: [u32; BARN_SHEAVES],
    full: usize,
}

// SAFETY: the raw pointers are blocks no thread holds, reached only under
// the barn's lock.
unsafe impl Send for Shelves {}

/// One class's barn.
pub struct Barn {
    shelves: Locked<Shelves>,
    /// The full sheaves in the barn, written under the lock, read without
    /// it to skip the lock when there is nothing to take or no room.
    full: AtomicU32,
}

/// Per class; all zeros until a class's barn is first used (no page of it
/// is resident before).
pub static BARNS: [Barn; NUM_CLASSES] = [const { Barn::new() }; NUM_CLASSES];

impl Barn {
    const fn new() -> Barn {
        Barn {
            shelves: Locked::new(Shelves {
                blocks: [[ptr::null_mut(); SHEAF_MAX]; BARN_SHEAVES],
                lens: [0; BARN_SHEAVES],
                full: 0,
            }),
            full: AtomicU32::new(0),
        }
    }

    /// Takes the blocks of `sheaf` (a full sheaf's, all tagged) as one full
    /// sheaf; false, with nothing taken, if the barn has no room.
    pub fn put(&self, sheaf: &[Cell<*mut u8>]) -> bool {
        // Relaxed: a hint; the lock orders what it guards.
        if self.full.load(Ordering::Relaxed) as usize >= BARN_SHEAVES {
            return false;
        }
        self.shelves.with(|s| {
            if s.full == BARN_SHEAVES {
                return false;
            }
            for (shelf, b) in s.blocks[s.full].iter_mut().zip(sheaf) {
                *shelf = b.get();
            }
            s.lens[s.full] = sheaf.len() as u32;
            s.full += 1;
            self.full.store(s.full as u32, Ordering::Relaxed);
            true
        })
    }

    /// Moves the blocks of the last full sheaf put, or as many of them as
    /// `into` has room for (a sheaf smaller than the one put: the rest stay
    /// in the barn), into `into` (from its start); returns how many, 0 if
    /// the barn is empty.
    pub fn take(&self, into: &[Cell<*mut u8>]) -> u32 {
        // Relaxed: as in `put`.
        if self.full.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.shelves.with(|s| {
            if s.full == 0 {
                return 0;
            }
            let top = s.full - 1;
            let len = s.lens[top] as usize;
            let n = len.min(into.len());
            for (slot, &b) in into.iter().zip(&s.blocks[top][len - n..len]) {
                slot.set(b);
            }
            s.lens[top] = (len - n) as u32;
            if len == n {
                s.full = top;
                self.full.store(s.full as u32, Ordering::Relaxed);
            }
            n as u32
        })
    }

    /// Blocks in the barn (the verification walk).
    pub fn blocks(&self) -> u64 {
        self.shelves
            .with(|s| s.lens[..s.full].iter().map(|&n| n as u64).sum())
    }

    /// In a forked child whose parent had other threads, if one of them
    /// held the lock: the barn may be half written, so it is emptied (its
    /// blocks are leaked, never handed out twice) and the lock freed.
    pub fn repair_in_child(&self) {
        if !self.shelves.lock.is_locked() {
            return;
        }
        // SAFETY: the child runs one thread, and the thread that held the
        // lock is gone.
        unsafe { (*self.shelves.data_ptr()).full = 0 };
        self.full.store(0, Ordering::Relaxed);
        self.shelves.lock.reset_in_child();
    }
}

/// `Barn::repair_in_child` for every class.
pub fn repair_in_child() {
    BARNS.iter().for_each(Barn::repair_in_child);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sheaf(first: usize, n: usize) -> Vec<Cell<*mut u8>> {
        (first..first + n)
            .map(|i| Cell::new((i * 16) as *mut u8))
            .collect()
    }

    /// A barn takes whole sheaves up to its bound, refuses the next, and
    /// hands back the last one put, each with its own length; what it
    /// holds is counted.
    #[test]
    fn a_barn_holds_whole_sheaves_up_to_its_bound() {
        let barn = Barn::new();
        let into = sheaf(0, SHEAF_MAX);
        assert_eq!(barn.take(&into), 0, "an empty barn hands out nothing");
        for k in 0..BARN_SHEAVES {
            assert!(barn.put(&sheaf(1000 * (k + 1), k + 1)), "sheaf {k} refused");
        }
        let held = (1..=BARN_SHEAVES as u64).sum::<u64>();
        assert_eq!(barn.blocks(), held);
        assert!(!barn.put(&sheaf(99_000, 4)), "a full barn took a sheaf");
        assert_eq!(barn.blocks(), held, "a refused sheaf changed the count");
        for k in (0..BARN_SHEAVES).rev() {
            let n = barn.take(&into) as usize;
            assert_eq!(n, k + 1);
            let got: Vec<_> = into[..n].iter().map(Cell::get).collect();
            let put: Vec<_> = sheaf(1000 * (k + 1), k + 1).iter().map(Cell::get).collect();
            assert_eq!(got, put, "sheaf {k} came back changed");
        }
        assert_eq!(barn.blocks(), 0);
        assert_eq!(barn.take(&into), 0);
    }
}
