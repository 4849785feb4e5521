//! The process being watched: its memory, read with `process_vm_readv`
//! (the permission a debugger needs, and nothing is ever written); where
//! the allocator's anchor lies in it, from `/proc/PID/maps` and the ELF
//! symbols of each mapped file; its resident set; and the errors a reader
//! meets, each with what to do about it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::elf::Elf;

/// The anchor's symbol, and its section (for a stripped executable).
pub const ANCHOR_SYMBOL: &str = "slubmalloc_anchor";
const ANCHOR_SECTION: &str = ".slubmalloc.anchor";

#[derive(Debug)]
pub enum Error {
    /// No mapped file exports the anchor.
    NotSlubmalloc {
        pid: i32,
    },
    NoPermission {
        pid: i32,
    },
    /// No such process, or it exited (before or while we read it).
    Gone {
        pid: i32,
    },
    /// The anchor names another layout version than ours.
    Version {
        pid: i32,
        theirs: u32,
        ours: u32,
        file: PathBuf,
    },
    /// The anchor's header is not what version 1 lays out.
    BadAnchor {
        pid: i32,
        file: PathBuf,
        what: String,
    },
    /// Every try met counters or a registry that were changing.
    NoConsistentSnapshot {
        pid: i32,
        tries: u32,
        why: String,
    },
    Io {
        what: String,
        err: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotSlubmalloc { pid } => write!(
                f,
                "PID {pid} does not use slubmalloc: no file it has mapped exports \
                 `{ANCHOR_SYMBOL}` (start it with LD_PRELOAD=libslubmalloc.so, or use \
                 slubmalloc as a Rust program's #[global_allocator])"
            ),
            Error::NoPermission { pid } => write_no_permission(f, *pid),
            Error::Gone { pid } => write!(f, "PID {pid} does not exist (it has exited)"),
            Error::Version {
                pid,
                theirs,
                ours,
                file,
            } => write!(
                f,
                "PID {pid} uses a slubmalloc whose anchor has layout version {theirs} \
                 ({}); this slubtop reads version {ours}: use the slubtop built with \
                 that slubmalloc",
                file.display()
            ),
            Error::BadAnchor { pid, file, what } => write!(
                f,
                "PID {pid}: the slubmalloc anchor in {} is not readable: {what}",
                file.display()
            ),
            Error::NoConsistentSnapshot { pid, tries, why } => write!(
                f,
                "PID {pid}: no consistent snapshot in {tries} tries (last: {why})"
            ),
            Error::Io { what, err } => write!(f, "{what}: {err}"),
        }
    }
}

/// Which user we are, whose the process is, what Yama allows, what to do.
fn write_no_permission(f: &mut fmt::Formatter<'_>, pid: i32) -> fmt::Result {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let owner = process_uid(pid);
    write!(
        f,
        "no permission to read PID {pid} (a process of {}) as {}: reading another \
         process's memory needs the permission a debugger needs. ",
        owner.map_or("an unknown user".into(), user_name),
        user_name(me)
    )?;
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(scope) => {
            let scope = scope.trim();
            let meaning = match scope {
                "0" => "classic: any process of the same user",
                "1" => "restricted: only a process's ancestors, or CAP_SYS_PTRACE",
                "2" => "admin-only: CAP_SYS_PTRACE is needed",
                "3" => "no attach: nobody may, until reboot",
                _ => "unknown value",
            };
            write!(
                f,
                "/proc/sys/kernel/yama/ptrace_scope is {scope} ({meaning}). "
            )?;
        }
        Err(_) => write!(
            f,
            "/proc/sys/kernel/yama/ptrace_scope is absent (no Yama: the same user or \
             CAP_SYS_PTRACE). "
        )?,
    }
    write!(
        f,
        "Run slubtop as the process's user or with CAP_SYS_PTRACE (sudo slubtop {pid})"
    )
}

/// The process's real uid, from `/proc/PID/status` (readable by anyone).
fn process_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// "user NAME (uid N)", the name from /etc/passwd when it has one.
fn user_name(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|l| {
        let mut fields = l.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    });
    match name {
        Some(name) => format!("user {name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// Maps a failed system call on `pid` to our errors.
fn os_error(pid: i32, what: &str, err: io::Error) -> Error {
    match err.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => Error::Gone { pid },
        Some(libc::EPERM) | Some(libc::EACCES) => Error::NoPermission { pid },
        _ => Error::Io {
            what: format!("PID {pid}: {what}"),
            err,
        },
    }
}

/// One line of `/proc/PID/maps` that maps a file.
struct Mapping {
    start: u64,
    offset: u64,
    path: String,
}

pub struct Target {
    pub pid: i32,
}

/// Where the anchor is, and in which file.
pub struct Found {
    pub address: u64,
    pub file: PathBuf,
}

impl Target {
    /// Opens `pid`: it must exist and we must be allowed to read it.
    pub fn open(pid: i32) -> Result<Target, Error> {
        let t = Target { pid };
        // Opening maps checks the ptrace read permission, as reading does.
        std::fs::File::open(format!("/proc/{pid}/maps"))
            .map_err(|e| os_error(pid, "open /proc/PID/maps", e))?;
        Ok(t)
    }

    fn mappings(&self) -> Result<Vec<Mapping>, Error> {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
            .map_err(|e| os_error(self.pid, "read /proc/PID/maps", e))?;
        let mut out = Vec::new();
        for line in text.lines() {
            // start-end perms offset dev inode path
            let mut fields = line.splitn(6, ' ');
            let (Some(range), Some(_), Some(offset), Some(_), Some(_), Some(path)) = (
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
                fields.next(),
            ) else {
                continue;
            };
            let path = path.trim_start();
            if !path.starts_with('/') || path.ends_with(" (deleted)") {
                continue;
            }
            let start = range
                .split('-')
                .next()
                .and_then(|s| u64::from_str_radix(s, 16).ok());
            let offset = u64::from_str_radix(offset, 16).ok();
            if let (Some(start), Some(offset)) = (start, offset) {
                out.push(Mapping {
                    start,
                    offset,
                    path: path.to_string(),
                });
            }
        }
        Ok(out)
    }

    /// Finds the anchor: in each mapped ELF file (those named slubmalloc
    /// first, then the executable, then the rest), the symbol or, in a
    /// stripped file, the section; its address is the file's load bias (from
    /// its first mapping) plus the symbol's value.
    pub fn find_anchor(&self) -> Result<Found, Error> {
        let maps = self.mappings()?;
        if maps.is_empty() && self.exited() {
            return Err(Error::Gone { pid: self.pid });
        }
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid)).ok();
        let mut paths: Vec<&str> = Vec::new();
        for m in &maps {
            if !paths.contains(&m.path.as_str()) {
                paths.push(&m.path);
            }
        }
        let rank = |p: &str| {
            if Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("slubmalloc"))
            {
                0
            } else if exe.as_deref() == Some(Path::new(p)) {
                1
            } else {
                2
            }
        };
        paths.sort_by_key(|p| rank(p));
        for path in paths {
            // Through the process's root, so a process in a container is
            // read from its own files.
            let inside = PathBuf::from(format!("/proc/{}/root{path}", self.pid));
            let elf = match Elf::open(&inside).or_else(|_| Elf::open(Path::new(path))) {
                Ok(Some(elf)) => elf,
                _ => continue,
            };
            let Some((value, _)) = elf
                .symbol(ANCHOR_SYMBOL)
                .or_else(|| elf.section_named(ANCHOR_SECTION))
            else {
                continue;
            };
            let Some(first) = elf.first_load() else {
                continue;
            };
            let Some(mapped) = maps
                .iter()
                .filter(|m| m.path == path && m.offset == first.file_offset)
                .map(|m| m.start)
                .min()
            else {
                continue;
            };
            let bias = mapped.wrapping_sub(first.vaddr);
            return Ok(Found {
                address: bias.wrapping_add(value),
                file: PathBuf::from(path),
            });
        }
        Err(Error::NotSlubmalloc { pid: self.pid })
    }

    /// Whether the process has exited and waits to be reaped (a zombie,
    /// whose maps are empty): state Z in `/proc/PID/stat`, after the
    /// command name in parentheses.
    fn exited(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        stat.rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X'))
    }

    /// Reads the ranges `remote` (address, length) into `local`, which is
    /// exactly as long as they are together; false if part of a range was
    /// not mapped (a pointer read mid-change: the caller tries again).
    pub fn read(&self, local: &mut [u8], remote: &[(u64, usize)]) -> Result<bool, Error> {
        let total: usize = remote.iter().map(|r| r.1).sum();
        assert_eq!(total, local.len(), "the ranges fill the buffer");
        let mut done = 0;
        // At most IOV_MAX (1024) ranges per call.
        for chunk in remote.chunks(1024) {
            let iov: Vec<libc::iovec> = chunk
                .iter()
                .map(|&(addr, len)| libc::iovec {
                    iov_base: addr as *mut libc::c_void,
                    iov_len: len,
                })
                .collect();
            let want: usize = chunk.iter().map(|r| r.1).sum();
            let dst = libc::iovec {
                iov_base: local[done..].as_mut_ptr().cast(),
                iov_len: want,
            };
            // SAFETY: `dst` is our buffer of `want` bytes; the remote ranges
            // are only read, by the kernel, which checks them.
            let n = unsafe {
                libc::process_vm_readv(self.pid, &dst, 1, iov.as_ptr(), iov.len() as u64, 0)
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EFAULT) {
                    return Ok(false);
                }
                return Err(os_error(self.pid, "process_vm_readv", err));
            }
            if n as usize != want {
                return Ok(false);
            }
            done += want;
        }
        Ok(true)
    }

    /// The resident set in bytes, from `/proc/PID/statm`, as the process's
    /// own statistics read `/proc/self/statm`.
    pub fn resident_bytes(&self) -> Result<u64, Error> {
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", self.pid))
            .map_err(|e| os_error(self.pid, "read /proc/PID/statm", e))?;
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        Ok(pages * page)
    }
}
