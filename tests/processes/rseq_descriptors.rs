//! The restartable sequences' descriptors of the preload library as built
//! (its `__rseq_cs` section, src/cpu_sheaf/sections.rs), read from the file:
//! the kernel kills a process whose abort address is not preceded by the
//! signature glibc registered, or lies inside its section.

use std::collections::BTreeMap;
use std::process::Command;

use crate::common;

fn readelf(args: &[&str], lib: &std::path::Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(lib)
        .output()
        .expect("run readelf");
    assert!(
        out.status.success(),
        "readelf {args:?}: {}",
        common::stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The section headers: name -> (address, file offset, size); address 0
/// for those not loaded.
fn sections(lib: &std::path::Path) -> BTreeMap<String, (u64, u64, u64)> {
    let mut found = BTreeMap::new();
    for line in readelf(&["-S", "-W"], lib).lines() {
        // "  [16] __rseq_failure    PROGBITS  0000000000028883 027883 00003c 00 ..."
        let Some(rest) = line.trim_start().strip_prefix('[') else {
            continue;
        };
        let fields: Vec<&str> = rest
            .split(']')
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.len() < 5 {
            continue;
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).ok();
        if let (Some(addr), Some(off), Some(size)) =
            (hex(fields[2]), hex(fields[3]), hex(fields[4]))
        {
            found.insert(fields[0].to_string(), (addr, off, size));
        }
    }
    found
}

/// Each descriptor: version 0, flags 0, an abort address outside [start,
/// start + post-commit offset) whose four bytes before are 0x53053053 (and
/// the three before those `ud1`'s opcode and modrm), and at least the three
/// sections the library has (a push, a pop, a capacity's growth).
#[test]
fn every_descriptor_of_the_preload_library_is_preceded_by_the_signature() {
    let lib = common::preload_lib();
    let bytes = std::fs::read(&lib).unwrap();
    let sections = sections(&lib);
    let &(cs_addr, cs_off, cs_size) = sections.get("__rseq_cs").expect("a __rseq_cs section");
    assert_eq!(cs_size % 32, 0);
    // The addresses are relative relocations (position-independent code):
    // their addends are the values.
    let mut relocated = BTreeMap::new();
    for line in readelf(&["-r", "-W"], &lib).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 4 && f[2] == "R_X86_64_RELATIVE" {
            let at = u64::from_str_radix(f[0], 16).unwrap();
            relocated.insert(at, u64::from_str_radix(f[3], 16).unwrap());
        }
    }
    let file_at = |addr: u64| -> usize {
        let (_, &(a, off, size)) = sections
            .iter()
            .find(|(_, &(a, _, size))| a != 0 && addr >= a && addr < a + size)
            .unwrap_or_else(|| panic!("{addr:#x} is in no section"));
        assert!(addr + 4 <= a + size);
        (off + addr - a) as usize
    };
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let count = cs_size / 32;
    assert!(count >= 3, "{count} descriptors");
    for d in 0..count {
        let (addr, off) = (cs_addr + 32 * d, (cs_off + 32 * d) as usize);
        assert_eq!((u32_at(off), u32_at(off + 4)), (0, 0), "version, flags");
        let start = relocated[&(addr + 8)];
        let post_commit = u64_at(off + 16);
        let abort = relocated[&(addr + 24)];
        assert!(post_commit > 0 && post_commit < 256, "{post_commit}");
        assert!(
            abort < start || abort >= start + post_commit,
            "abort inside"
        );
        let at = file_at(abort - 7);
        assert_eq!(
            &bytes[at..at + 3],
            &[0x0f, 0xb9, 0x3d],
            "ud1 before {abort:#x}"
        );
        assert_eq!(u32_at(at + 3), 0x5305_3053, "signature before {abort:#x}");
    }
}
