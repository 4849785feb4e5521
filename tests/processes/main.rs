//! Every test here runs programs in processes of their own: C programs and
//! real programs (python3, sqlite3, git, gcc) with the preload library
//! (`libslubmalloc.so`, built once by `common::preload_lib`), and a Rust
//! program that has slubmalloc as its global allocator. A fresh process is
//! what each test needs (a fresh allocator, its own statistics, an abort that
//! must not take the harness with it), so the tests share one binary and may
//! run in parallel: this binary itself runs on the system allocator.

mod common;

mod background_purge;
mod build_commands;
mod demo;
mod freelist_order;
mod glibc_introspection;
mod heap_profile;
mod large_after_free;
mod large_guard;
mod misuse;
mod out_of_memory;
mod preload_contract;
mod preload_real_programs;
mod preload_threads;
mod rseq_descriptors;
mod secure_mode;
mod single_threaded;
mod slubtop;
mod stats_dump;
mod valgrind;
