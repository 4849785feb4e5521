//! Shared by the tests that run C programs under `LD_PRELOAD`: builds the
//! preload library once (in its own target directory, so it never waits on
//! the lock of the `cargo test` that runs us) and the Rust programs of
//! tests/programs, compiles C sources with `cc`, runs programs with the
//! library preloaded and a deadline, and parses and checks the JSON
//! statistics report (one strict parser for every test that reads it).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn out_dir() -> PathBuf {
    root().join("target").join("preload")
}

/// `libslubmalloc.so`, the preload package built with `--release`.
pub fn preload_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "slubmalloc-preload",
                "--target-dir",
            ])
            .arg(out_dir())
            .current_dir(root())
            .status()
            .expect("run cargo build for the preload library");
        assert!(status.success(), "building the preload library failed");
        out_dir().join("release").join("libslubmalloc.so")
    })
    .clone()
}

/// The Rust program `name` of tests/programs/ (slubmalloc as its global
/// allocator, without the `override` feature), built once per test process
/// in target/preload beside the preload library (clear of the lock of the
/// `cargo test` running us).
pub fn rust_program(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = out_dir().join("release").join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|n| n == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "slubmalloc-programs",
                "--bin",
                name,
            ])
            .arg("--target-dir")
            .arg(out_dir())
            .current_dir(root())
            .status()
            .expect("run cargo build for a program of tests/programs");
        assert!(status.success(), "building tests/programs/{name}.rs failed");
        built.push(name.to_string());
    }
    exe
}

/// Runs `cargo build --release ARGS` at the repository root into
/// `target/<dir>` (never the target directory of the `cargo test` running
/// us, whose lock it holds); returns `target/<dir>/release`.
pub fn cargo_build(dir: &str, args: &[&str], what: &str) -> PathBuf {
    let dir = root().join("target").join(dir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release"])
        .args(args)
        .arg("--target-dir")
        .arg(&dir)
        .current_dir(root())
        .status()
        .unwrap_or_else(|e| panic!("run cargo build for {what}: {e}"));
    assert!(status.success(), "building {what} failed");
    dir.join("release")
}

/// Compiles `tests/c/<name>.c` (plus `extra` flags) into an executable.
pub fn compile_c(name: &str, extra: &[&str]) -> PathBuf {
    compile("cc", &format!("{name}.c"), name, extra)
}

/// Compiles `tests/c/<name>.cpp` with g++.
pub fn compile_cxx(name: &str) -> PathBuf {
    compile("g++", &format!("{name}.cpp"), name, &[])
}

/// Compiles a test program once per test process: tests run in parallel,
/// and one compiling a program while another runs it fails (ETXTBSY).
fn compile(compiler: &str, source: &str, name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{source} {}", extra.join(" "));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let exe = compile_now(compiler, source, name, extra);
    built.push((key, exe.clone()));
    exe
}

fn compile_now(compiler: &str, source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let src = root().join("tests").join("c").join(source);
    let dir = out_dir().join("c");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(compiler)
        .args(["-O1", "-g", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler} (ci/deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{compiler} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A command for `exe` whose environment has no `SLUBMALLOC_*` variable but
/// those in `env`, with the preload library when `preload`.
pub fn clean_command(exe: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLUBMALLOC_") {
            cmd.env_remove(&k);
        }
    }
    if preload {
        cmd.env("LD_PRELOAD", preload_lib());
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `program args` with the library preloaded and `env` set.
pub fn run_preloaded(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload_lib());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run preloaded program")
}

/// A child's status and output, for a failed assertion's message.
pub fn describe(o: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// Runs `program args` without the preload, for comparison.
pub fn run_plain(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run program")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `cmd`, failing the test if it is still running after `limit`: the
/// whole process group is killed, so a hang fails instead of blocking.
pub fn run_with_deadline(cmd: Command, limit: Duration) -> Output {
    run_with_pid(cmd, limit).0
}

/// `run_with_deadline`, and the child's pid (which names the report files
/// it wrote).
pub fn run_with_pid(mut cmd: Command, limit: Duration) -> (Output, u32) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id() as i32;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let kill_group = || {
        // SAFETY: kill(2) with a negative pid signals our child's process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    };
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if start.elapsed() > limit {
            kill_group();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}: killed (hang)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // A grandchild that outlives the child would hold the pipes open.
    while !(out_reader.is_finished() && err_reader.is_finished()) {
        if start.elapsed() > limit {
            kill_group();
            panic!("{what}: a process it started is still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    (output, pid as u32)
}

/// Runs `program args` with the library preloaded (or on glibc's malloc when
/// `preloaded` is false) and `env` set, failing the test after `limit`.
pub fn run_guarded(
    program: &Path,
    args: &[&str],
    preloaded: bool,
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if preloaded {
        cmd.env("LD_PRELOAD", preload_lib());
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_deadline(cmd, limit)
}

// ---------------------------------------------------------------------------
// The JSON statistics report (`SLUBMALLOC_STATS=json`, slubtop's `--json`)

/// The object size of the class serving `size`-byte requests.
pub fn class_of(size: usize) -> u64 {
    slubmalloc::class_size(size).expect("a small size") as u64
}

/// A strict JSON parser (RFC 8259, plus: duplicate keys are an error), small
/// enough to keep the tests free of dependencies. Numbers keep their text so
/// that u64 counters are read exactly.
pub mod json {
    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        Number(String),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }

        /// The value as an exact unsigned integer (no sign, fraction or exponent).
        pub fn as_u64(&self) -> Option<u64> {
            match self {
                Value::Number(n) => n.parse().ok(),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(a) => Some(a),
                _ => None,
            }
        }

        pub fn keys(&self) -> Vec<&str> {
            match self {
                Value::Object(members) => members.iter().map(|(k, _)| k.as_str()).collect(),
                _ => Vec::new(),
            }
        }
    }

    /// Parses exactly one JSON value, with only whitespace around it.
    pub fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            at: 0,
        };
        let v = p.value(0)?;
        p.ws();
        if p.at != p.s.len() {
            return Err(p.error("trailing characters"));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        at: usize,
    }

    impl Parser<'_> {
        fn error(&self, what: &str) -> String {
            let from = self.at.saturating_sub(20);
            let to = (self.at + 20).min(self.s.len());
            format!(
                "{what} at byte {}: ...{}...",
                self.at,
                String::from_utf8_lossy(&self.s[from..to])
            )
        }

        fn ws(&mut self) {
            while matches!(self.s.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.at += 1;
            }
        }

        fn eat(&mut self, b: u8) -> bool {
            if self.s.get(self.at) == Some(&b) {
                self.at += 1;
                true
            } else {
                false
            }
        }

        fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
            if self.s[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                Ok(v)
            } else {
                Err(self.error("unknown literal"))
            }
        }

        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > 64 {
                return Err(self.error("nested too deep"));
            }
            self.ws();
            match self.s.get(self.at) {
                None => Err(self.error("unexpected end")),
                Some(b'{') => self.object(depth),
                Some(b'[') => self.array(depth),
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.literal("true", Value::Bool(true)),
                Some(b'f') => self.literal("false", Value::Bool(false)),
                Some(b'n') => self.literal("null", Value::Null),
                Some(b'-' | b'0'..=b'9') => self.number(),
                Some(_) => Err(self.error("unexpected character")),
            }
        }

        fn object(&mut self, depth: usize) -> Result<Value, String> {
            self.at += 1; // {
            let mut members: Vec<(String, Value)> = Vec::new();
            self.ws();
            if self.eat(b'}') {
                return Ok(Value::Object(members));
            }
            loop {
                self.ws();
                if self.s.get(self.at) != Some(&b'"') {
                    return Err(self.error("expected a key"));
                }
                let key = self.string()?;
                if members.iter().any(|(k, _)| *k == key) {
                    return Err(self.error(&format!("duplicate key {key:?}")));
                }
                self.ws();
                if !self.eat(b':') {
                    return Err(self.error("expected ':'"));
                }
                let v = self.value(depth + 1)?;
                members.push((key, v));
                self.ws();
                if self.eat(b'}') {
                    return Ok(Value::Object(members));
                }
                if !self.eat(b',') {
                    return Err(self.error("expected ',' or '}'"));
                }
            }
        }

        fn array(&mut self, depth: usize) -> Result<Value, String> {
            self.at += 1; // [
            let mut items = Vec::new();
            self.ws();
            if self.eat(b']') {
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                self.ws();
                if self.eat(b']') {
                    return Ok(Value::Array(items));
                }
                if !self.eat(b',') {
                    return Err(self.error("expected ',' or ']'"));
                }
            }
        }

        fn string(&mut self) -> Result<String, String> {
            self.at += 1; // "
            let mut out = Vec::new();
            loop {
                let Some(&b) = self.s.get(self.at) else {
                    return Err(self.error("unterminated string"));
                };
                self.at += 1;
                match b {
                    b'"' => break,
                    0..=0x1f => return Err(self.error("control character in string")),
                    b'\\' => {
                        let Some(&e) = self.s.get(self.at) else {
                            return Err(self.error("unterminated escape"));
                        };
                        self.at += 1;
                        let c = match e {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => {
                                let hex = self
                                    .s
                                    .get(self.at..self.at + 4)
                                    .ok_or_else(|| self.error("short \\u"))?;
                                let hex =
                                    std::str::from_utf8(hex).map_err(|_| self.error("bad \\u"))?;
                                let code = u32::from_str_radix(hex, 16)
                                    .map_err(|_| self.error("bad \\u"))?;
                                self.at += 4;
                                char::from_u32(code).unwrap_or('\u{fffd}')
                            }
                            _ => return Err(self.error("unknown escape")),
                        };
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    _ => out.push(b),
                }
            }
            String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
        }

        fn number(&mut self) -> Result<Value, String> {
            let start = self.at;
            self.eat(b'-');
            let digits = |p: &mut Self| {
                let from = p.at;
                while matches!(p.s.get(p.at), Some(b'0'..=b'9')) {
                    p.at += 1;
                }
                p.at - from
            };
            if self.eat(b'0') {
                if matches!(self.s.get(self.at), Some(b'0'..=b'9')) {
                    return Err(self.error("leading zero"));
                }
            } else if digits(self) == 0 {
                return Err(self.error("expected digits"));
            }
            if self.eat(b'.') && digits(self) == 0 {
                return Err(self.error("expected fraction digits"));
            }
            if self.eat(b'e') || self.eat(b'E') {
                if !self.eat(b'+') {
                    self.eat(b'-');
                }
                if digits(self) == 0 {
                    return Err(self.error("expected exponent digits"));
                }
            }
            Ok(Value::Number(
                String::from_utf8_lossy(&self.s[start..self.at]).into_owned(),
            ))
        }
    }
}

/// Fields every `caches[]` entry must have, each an unsigned integer: the
/// crate's list, so that a field added to `CacheStats` is checked here too.
const CACHE_FIELDS: &[&str] = slubmalloc::CacheStats::FIELDS;

/// Fields the `totals` object must have, each an unsigned integer.
const TOTALS_FIELDS: &[&str] = slubmalloc::Totals::FIELDS;

/// Fields every `cpus[]` entry must have, each an unsigned integer.
const CPU_FIELDS: &[&str] = slubmalloc::CpuStats::FIELDS;

/// `doc`'s fields `names`, each an exact unsigned integer.
fn u64_fields(v: &json::Value, names: &[&str]) -> BTreeMap<String, u64> {
    names
        .iter()
        .map(|&n| {
            let x = v.get(n).unwrap_or_else(|| panic!("no {n:?} in {v:?}"));
            let x = x
                .as_u64()
                .unwrap_or_else(|| panic!("{n:?} is not an unsigned integer: {x:?}"));
            (n.to_string(), x)
        })
        .collect()
}

/// The report's `cpus` rows, parsed and checked (every field, ids in
/// increasing order, bytes at least 16 per block): CPU id -> (field ->
/// value).
pub fn parse_json_cpus(text: &str) -> BTreeMap<u64, BTreeMap<String, u64>> {
    let doc =
        json::parse(text).unwrap_or_else(|e| panic!("the JSON report does not parse: {e}\n{text}"));
    cpus_of(&doc, text)
}

/// `parse_json_cpus` on the parsed report `doc` (`text`).
fn cpus_of(doc: &json::Value, text: &str) -> BTreeMap<u64, BTreeMap<String, u64>> {
    let rows = doc["cpus"]
        .as_array()
        .unwrap_or_else(|| panic!("cpus is not an array in {text}"));
    let mut cpus = BTreeMap::new();
    for entry in rows {
        let c = u64_fields(entry, CPU_FIELDS);
        let cpu = c["cpu"];
        assert!(
            cpus.last_key_value().is_none_or(|(&last, _)| last < cpu),
            "CPUs out of order at {cpu} in {text}"
        );
        assert!(c["bytes"] >= 16 * c["objects"], "CPU {cpu}: {c:?}");
        cpus.insert(cpu, c);
    }
    cpus
}

/// The report, parsed and checked: `{"caches": [...], "cpus": [...],
/// "totals": {...}}`, every field present and an exact unsigned integer,
/// the classes real classes in increasing order, and the numbers
/// consistent with each other (the CPUs' rows: `parse_json_cpus`).
/// Returns the caches as maps, object size -> (field -> value), and the totals.
pub fn parse_json_report(
    text: &str,
) -> (BTreeMap<u64, BTreeMap<String, u64>>, BTreeMap<String, u64>) {
    let doc =
        json::parse(text).unwrap_or_else(|e| panic!("the JSON report does not parse: {e}\n{text}"));
    assert_eq!(
        doc.keys(),
        ["caches", "cpus", "totals"],
        "top-level keys of {text}"
    );
    let fields = u64_fields;
    let caches_json = doc["caches"]
        .as_array()
        .unwrap_or_else(|| panic!("caches is not an array in {text}"));
    let mut caches = BTreeMap::new();
    let mut last_size = 0;
    for entry in caches_json {
        let c = fields(entry, CACHE_FIELDS);
        let size = c["object_size"];
        assert!(
            size > last_size,
            "classes out of order at {size} B in {text}"
        );
        last_size = size;
        assert_eq!(
            class_of(size as usize),
            size,
            "{size} B is not a size class"
        );
        assert_eq!(
            c["objects_total"],
            c["slabs"] * c["objects_per_slab"],
            "{size} B: total {c:?}"
        );
        assert!(
            c["objects_in_use"] + c["sheaf_objects"] + c["barn_objects"] + c["cpu_objects"]
                <= c["objects_total"],
            "{size} B: more in use than exist {c:?}"
        );
        assert_eq!(
            c["partial_slabs"],
            c["thread_partial_slabs"] + c["node_partial_slabs"],
            "{size} B: partial slabs {c:?}"
        );
        assert!(
            c["partial_slabs"] <= c["slabs"],
            "{size} B: more partial slabs than slabs {c:?}"
        );
        assert!(
            c["partial_free_objects"]
                <= c["objects_total"]
                    - c["objects_in_use"]
                    - c["sheaf_objects"]
                    - c["barn_objects"]
                    - c["cpu_objects"],
            "{size} B: more free objects on partial slabs than free objects {c:?}"
        );
        assert_eq!(
            c["slabs"],
            c["slabs_allocated"] - c["slabs_freed"],
            "{size} B: slabs {c:?}"
        );
        // The slabs count what they handed out and took back; the sheaves'
        // blocks (the threads', the barns', the CPUs') are in use from their
        // view, not held by the program.
        let from_slabs =
            c["alloc_fast"] + c["alloc_slow"] - c["free_fast"] - c["free_slow"] - c["free_remote"];
        let cached = c["sheaf_objects"] + c["barn_objects"] + c["cpu_objects"];
        assert_eq!(
            cached,
            c["free_sheaf"] - c["alloc_sheaf"] - c["sheaf_flushed"],
            "{size} B: in sheaves, the barn and the CPUs is frees into sheaves less what left them {c:?}"
        );
        assert_eq!(
            c["objects_in_use"] + cached,
            from_slabs,
            "{size} B: in use is allocations minus frees {c:?}"
        );
        caches.insert(size, c);
    }
    let totals = fields(&doc["totals"], TOTALS_FIELDS);
    let slab_bytes: u64 = caches
        .values()
        .map(|c| c["objects_in_use"] * c["object_size"])
        .sum();
    assert_eq!(
        totals["bytes_in_use"],
        slab_bytes + totals["medium_bytes"] + totals["large_bytes"],
        "totals.bytes_in_use is the classes' bytes in use plus the medium and large blocks'"
    );
    let cpus = cpus_of(&doc, text);
    assert!(
        totals["percpu_mode"] == 1 || cpus.is_empty(),
        "CPU rows in the fallback: {cpus:?}"
    );
    (caches, totals)
}

impl std::ops::Index<&str> for json::Value {
    type Output = json::Value;
    fn index(&self, key: &str) -> &json::Value {
        self.get(key)
            .unwrap_or_else(|| panic!("no {key:?} in {self:?}"))
    }
}
