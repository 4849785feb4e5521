//! The sampled heap profile (`SLUBMALLOC_PROF=1`), one concern in four
//! files, each at its own layer (`ARCHITECTURE.md`): `unwind` captures call
//! stacks, `table` keeps the stacks and the live samples, `write` writes
//! the profile's file, `sample` takes the samples on the allocation paths.
//! This file only declares them.

pub(crate) mod sample;
pub(crate) mod table;
pub(crate) mod unwind;
pub(crate) mod write;
