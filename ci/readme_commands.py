#!/usr/bin/env python3
"""Runs every command the README and ARCHITECTURE.md give a user, as a user
would on a fresh clone, so that a command that is changed, added or broken
fails CI with its name.

What it runs, read from the documents themselves:
- every fenced block tagged `sh`: as one bash script with `set -eo
  pipefail` (a block's commands share its shell: `$!` of a command put in
  the background), from the repository root, in the order of the
  documents; a failure names the command that failed;
- every fenced block tagged `rust`: as the `main.rs` of a crate of its own
  that depends on this checkout's slubmalloc, built and run with
  `SLUBMALLOC_STATS=1` (the report must be printed).
Blocks tagged otherwise (`text`, ...) are not run.

Two placeholders stand for what only the user has: `your-program`, replaced
by a real program (python3 doing some work), and `PID`, replaced by the pid
of a process running under the preload library, started here once.

Two commands are handled apart: `ci/test.sh`, the test command, is the one
`.ci/run` runs first, so it is checked to be there rather than run twice;
and slubtop's live view (`slubtop PID` without `--once`), which runs until
it is stopped, passes if it is still running after a few seconds.

    ci/readme_commands.py            # run them all
    ci/readme_commands.py --list     # print what would run
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DOCUMENTS = ["README.md", "ARCHITECTURE.md"]
YOUR_PROGRAM = "python3 -c 'print(sum(len(str(i)) for i in range(200000)))'"
LIVE_VIEW_SECONDS = 3
TIMEOUT = 1200
TEST_COMMAND = "ci/test.sh"


def blocks(path):
    """(line, tag, text) for each fenced block of a Markdown file."""
    out = []
    tag = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            fence = re.match(r"^```(\w*)\s*$", line)
            if tag is None and fence:
                tag, start, body = fence.group(1), n, []
            elif tag is not None and line.rstrip() == "```":
                out.append((start, tag, "".join(body)))
                tag = None
            elif tag is not None:
                body.append(line)
    if tag is not None:
        sys.exit(f"{path}:{start}: a fenced block is not closed")
    return out


def commands(text):
    """The commands of a shell block: lines joined across `\\`, without
    blank lines and whole-line comments."""
    out, cur = [], ""
    for line in text.splitlines():
        cur += line
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def strip_comment(cmd):
    """The command without a trailing `# ...` comment (outside quotes)."""
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return cmd
    return " ".join(words) if words else cmd


def is_live_view(cmd):
    """slubtop's live view of a process, which runs until it is stopped."""
    return "slubtop" in cmd and "--once" not in cmd and "--count" not in cmd and "PID" in cmd


class Target:
    """A process under the preload library, for the commands that need a
    PID (slubtop)."""

    def __init__(self):
        self.proc = None

    def pid(self):
        if self.proc is None:
            lib = os.path.join(ROOT, "target", "release", "libslubmalloc.so")
            if not os.path.exists(lib):
                run_checked("build the preload library for PID",
                            "cargo build --release --quiet")
            env = dict(os.environ, LD_PRELOAD=lib)
            env.pop("SLUBMALLOC_STATS", None)
            self.proc = subprocess.Popen(
                [sys.executable, "-c",
                 "import time\nkeep = [str(i) * 8 for i in range(100000)]\ntime.sleep(3600)"],
                env=env)
            # Time for the interpreter to start and map the allocator.
            subprocess.run(["sleep", "1"])
        return str(self.proc.pid)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def run_checked(name, cmd, timeout=TIMEOUT, live_view=False):
    """Runs a script; returns None or the reason it failed, with the
    command that failed."""
    print(f"== {name}", flush=True)
    script = ("set -eo pipefail\n"
              "trap 'echo \"readme_commands: failed: $BASH_COMMAND\" >&2' ERR\n" + cmd)
    try:
        p = subprocess.run(["bash", "-c", script], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=LIVE_VIEW_SECONDS if live_view else timeout)
    except subprocess.TimeoutExpired as e:
        if live_view:
            return None
        return f"still running after {e.timeout} s\n{(e.output or b'').decode(errors='replace')[-3000:]}"
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        return f"exit status {p.returncode}\n{out[-3000:]}"
    return None


def run_rust(name, text, workdir):
    """Builds and runs a Rust block as a program of its own."""
    if "fn main" not in text:
        return "a `rust` block must be a whole program (tag a fragment `text`)"
    crate = os.path.join(workdir, re.sub(r"\W", "_", name))
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "readme-snippet"\nversion = "0.0.0"\nedition = "2021"\n\n'
                f'[dependencies]\nslubmalloc = {{ path = "{ROOT}" }}\n\n[workspace]\n')
    with open(os.path.join(crate, "src", "main.rs"), "w") as f:
        f.write(text)
    print(f"== {name}", flush=True)
    env = dict(os.environ, SLUBMALLOC_STATS="1",
               CARGO_TARGET_DIR=os.path.join(workdir, "target"))
    p = subprocess.run(["cargo", "run", "--release", "--quiet"], cwd=crate, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        return f"exit status {p.returncode}\n{out[-3000:]}"
    if "slubmalloc" not in out:
        return f"ran, but printed no statistics report with SLUBMALLOC_STATS=1\n{out[-3000:]}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print what would run")
    args = ap.parse_args()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci_run = f.read()

    work = []
    for doc in DOCUMENTS:
        for line, tag, text in blocks(os.path.join(ROOT, doc)):
            if tag == "sh":
                # The test command alone is `.ci/run`'s; the live view runs
                # until stopped: each is a script of its own, the rest of
                # a block one script.
                script = []
                for cmd in commands(text):
                    if strip_comment(cmd) == TEST_COMMAND or is_live_view(cmd):
                        if script:
                            work.append((f"{doc}:{line}: " + "; ".join(map(strip_comment, script)),
                                         "sh", "\n".join(script)))
                            script = []
                        work.append((f"{doc}:{line}: {strip_comment(cmd)}", "sh", cmd))
                    else:
                        script.append(cmd)
                if script:
                    work.append((f"{doc}:{line}: " + "; ".join(map(strip_comment, script)),
                                 "sh", "\n".join(script)))
            elif tag == "rust":
                work.append((f"{doc}:{line}: the Rust program", "rust", text))
    if not work:
        sys.exit("ci/readme_commands.py: no `sh` or `rust` block found")
    if args.list:
        for name, _, _ in work:
            print(name)
        return

    target = Target()
    failed = []
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        try:
            for name, kind, cmd in work:
                start = time.monotonic()
                if kind == "rust":
                    why = run_rust(name, cmd, tmp)
                elif strip_comment(cmd) == TEST_COMMAND:
                    ran = re.search(rf"^{re.escape(TEST_COMMAND)}\b", ci_run, re.M)
                    why = None if ran else f".ci/run does not run {TEST_COMMAND}, the test command"
                    print(f"== {name} (run by .ci/run itself)", flush=True)
                else:
                    live_view = is_live_view(cmd)
                    cmd = re.sub(r"\byour-program\b", YOUR_PROGRAM, cmd)
                    if re.search(r"\bPID\b", cmd):
                        cmd = re.sub(r"\bPID\b", target.pid(), cmd)
                    why = run_checked(name, cmd, live_view=live_view)
                print(f"   ({time.monotonic() - start:.0f} s)", flush=True)
                if why:
                    print(f"FAILED: {name}: {why}", flush=True)
                    failed.append(name)
        finally:
            target.stop()
    print(f"readme: {len(work) - len(failed)} passed, {len(failed)} failed")
    for name in failed:
        print(f"  failed: {name}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
