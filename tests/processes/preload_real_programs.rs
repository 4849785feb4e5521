//! Real programs nobody here wrote — python3, sqlite3, git and gcc — run with
//! and without `LD_PRELOAD=libslubmalloc.so` on the same input; their stdout
//! must be identical. In the preloaded runs `SLUBMALLOC_STATS=json` is set and
//! every process must write slubmalloc's JSON report to stderr: the proof that
//! it really ran on slubmalloc. Only stdout is compared.
//!
//! Each test works in `target/preload/tmp-<test>/{plain,preloaded}`.

use crate::common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const REPORT: &str = "{\"caches\":[";

/// Debian's build of `name` when present, else whatever PATH finds.
fn program(name: &str) -> PathBuf {
    let debian = Path::new("/usr/bin").join(name);
    if debian.exists() {
        debian
    } else {
        PathBuf::from(name)
    }
}

/// A fresh, empty `target/preload/tmp-<test>`.
fn temp_dir(test: &str) -> PathBuf {
    let dir = common::root()
        .join("target")
        .join("preload")
        .join(format!("tmp-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One of the two runs of a scenario: its own directory, preloaded or not.
struct Run {
    dir: PathBuf,
    preloaded: bool,
    env: Vec<(String, String)>,
    /// How many processes wrote a slubmalloc report, over all commands.
    reports: usize,
    /// How many commands `cmd` ran.
    commands: usize,
}

impl Run {
    fn new(base: &Path, preloaded: bool, env: &[(&str, &str)]) -> Run {
        let dir = base.join(if preloaded { "preloaded" } else { "plain" });
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            dir,
            preloaded,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            reports: 0,
            commands: 0,
        }
    }

    /// Runs `prog args` in the run's directory; it must succeed. Returns its
    /// stdout.
    fn cmd(&mut self, prog: impl AsRef<Path>, args: &[&str]) -> String {
        let mut cmd = Command::new(prog.as_ref());
        cmd.args(args).current_dir(&self.dir);
        cmd.env("LC_ALL", "C").env("TZ", "UTC");
        for (k, v) in &self.env {
            cmd.env(k, v.replace("{dir}", self.dir.to_str().unwrap()));
        }
        if self.preloaded {
            cmd.env("LD_PRELOAD", common::preload_lib())
                .env("SLUBMALLOC_STATS", "json");
        } else {
            cmd.env_remove("LD_PRELOAD").env_remove("SLUBMALLOC_STATS");
        }
        cmd.env_remove("SLUBMALLOC_STATS_FILE");
        let o = common::run_with_deadline(cmd, LIMIT);
        let err = common::stderr(&o);
        assert!(
            o.status.success(),
            "{} {args:?} ({}) failed: {}\nstderr:\n{err}",
            prog.as_ref().display(),
            if self.preloaded { "preloaded" } else { "plain" },
            o.status
        );
        let reports = err.matches(REPORT).count();
        if self.preloaded {
            assert!(
                reports >= 1,
                "{} {args:?} wrote no slubmalloc report: it did not run on slubmalloc\n{err}",
                prog.as_ref().display()
            );
        } else {
            assert_eq!(reports, 0, "a plain run wrote a slubmalloc report");
        }
        self.reports += reports;
        self.commands += 1;
        common::stdout(&o)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap();
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }
}

/// Runs `scenario` plain and preloaded and returns both runs and outputs.
fn both(
    test: &str,
    env: &[(&str, &str)],
    scenario: impl Fn(&mut Run) -> String,
) -> ((Run, String), (Run, String)) {
    let base = temp_dir(test);
    let mut plain = Run::new(&base, false, env);
    let plain_out = scenario(&mut plain);
    let mut pre = Run::new(&base, true, env);
    let pre_out = scenario(&mut pre);
    assert!(!plain_out.is_empty(), "the scenario printed nothing");
    if pre_out != plain_out {
        let line = plain_out
            .lines()
            .zip(pre_out.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(plain_out.lines().count().min(pre_out.lines().count()));
        panic!(
            "stdout differs with the preload (first at line {line}):\nplain:     {:?}\npreloaded: {:?}",
            plain_out.lines().nth(line),
            pre_out.lines().nth(line)
        );
    }
    ((plain, plain_out), (pre, pre_out))
}

const PYTHON_SCRIPT: &str = r#"
import collections, hashlib, json, queue, re, threading

d = {}
for i in range(100000):
    d["key-%d" % i] = [i, str(i) * (i % 7), {"n": i % 13}]
words = collections.Counter()
text = " ".join("w%d" % (i * 7919 % 5003) for i in range(150000))
for w in re.findall(r"w\d+", text):
    words[w] += 1
lists = [list(range(i % 300)) for i in range(20000)]
lists.sort(key=lambda l: (len(l), l[:1]))
s = set()
for i in range(100000):
    s.add(("t", i % 40000, str(i % 977)))
blob = json.dumps({"d": [d["key-%d" % i] for i in range(0, 100000, 97)],
                   "top": words.most_common(10)}, sort_keys=True)
back = json.loads(blob)
parts = ["%05d:%s" % (i, hex(i * i)) for i in range(50000)]
joined = "|".join(parts)
del d
print("words", len(words), words.most_common(3))
print("lists", len(lists), sum(map(len, lists)))
print("set", len(s))
print("json", len(blob), hashlib.sha256(blob.encode()).hexdigest())
print("roundtrip", len(back["d"]), back["top"][0])
print("joined", len(joined), hashlib.md5(joined.encode()).hexdigest())
print("bytes", sum(len(bytes(range(i % 256))) for i in range(30000)))

# Objects built in worker threads, freed by the main thread.
q = queue.Queue()
def work(k):
    out = []
    for i in range(20000):
        out.append(("t%d" % k, i, "x" * (i % 700), [i] * (i % 5)))
    q.put(out)
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts:
    t.start()
got = [q.get() for _ in ts]
for t in ts:
    t.join()
print("threads", sorted((len(g), sum(len(x[2]) for x in g)) for g in got))
del got
"#;

#[test]
fn python3_runs_an_allocation_heavy_script_identically() {
    // PYTHONMALLOC=malloc sends every Python object to malloc instead of
    // pymalloc's own arenas, so that slubmalloc serves all of them.
    let env = [("PYTHONHASHSEED", "0"), ("PYTHONMALLOC", "malloc")];
    let ((_, out), (pre, _)) = both("python3", &env, |run| {
        run.write("heavy.py", PYTHON_SCRIPT);
        run.cmd(program("python3"), &["-B", "heavy.py"])
    });
    assert!(out.contains("threads [(20000,"), "{out}");
    assert_eq!(pre.reports, 1);
}

const SQLITE_BUILD: &str = "
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, data BLOB);
WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq WHERE x < 20000)
INSERT INTO t(grp, name, val, data)
  SELECT x % 97, 'name-' || (x * 7919 % 9973), (x * 31 % 1000) / 7.0, zeroblob(x % 300)
  FROM seq;
CREATE INDEX t_grp ON t(grp, val);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(grp), round(sum(val), 3), sum(length(data)) FROM t;
";

const SQLITE_QUERIES: &str = "
SELECT grp, count(*), round(avg(val), 4), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT name, count(*) FROM t GROUP BY name HAVING count(*) > 2 ORDER BY name LIMIT 20;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.name = b.name AND a.id < b.id
  GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 10;
SELECT group_concat(name, ',') FROM (SELECT name FROM t WHERE grp = 5 ORDER BY val DESC, id LIMIT 50);
WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n + 1, b, a + b FROM fib WHERE n < 80)
  SELECT max(b), count(*) FROM fib;
UPDATE t SET name = upper(name) || '-' || id WHERE id % 3 = 0;
DELETE FROM t WHERE grp > 80;
SELECT count(*), count(DISTINCT name), total(val) FROM t;
SELECT id, name, length(data) FROM t ORDER BY name DESC, id LIMIT 20;
VACUUM;
PRAGMA integrity_check;
";

#[test]
fn sqlite3_builds_and_queries_a_generated_database_identically() {
    let ((plain, out), (pre, _)) = both("sqlite3", &[], |run| {
        run.write("build.sql", SQLITE_BUILD);
        run.write("queries.sql", SQLITE_QUERIES);
        let mut out = run.cmd(program("sqlite3"), &["-batch", "gen.db", ".read build.sql"]);
        // A second process reopens the database the first one wrote.
        out += &run.cmd(
            program("sqlite3"),
            &["-batch", "gen.db", ".read queries.sql"],
        );
        out
    });
    assert!(out.starts_with("20000|"), "{out}");
    assert!(out.trim_end().ends_with("ok"), "integrity check: {out}");
    assert_eq!(pre.reports, 2);
    // The same statements produce the same database file, byte for byte.
    assert!(
        plain.read("gen.db") == pre.read("gen.db"),
        "the database files differ"
    );
}

/// Deterministic contents of file `f` in commit `c`.
fn repo_file(c: usize, f: usize) -> String {
    let mut s = String::new();
    for line in 0..(50 + (f * 7 + c * 13) % 150) {
        let _ = writeln!(s, "file {f} line {line} value {}", (line * 31 + f * c) % 97);
    }
    s
}

#[test]
fn git_commits_logs_and_repacks_identically() {
    let env = [
        ("HOME", "{dir}"),
        ("XDG_CONFIG_HOME", "{dir}"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_AUTHOR_NAME", "Ada Author"),
        ("GIT_AUTHOR_EMAIL", "ada@example.com"),
        ("GIT_COMMITTER_NAME", "Cy Committer"),
        ("GIT_COMMITTER_EMAIL", "cy@example.com"),
        ("GIT_AUTHOR_DATE", "2020-01-02T03:04:05Z"),
        ("GIT_COMMITTER_DATE", "2020-01-02T03:04:05Z"),
    ];
    let ((_, out), (pre, _)) = both("git", &env, |run| {
        let git = program("git");
        let mut out = String::new();
        run.cmd(&git, &["init", "-q", "--initial-branch=main", "."]);
        run.cmd(&git, &["config", "gc.auto", "0"]);
        for c in 1..=6 {
            for f in 0..40 {
                if (f + c) % 3 != 0 || c == 1 {
                    run.write(&format!("file{f:02}.txt"), &repo_file(c, f));
                }
            }
            run.cmd(&git, &["add", "-A"]);
            run.cmd(
                &git,
                &["commit", "-q", "-m", &format!("commit {c}\n\nbody of {c}")],
            );
        }
        run.cmd(&git, &["tag", "-a", "v1", "-m", "tag v1", "HEAD~2"]);
        out += &run.cmd(
            &git,
            &["log", "--format=%H %T %an <%ae> %ad %s", "--date=iso"],
        );
        out += &run.cmd(&git, &["cat-file", "-p", "HEAD"]);
        out += &run.cmd(&git, &["cat-file", "-p", "HEAD^{tree}"]);
        out += &run.cmd(&git, &["cat-file", "-p", "v1"]);
        out += &run.cmd(&git, &["log", "-p", "--stat", "--format=%H%n%B"]);
        out += &run.cmd(&git, &["diff", "--stat", "HEAD~4", "HEAD"]);
        out += &run.cmd(&git, &["blame", "--porcelain", "file07.txt"]);
        out += &run.cmd(&git, &["grep", "-c", "value 42", "HEAD~1"]);
        run.cmd(&git, &["gc", "-q", "--aggressive"]);
        out += &run
            .cmd(&git, &["count-objects", "-v"])
            .lines()
            .filter(|l| {
                l.starts_with("count") || l.starts_with("in-pack") || l.starts_with("packs")
            })
            .map(|l| format!("{l}\n"))
            .collect::<String>();
        out += &run.cmd(&git, &["fsck", "--strict", "--no-progress"]);
        out += &run.cmd(&git, &["rev-list", "--all", "--objects"]);
        out
    });
    assert!(
        out.lines().filter(|l| l.ends_with("commit 6")).count() >= 1,
        "{out}"
    );
    // gc runs pack-objects and friends: more processes than commands.
    assert!(
        pre.reports > pre.commands,
        "{} reports from {} commands",
        pre.reports,
        pre.commands
    );
}

/// A C program big enough to keep cc1's optimiser busy for a moment.
const FUNCTIONS: usize = 60;

fn generated_c_source() -> String {
    let mut s = String::from("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
    for i in 0..FUNCTIONS {
        let _ = write!(
            s,
            "static long f{i}(long x) {{\n  long a = x * {m} + {i};\n  for (int k = 0; k < {r}; k++)\n    a = (a ^ (a >> 3)) + k * {m};\n  switch (x % 5) {{\n  case 0: a += {i}; break;\n  case 1: a -= x / {d}; break;\n  case 2: a ^= {m}L << 7; break;\n  default: a = a * 3 + 1;\n  }}\n  return a;\n}}\n",
            m = i * 37 + 11,
            r = i % 7 + 1,
            d = i % 9 + 1,
        );
    }
    s += "static int cmp(const void *a, const void *b) {\n  long x = *(const long *)a, y = *(const long *)b;\n  return (x > y) - (x < y);\n}\n";
    s += "int main(void) {\n  long *v = malloc(60000 * sizeof *v);\n  long n = 0;\n  for (long x = 0; x < 1000; x++) {\n";
    for i in 0..FUNCTIONS {
        let _ = writeln!(s, "    v[n++] = f{i}(x);");
    }
    s += "  }\n  qsort(v, n, sizeof *v, cmp);\n  long sum = 0;\n  for (long i = 0; i < n; i += 97) sum += v[i] % 100003;\n";
    s += "  printf(\"n %ld min %ld max %ld median %ld sum %ld\\n\", n, v[0], v[n - 1], v[n / 2], sum);\n  free(v);\n  return 0;\n}\n";
    s
}

#[test]
fn gcc_compiles_a_c_file_identically() {
    let source = generated_c_source();
    let ((plain, out), (pre, _)) = both("gcc", &[], |run| {
        run.write("prog.c", &source);
        let gcc = program("gcc");
        // The assembly on stdout, then a linked program.
        let mut out = run.cmd(&gcc, &["-O2", "-S", "-o", "-", "prog.c"]);
        run.cmd(&gcc, &["-O2", "-Wall", "-o", "prog", "prog.c"]);
        // The compiled program itself runs without the preload both times.
        let exe = run.dir.join("prog");
        let o = common::run_with_deadline(
            {
                let mut c = Command::new(&exe);
                c.env_remove("LD_PRELOAD");
                c
            },
            LIMIT,
        );
        assert!(
            o.status.success(),
            "the compiled program failed: {}",
            o.status
        );
        out += &common::stdout(&o);
        out
    });
    assert!(
        out.contains("\nmain:") && out.contains("\nn 60000 min "),
        "{}",
        &out[out.len().saturating_sub(300)..]
    );
    // Each step's driver, cc1, and for the link as, collect2 and ld ran on
    // slubmalloc.
    assert!(pre.reports >= 6, "only {} reports", pre.reports);
    assert!(
        plain.read("prog") == pre.read("prog"),
        "linked programs differ"
    );
}
