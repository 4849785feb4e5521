//! `libslubmalloc.so`, the LD_PRELOAD library: with the `override` feature
//! the allocator crate exports the C malloc family (`src/ffi.rs`), and this
//! cdylib carries those symbols. It adds no code of its own.

// Links the allocator crate, whose `#[no_mangle]` entry points the cdylib exports.
pub use allocator::SlubMalloc;
