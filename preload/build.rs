//! Builds the allocator's sources as the preload library (`slubmalloc_preload`:
//! the C malloc family exported, as with the library's `override` feature,
//! and no std in a build that aborts on a panic, src/preload.rs), and gives the
//! library a soname, as a shared library has: tools find a library by it,
//! valgrind among them (`valgrind --soname-synonyms=somalloc=*slubmalloc*`
//! replaces the malloc family of the object whose soname matches, so that
//! memcheck sees the heap).
fn main() {
    println!("cargo:rustc-cfg=slubmalloc_preload");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libslubmalloc.so");
}
