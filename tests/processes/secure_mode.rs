//! A setuid program (secure-execution mode, `AT_SECURE`) takes no
//! `SLUBMALLOC_*` variable: a copy of a Rust program with slubmalloc as its
//! global allocator (tests/programs/option_effects.rs) and a C program linked with
//! the library (tests/c/option_effects.c, as `/etc/ld.so.preload` would
//! load it), both setuid root and run by `nobody`, with every variable that
//! writes a file or changes behaviour set, create no file, install no
//! handler, and print what they print with no variable; the same programs
//! run by root (not secure) honour every one. And the report and profile
//! named by the environment go only into the process's own files: never
//! through a planted symbolic link, never into a file another user planted.
//!
//! The tests that need root (to make a setuid-root program, become
//! `nobody` or give `nobody` a file) are skipped elsewhere with the reason,
//! except under CI, where they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common;

const DEADLINE: Duration = Duration::from_secs(60);

const SECURE_WARNING: &str = "slubmalloc: warning: SLUBMALLOC_* variables ignored: \
                              secure-execution process (setuid, setgid or file capabilities)\n";

/// The report and the profile into `secret` (root's alone), the report
/// signal, debug mode, the purge held back, an unknown variable; with
/// `stderr_variables`, every variable that writes a file or changes
/// behaviour.
fn file_writing_variables(secret: &Path) -> Vec<(String, String)> {
    let s = secret.display();
    [
        ("SLUBMALLOC_STATS", "1".to_owned()),
        ("SLUBMALLOC_STATS_FILE", format!("{s}/owned.%p")),
        ("SLUBMALLOC_STATS_SIGNAL", "USR2".to_owned()),
        ("SLUBMALLOC_PROF", "1".to_owned()),
        ("SLUBMALLOC_PROF_RATE", "4096".to_owned()),
        ("SLUBMALLOC_PROF_FILE", format!("{s}/leak.%p.heap")),
        ("SLUBMALLOC_DEBUG", "1".to_owned()),
        ("SLUBMALLOC_PURGE_DELAY_MS", "600000".to_owned()),
        ("SLUBMALLOC_NO_SUCH_OPTION", "1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The report on stderr, the profile at its default path (the working
/// directory), no background purger, random free lists (apart from debug
/// mode, which carves fewer objects at a time to shuffle).
fn stderr_variables() -> Vec<(String, String)> {
    [
        ("SLUBMALLOC_STATS", "json"),
        ("SLUBMALLOC_PROF", "1"),
        ("SLUBMALLOC_BACKGROUND_PURGE", "0"),
        ("SLUBMALLOC_FREELIST_RANDOM", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

// ---------------------------------------------------------------------------
// Becoming another user

/// `nobody`'s user and group ids.
fn nobody() -> Option<(u32, u32)> {
    // SAFETY: getpwnam with a NUL-terminated name; the entry is read at once.
    unsafe {
        let pw = libc::getpwnam(c"nobody".as_ptr());
        (!pw.is_null()).then(|| ((*pw).pw_uid, (*pw).pw_gid))
    }
}

/// Whether this test can make a setuid-root program and run it as
/// `nobody`; if not, prints why and says to skip, or fails under CI.
fn can_become_nobody(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let why = if unsafe { libc::geteuid() } != 0 {
        "not root: cannot make a setuid-root program or run one as another user"
    } else if nobody().is_none() {
        "no user `nobody` on this machine"
    } else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why} (CI runs as root)"
    );
    eprintln!("skipped {test}: {why}");
    false
}

/// Whether `dir` is on a mount that honours setuid bits.
fn suid_allowed(dir: &Path) -> bool {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_NOSUID == 0
    }
}

/// Whether every directory from `/` to `dir` lets others through.
fn others_can_reach(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0))
}

/// A fresh directory for `test`, owned by root, 0755, that `nobody` can
/// reach and where setuid bits count: under the target directory, or else
/// /var/tmp.
fn setuid_dir(test: &str) -> PathBuf {
    let name = format!("{test}-{}", std::process::id());
    let candidates = [
        common::root().join("target/preload/secure-mode"),
        PathBuf::from("/var/tmp"),
    ];
    for base in candidates {
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        if suid_allowed(&dir) && others_can_reach(&dir) {
            return dir;
        }
        std::fs::remove_dir(&dir).unwrap();
    }
    panic!("no directory that nobody can reach on a mount with setuid bits");
}

/// The test's directories: `dir` (the working directory), `dir/bin` (the
/// program), `dir/secret` (root's alone, 0700).
struct Setup {
    dir: PathBuf,
    bin: PathBuf,
    secret: PathBuf,
}

impl Setup {
    fn new(test: &str) -> Setup {
        let dir = setuid_dir(test);
        let (bin, secret) = (dir.join("bin"), dir.join("secret"));
        std::fs::create_dir(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(&secret).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
        Setup { dir, bin, secret }
    }

    /// Copies `exe` into `bin`, setuid root.
    fn install_setuid(&self, exe: &Path) -> PathBuf {
        let to = self.bin.join(exe.file_name().unwrap());
        std::fs::copy(exe, &to).unwrap();
        std::os::unix::fs::chown(&to, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o4755)).unwrap();
        to
    }

    /// Every path under `dir`.
    fn files(&self) -> BTreeSet<PathBuf> {
        let mut all = BTreeSet::new();
        let mut todo = vec![self.dir.clone()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    todo.push(p.clone());
                }
                all.insert(p);
            }
        }
        all
    }

    /// Runs `exe` in `dir` with only `env` (umask 022), as `nobody` if
    /// `as_nobody`, else as root.
    fn run(&self, exe: &Path, env: &[(String, String)], as_nobody: bool) -> Output {
        let mut cmd = Command::new(exe);
        cmd.env_clear()
            .envs(env.iter().cloned())
            .current_dir(&self.dir);
        if as_nobody {
            let (uid, gid) = nobody().unwrap();
            // With uid set, std drops root's supplementary groups.
            cmd.uid(uid).gid(gid);
        }
        // SAFETY: umask is async-signal-safe and cannot fail.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o022);
                Ok(())
            })
        };
        let out = common::run_with_deadline(cmd, DEADLINE);
        assert!(
            out.status.success(),
            "{} failed: {}\n{}",
            exe.display(),
            out.status,
            common::stderr(&out)
        );
        out
    }
}

/// The directory goes, pass or fail: no setuid-root program stays behind.
impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// What the program saw

/// The probe's lines, `key=value`.
fn effects(out: &Output) -> BTreeMap<String, String> {
    common::stdout(out)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn number(e: &BTreeMap<String, String>, key: &str) -> usize {
    e.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {e:?}"))
}

/// Defaults: no debug slots, ordered free lists, no handler, no profile,
/// freed memory back in time.
fn assert_defaults(e: &BTreeMap<String, String>, secure: &str) {
    assert_eq!(e["secure"], secure, "{e:?}");
    assert_eq!(
        number(e, "usable_100"),
        slubmalloc::class_size(100).unwrap(),
        "{e:?}"
    );
    assert!(number(e, "next_slot") >= 20, "{e:?}");
    assert_eq!(e["usr2"], "default", "{e:?}");
    assert_eq!(e.get("profile").map_or("off", |p| p), "off", "{e:?}");
    assert_eq!(e["purged"], "yes", "{e:?}");
}

/// The one file under `dir` named `prefix*`: its text and mode (octal).
fn only_file(dir: &Path, prefix: &str) -> (String, String) {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "files {prefix}* in {}: {found:?}",
        dir.display()
    );
    let mode = format!(
        "{:o}",
        std::fs::metadata(&found[0]).unwrap().mode() & 0o7777
    );
    (std::fs::read_to_string(&found[0]).unwrap(), mode)
}

/// Runs `exe`, installed setuid root in `s`, as `nobody` and then as root,
/// with no variable and with each set; `profile_line` if it prints one.
fn check_program(s: &Setup, exe: &Path) {
    let before = s.files();
    let none = s.run(exe, &[], true);
    assert_defaults(&effects(&none), "1 euid=0");
    assert_eq!(common::stderr(&none), "", "no variable, nothing on stderr");

    for vars in [file_writing_variables(&s.secret), stderr_variables()] {
        let out = s.run(exe, &vars, true);
        assert_defaults(&effects(&out), "1 euid=0");
        assert_eq!(common::stderr(&out), SECURE_WARNING, "with {vars:?}");
        assert_eq!(s.files(), before, "a setuid run with {vars:?} made files");
    }

    // The same program run by root, not secure: every variable counts.
    let out = s.run(exe, &file_writing_variables(&s.secret), false);
    let e = effects(&out);
    assert_eq!(e["secure"], "0 euid=0");
    assert_eq!(number(&e, "usable_100"), 100, "debug mode: {e:?}");
    assert_eq!(e["usr2"], "handled", "{e:?}");
    assert_eq!(e.get("profile").map_or("on", |p| p), "on", "{e:?}");
    assert_eq!(e["purged"], "no", "a 10-minute purge delay: {e:?}");
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("unknown variable SLUBMALLOC_NO_SUCH_OPTION ignored"),
        "{stderr}"
    );
    let (report, mode) = only_file(&s.secret, "owned.");
    assert!(
        report.starts_with("slubmalloc statistics (pid "),
        "{report}"
    );
    assert_eq!(mode, "644", "the report's mode");
    let (profile, mode) = only_file(&s.secret, "leak.");
    assert!(profile.starts_with("heap profile:"), "{profile}");
    assert!(profile.contains("\nMAPPED_LIBRARIES:\n"), "{profile}");
    assert_eq!(mode, "600", "the profile's mode");

    let out = s.run(exe, &stderr_variables(), false);
    let e = effects(&out);
    assert_eq!(e["purged"], "no", "no background purger: {e:?}");
    assert!(number(&e, "next_slot") < 12, "random free lists: {e:?}");
    assert!(common::stderr(&out).starts_with("{\"caches\":["));
    let (profile, mode) = only_file(&s.dir, "slubmalloc.");
    assert!(profile.starts_with("heap profile:"), "{profile}");
    assert_eq!(mode, "600", "the profile's mode");
}

// ---------------------------------------------------------------------------
// The programs

#[test]
fn setuid_rust_program_ignores_every_variable_it_honours_when_run_normally() {
    let test = "setuid_rust_program";
    if !can_become_nobody(test) {
        return;
    }
    let s = Setup::new(test);
    let exe = s.install_setuid(&common::rust_program("option_effects"));
    check_program(&s, &exe);
}

#[test]
fn setuid_c_program_linking_the_library_ignores_every_variable_it_honours_when_run_normally() {
    let test = "setuid_c_program";
    if !can_become_nobody(test) {
        return;
    }
    let s = Setup::new(test);
    // The library beside the program, found by its absolute run path (ld.so
    // ignores LD_LIBRARY_PATH and LD_PRELOAD paths in a setuid program).
    let lib = s.bin.join("libslubmalloc.so");
    std::fs::copy(common::preload_lib(), &lib).unwrap();
    let bin = s.bin.display().to_string();
    let exe = common::compile_c(
        "option_effects",
        &[
            "-fno-builtin",
            &format!("-L{bin}"),
            "-lslubmalloc",
            &format!("-Wl,-rpath,{bin}"),
        ],
    );
    let exe = s.install_setuid(&exe);
    check_program(&s, &exe);
}

/// A fresh directory for the file tests, and a runner of the Rust program
/// there with the report and the profile sent to two of its files.
struct Named {
    dir: PathBuf,
}

impl Named {
    fn new(test: &str) -> Named {
        let dir = std::env::temp_dir().join(format!("slubmalloc-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Named { dir }
    }

    /// Runs the program with `SLUBMALLOC_STATS_FILE=dir/report` and
    /// `SLUBMALLOC_PROF_FILE=dir/profile`; its stderr.
    fn run(&self, report: &str, profile: &str) -> String {
        let d = self.dir.display();
        let mut cmd = Command::new(common::rust_program("option_effects"));
        cmd.env_clear()
            .env("SLUBMALLOC_STATS", "1")
            .env("SLUBMALLOC_STATS_FILE", format!("{d}/{report}"))
            .env("SLUBMALLOC_PROF", "1")
            .env("SLUBMALLOC_PROF_FILE", format!("{d}/{profile}"))
            .current_dir(&self.dir);
        let out = common::run_with_deadline(cmd, DEADLINE);
        assert!(out.status.success(), "{}", common::stderr(&out));
        common::stderr(&out)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap()
    }

    /// Writes `text` to `name` as `other` would have planted it (mode 0666).
    fn plant(&self, name: &str, text: &str, other: Option<u32>) {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::os::unix::fs::chown(&path, other, None).unwrap();
    }

    /// Fails unless `name` still holds exactly `text`.
    fn assert_untouched(&self, name: &str, text: &str) {
        let now = self.read(name);
        assert!(now == text, "{name} was written: now {} bytes", now.len());
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn report_is_appended_and_profile_replaced_in_files_of_their_own() {
    let n = Named::new("own-files");
    n.plant("report.txt", "earlier\n", None);
    let junk = "junk\n".repeat(1 << 18);
    n.plant("profile.heap", &junk, None);
    n.run("report.txt", "profile.heap");
    let report = n.read("report.txt");
    assert!(
        report.starts_with("earlier\nslubmalloc statistics"),
        "{report}"
    );
    let profile = n.read("profile.heap");
    assert!(profile.starts_with("heap profile:"), "{profile}");
    assert!(!profile.contains("junk"), "the old profile was not emptied");
}

#[test]
fn report_and_profile_are_not_written_through_a_planted_symlink() {
    let n = Named::new("symlink");
    for (link, victim) in [
        ("report.link", "victim-report"),
        ("profile.link", "victim-profile"),
    ] {
        n.plant(victim, "untouched\n", None);
        std::os::unix::fs::symlink(n.dir.join(victim), n.dir.join(link)).unwrap();
    }
    let stderr = n.run("report.link", "profile.link");
    n.assert_untouched("victim-report", "untouched\n");
    n.assert_untouched("victim-profile", "untouched\n");
    for link in ["report.link", "profile.link"] {
        assert!(n.dir.join(link).symlink_metadata().unwrap().is_symlink());
    }
    assert_eq!(stderr, "", "nothing sent to stderr instead");
}

#[test]
fn report_and_profile_are_not_written_into_a_file_another_user_planted() {
    let test = "planted_files";
    if !can_become_nobody(test) {
        return;
    }
    let n = Named::new("planted");
    let (uid, _) = nobody().unwrap();
    n.plant("report.txt", "planted\n", Some(uid));
    n.plant("profile.heap", "planted\n", Some(uid));
    let stderr = n.run("report.txt", "profile.heap");
    n.assert_untouched("report.txt", "planted\n");
    n.assert_untouched("profile.heap", "planted\n");
    assert_eq!(stderr, "", "nothing sent to stderr instead");
}
