//! Tests that read the repository's files and run no program: the module
//! layers that `ARCHITECTURE.md` declares, the README's environment table
//! and usage example, and the paths that docs and comments cite.

mod layers;
mod paths;
mod readme;
