//! Just enough of ELF64 (little-endian) to find one symbol: the file is
//! mapped read-only, every offset read from it is bounds-checked (a file we
//! did not write may say anything), and the symbol is looked up in the
//! dynamic symbols (`.dynsym`, the preload library) and the static ones
//! (`.symtab`, an executable not stripped); for a stripped executable, the
//! anchor's own section is found by name.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const PAGE_MASK: u64 = 4095;

/// A mapped ELF64 little-endian file.
pub struct Elf {
    base: *const u8,
    len: usize,
}

impl Drop for Elf {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `open`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// The first loadable segment: where the file's mapping at offset
/// `file_offset` (page-aligned) puts virtual address `vaddr` (page-aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstLoad {
    pub file_offset: u64,
    pub vaddr: u64,
}

impl Elf {
    /// Maps `path`; None if it is not an ELF64 little-endian file.
    pub fn open(path: &Path) -> io::Result<Option<Elf>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len < 64 {
            return Ok(None);
        }
        // SAFETY: a fresh private read-only mapping of an open file.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let elf = Elf {
            base: base as *const u8,
            len,
        };
        // "\x7fELF", 64-bit, little-endian.
        if elf.bytes(0, 6) != Some(b"\x7fELF\x02\x01") {
            return Ok(None);
        }
        Ok(Some(elf))
    }

    fn bytes(&self, at: u64, n: u64) -> Option<&[u8]> {
        let end = at.checked_add(n)?;
        if end > self.len as u64 {
            return None;
        }
        // SAFETY: in bounds of the mapping, which lives as long as `self`.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(at as usize), n as usize) })
    }

    fn u16(&self, at: u64) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(at, 2)?.try_into().ok()?))
    }

    fn u32(&self, at: u64) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(at, 4)?.try_into().ok()?))
    }

    fn u64(&self, at: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(at, 8)?.try_into().ok()?))
    }

    /// The NUL-terminated string at `at`.
    fn cstr(&self, at: u64) -> Option<&[u8]> {
        let rest = self.bytes(at, (self.len as u64).checked_sub(at)?)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(&rest[..end])
    }

    /// Section headers: (offset of each header) for i in 0..shnum.
    fn sections(&self) -> impl Iterator<Item = u64> + '_ {
        let shoff = self.u64(40).unwrap_or(0);
        let entsize = self.u16(58).unwrap_or(0) as u64;
        let count = if shoff == 0 || entsize < 64 {
            0
        } else {
            self.u16(60).unwrap_or(0) as u64
        };
        (0..count).map(move |i| shoff + i * entsize)
    }

    fn section(&self, index: u64) -> Option<u64> {
        self.sections().nth(index as usize)
    }

    /// The virtual address and size of symbol `name`, defined in this file.
    pub fn symbol(&self, name: &str) -> Option<(u64, u64)> {
        for sh in self.sections() {
            let kind = self.u32(sh + 4)?;
            if kind != SHT_SYMTAB && kind != SHT_DYNSYM {
                continue;
            }
            let (offset, size, entsize) =
                (self.u64(sh + 24)?, self.u64(sh + 32)?, self.u64(sh + 56)?);
            let strings = self.section(self.u32(sh + 40)? as u64)?;
            let strings_at = self.u64(strings + 24)?;
            if entsize < 24 {
                continue;
            }
            for i in 0..size / entsize {
                let sym = offset + i * entsize;
                if self.u16(sym + 6)? == SHN_UNDEF {
                    continue;
                }
                let sym_name = self.cstr(strings_at + self.u32(sym)? as u64);
                if sym_name == Some(name.as_bytes()) {
                    return Some((self.u64(sym + 8)?, self.u64(sym + 16)?));
                }
            }
        }
        None
    }

    /// The virtual address and size of section `name`.
    pub fn section_named(&self, name: &str) -> Option<(u64, u64)> {
        let names = self.section(self.u16(62)? as u64)?;
        let names_at = self.u64(names + 24)?;
        self.sections().find_map(|sh| {
            let n = self.cstr(names_at + self.u32(sh)? as u64)?;
            (n == name.as_bytes()).then(|| Some((self.u64(sh + 16)?, self.u64(sh + 32)?)))?
        })
    }

    /// The loadable segment with the lowest address, page-aligned: the
    /// loader maps it first, so its mapping's start minus its `vaddr` is the
    /// load bias (0 for a fixed-address executable).
    pub fn first_load(&self) -> Option<FirstLoad> {
        let (phoff, entsize, count) = (self.u64(32)?, self.u16(54)? as u64, self.u16(56)? as u64);
        if entsize < 56 {
            return None;
        }
        (0..count)
            .map(|i| phoff + i * entsize)
            .filter(|&ph| self.u32(ph) == Some(PT_LOAD))
            .filter_map(|ph| Some((self.u64(ph + 16)?, self.u64(ph + 8)?)))
            .min()
            .map(|(vaddr, offset)| FirstLoad {
                file_offset: offset & !PAGE_MASK,
                vaddr: vaddr & !PAGE_MASK,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// slubtop's own executable has a symbol table with `main` in it, and a
    /// first loadable segment at file offset 0.
    #[test]
    fn finds_a_symbol_and_the_first_segment_of_our_own_executable() {
        let exe = std::env::current_exe().unwrap();
        let elf = Elf::open(&exe).unwrap().expect("our executable is ELF64");
        let (addr, _) = elf.symbol("main").expect("a symbol named main");
        assert!(addr != 0);
        assert!(elf.symbol("no_such_symbol_anywhere").is_none());
        assert_eq!(elf.first_load().unwrap().file_offset, 0);
        let (text, size) = elf.section_named(".text").expect(".text");
        assert!(text <= addr && addr < text + size, "main lies in .text");
    }

    #[test]
    fn a_file_that_is_not_elf_is_none() {
        let path = std::env::temp_dir().join(format!("slubtop-not-elf-{}", std::process::id()));
        std::fs::write(&path, vec![b'#'; 200]).unwrap();
        assert!(Elf::open(&path).unwrap().is_none());
        std::fs::remove_file(&path).unwrap();
    }
}
