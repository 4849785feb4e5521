//! The barns: per class, a few full sheaves that no thread holds (Linux's
//! per-node barn). A thread whose sheaf fills puts it in the barn whole
//! instead of flushing it back to the slabs; a thread whose sheaf and
//! detached list are empty takes one before it carves more of its active
//! slab. So blocks that one thread frees serve another's allocations with
//! no trip through their slabs, and a thread that allocates what others free
//! touches no fresh pages. Bounded (`BARN_SHEAVES` shelves per class, each
//! of up to the class's most sheaf, `size_class::SHEAF_CAP`: sheaves
//! smaller than that, sized by their threads' demand, share a shelf); a
//! thread's
//! exit, `trim()` and every purge flush the barns back to the slabs
//! (`sheaf::flush_barns`).

use core::cell::Cell;
use core::ptr;

use crate::size_class::{NUM_CLASSES, SHEAF_MAX};
use crate::sync::{invariant, AtomicU32, Locked, Ordering};

/// Shelves a class's barn holds, each of up to the class's most sheaf (32
/// blocks and 16 KiB, or one block): at most 8 x 16 KiB of blocks per class
/// (Linux keeps at most 10 full sheaves and 10 empty per node).
pub const BARN_SHEAVES: usize = 8;

struct Shelves {
    blocks: [[*mut u8; SHEAF_MAX]; BARN_SHEAVES],
    lens: [u32; BARN_SHEAVES],
    /// The shelves in use, the first ones.
    in_use: usize,
}

// SAFETY: the raw pointers are blocks no thread holds, reached only under
// the barn's lock.
unsafe impl Send for Shelves {}

/// One class's barn.
pub struct Barn {
    shelves: Locked<Shelves>,
    /// The shelves in use, written under the lock, read without it to skip
    /// the lock when there is nothing to take.
    shelves_in_use: AtomicU32,
    /// Nonzero when every shelf is in use and the last is full, written
    /// under the lock, read without it to skip the lock when there is no
    /// room.
    no_room: AtomicU32,
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
                in_use: 0,
            }),
            shelves_in_use: AtomicU32::new(0),
            no_room: AtomicU32::new(0),
        }
    }

    /// Takes the blocks of `sheaf` (a full sheaf's, all tagged): on top of
    /// the last shelf if it then holds at most `shelf_max` blocks (the
    /// class's `SHEAF_CAP`), else on a shelf of their own; false, with
    /// nothing taken, if the barn has no room.
    pub fn put(&self, sheaf: &[Cell<*mut u8>], shelf_max: usize) -> bool {
        invariant!(!sheaf.is_empty() && sheaf.len() <= shelf_max && shelf_max <= SHEAF_MAX);
        // Relaxed: a hint; the lock orders what it guards.
        if self.no_room.load(Ordering::Relaxed) != 0 {
            return false;
        }
        self.shelves.with(|s| {
            let on_top = s.in_use != 0 && s.lens[s.in_use - 1] as usize + sheaf.len() <= shelf_max;
            if !on_top {
                if s.in_use == BARN_SHEAVES {
                    let last_full = s.lens[s.in_use - 1] as usize >= shelf_max;
                    self.no_room.store(last_full as u32, Ordering::Relaxed);
                    return false;
                }
                s.lens[s.in_use] = 0;
                s.in_use += 1;
                self.shelves_in_use
                    .store(s.in_use as u32, Ordering::Relaxed);
            }
            let top = s.in_use - 1;
            let len = s.lens[top] as usize;
            for (shelf, b) in s.blocks[top][len..].iter_mut().zip(sheaf) {
                *shelf = b.get();
            }
            s.lens[top] = (len + sheaf.len()) as u32;
            true
        })
    }

    /// Moves the blocks of the last shelf, or as many of its newest as
    /// `into` has room for (the rest stay in the barn), into `into` (from
    /// its start); returns how many, 0 if the barn is empty.
    pub fn take(&self, into: &[Cell<*mut u8>]) -> u32 {
        // Relaxed: as in `put`.
        if self.shelves_in_use.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.shelves.with(|s| {
            if s.in_use == 0 {
                return 0;
            }
            let top = s.in_use - 1;
            let len = s.lens[top] as usize;
            let n = len.min(into.len());
            for (slot, &b) in into.iter().zip(&s.blocks[top][len - n..len]) {
                slot.set(b);
            }
            s.lens[top] = (len - n) as u32;
            if len == n {
                s.in_use = top;
                self.shelves_in_use
                    .store(s.in_use as u32, Ordering::Relaxed);
            }
            self.no_room.store(0, Ordering::Relaxed);
            n as u32
        })
    }

    /// Blocks in the barn (the verification walk).
    pub fn blocks(&self) -> u64 {
        self.shelves
            .with(|s| s.lens[..s.in_use].iter().map(|&n| n as u64).sum())
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
        unsafe { (*self.shelves.data_ptr()).in_use = 0 };
        self.shelves_in_use.store(0, Ordering::Relaxed);
        self.no_room.store(0, Ordering::Relaxed);
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

    /// A barn keeps sheaves on shelves of up to `shelf_max` blocks, a
    /// sheaf on top of the last shelf where it fits, else on a new shelf
    /// up to its bound, and refuses the next; a take hands back the newest
    /// blocks of the last shelf, as many as the taker's sheaf holds; what
    /// it holds is counted.
    #[test]
    fn a_barn_shelves_sheaves_up_to_its_bound() {
        let barn = Barn::new();
        let into = sheaf(0, SHEAF_MAX);
        let addrs = |cells: &[Cell<*mut u8>]| cells.iter().map(Cell::get).collect::<Vec<_>>();
        assert_eq!(barn.take(&into), 0, "an empty barn hands out nothing");
        // Sheaves of 8: four to a shelf of 32.
        for k in 0..4 * BARN_SHEAVES {
            assert!(barn.put(&sheaf(1000 * (k + 1), 8), 32), "sheaf {k} refused");
        }
        assert_eq!(barn.blocks(), (32 * BARN_SHEAVES) as u64);
        assert!(!barn.put(&sheaf(99_000, 1), 32), "a full barn took a sheaf");
        assert_eq!(
            barn.blocks(),
            (32 * BARN_SHEAVES) as u64,
            "a refused sheaf changed the count"
        );
        // A taker of 12 gets the last sheaf put and the newest 4 of the one
        // before; then the rest of the shelf.
        assert_eq!(barn.take(&into[..12]), 12);
        let last = 4 * BARN_SHEAVES;
        let mut want = addrs(&sheaf(1000 * (last - 1) + 4, 4));
        want.extend(addrs(&sheaf(1000 * last, 8)));
        assert_eq!(addrs(&into[..12]), want);
        assert_eq!(barn.take(&into), 20);
        assert_eq!(barn.blocks(), (32 * (BARN_SHEAVES - 1)) as u64);
        // A shelf of a class whose most sheaf is one block holds one.
        let one = Barn::new();
        assert!(one.put(&sheaf(5000, 1), 1));
        assert!(one.put(&sheaf(6000, 1), 1));
        assert_eq!(one.take(&into), 1);
        assert_eq!(one.take(&into), 1);
        assert_eq!(one.take(&into), 0);
    }
}
