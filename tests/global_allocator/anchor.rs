//! The anchor that slubtop reads from outside (src/anchor.rs), seen from
//! inside: its header, and the registry generation it names, which every
//! thread start and exit steps by two (odd while the registry changes), so
//! that a reader in another process can tell that its reads of the live
//! heaps and the retired totals saw no thread come or go half-way.

use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    /// 344 bytes (version 5), of which the first 248 are read here; the
    /// generation's address at byte 48.
    #[link_name = "slubmalloc_anchor"]
    static ANCHOR: [u64; 31];
}

fn generation() -> u64 {
    // SAFETY: the anchor is a constant static of the allocator; word 6 is
    // the address of the registry generation, a static AtomicU64.
    unsafe {
        let g = ANCHOR[6] as *const AtomicU64;
        // Acquire: pairs with `change_registry`'s Release store of the even
        // value, as slubtop's first read does.
        (*g).load(Ordering::Acquire)
    }
}

#[test]
fn anchor_names_its_layout_and_the_registry_generation() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // SAFETY: as in `generation`.
    let header = unsafe { ANCHOR[0].to_le_bytes() };
    assert_eq!(&header, b"SLUBANCH");
    // SAFETY: as above; word 1 is the version and the anchor's size.
    let (version, bytes) = unsafe { (ANCHOR[1] as u32, (ANCHOR[1] >> 32) as u32) };
    assert_eq!((version, bytes), (5, 344));

    let before = generation();
    assert_eq!(before % 2, 0, "no thread is starting or exiting");
    std::thread::spawn(|| drop(std::hint::black_box(vec![1u8; 100])))
        .join()
        .unwrap();
    // The thread's heap was linked in (one change), its counters retired
    // and the heap pooled at its exit (another).
    assert_eq!(generation(), before + 4);
}
