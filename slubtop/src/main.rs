//! slubtop: a running slubmalloc process's size classes, live, from outside,
//! as `slabtop` shows the kernel's. It reads the process's memory with
//! `process_vm_readv` (the permission a debugger needs) through the anchor
//! the allocator exports (`slubmalloc_anchor`, src/anchor.rs): the process
//! runs no code for it, gets no signal, and is never written to.
//!
//! ```text
//! slubtop PID                       live table, every second (q quits)
//! slubtop --interval 0.5 --sort allocs PID
//! slubtop --once [--json | --prometheus] PID
//! ```

mod elf;
mod snapshot;
mod target;
mod view;

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use snapshot::Reader;
use target::Error;
use view::SortKey;

const USAGE: &str = "\
usage: slubtop [options] PID

Shows the size classes of a process that uses slubmalloc (by LD_PRELOAD of
libslubmalloc.so, or as a Rust program's #[global_allocator]), read from
outside: no signal, no restart, nothing written to the process. Needs the
permission a debugger needs: the process's user, or CAP_SYS_PTRACE.

options:
  --once            print one snapshot and exit (text table; see --json)
  --json            with --once: the JSON document of the in-process report
  --prometheus      with --once: the Prometheus text format (a metrics
                    collector's text file)
  --interval SECS   seconds between screens of the live view (default 1)
  --sort KEY        size, inuse, bytes (default), total, slabs, partial,
                    frag, allocs, frees, remote
  --count N         stop after N screens
  --verbose         say on stderr how many reads each snapshot took
  --help            this text

keys in the live view: s o b t l p x a f r sort (size, in use, bytes, total,
slabs, partial, frag, allocations/s, frees/s, remote frees/s); q quits.
";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Once {
    No,
    Text,
    Json,
    Prometheus,
}

struct Args {
    pid: i32,
    once: Once,
    interval: f64,
    sort: SortKey,
    count: Option<u64>,
    verbose: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut pid, mut once, mut format) = (None, false, Once::Text);
    let (mut interval, mut sort, mut count) = (1.0, SortKey::Bytes, None);
    let mut verbose = false;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--once" => once = true,
            "--verbose" => verbose = true,
            "--json" => format = Once::Json,
            "--prometheus" => format = Once::Prometheus,
            "--interval" => {
                let v = value("--interval")?;
                interval = v
                    .parse()
                    .ok()
                    .filter(|&s: &f64| s >= 0.01 && s.is_finite())
                    .ok_or(format!("--interval {v}: seconds, at least 0.01"))?;
            }
            "--sort" => {
                let v = value("--sort")?;
                sort = SortKey::from_name(&v).ok_or(format!("--sort {v}: not a sort key"))?;
            }
            "--count" => {
                let v = value("--count")?;
                count = Some(v.parse().map_err(|_| format!("--count {v}: a number"))?);
            }
            _ if pid.is_none() && !a.starts_with('-') => {
                pid = Some(
                    a.parse::<i32>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or(format!("{a}: not a process id"))?,
                );
            }
            _ => return Err(format!("unexpected argument {a}")),
        }
    }
    if !once && format != Once::Text {
        return Err("--json and --prometheus go with --once".into());
    }
    Ok(Args {
        pid: pid.ok_or("no PID given")?,
        once: if once { format } else { Once::No },
        interval,
        sort,
        count,
        verbose,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprint!("slubtop: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slubtop: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Error> {
    let reader = Reader::open(args.pid)?;
    if args.once != Once::No {
        let snap = reader.snapshot()?;
        if args.verbose {
            eprintln!("slubtop: consistent snapshot after {} reads", snap.tries);
        }
        if snap.nothing_mapped() {
            eprintln!(
                "slubtop: {}",
                view::nothing_mapped_note(args.pid, &reader.file)
            );
        }
        let out = match args.once {
            Once::Json => view::json(&snap) + "\n",
            Once::Prometheus => view::prometheus(args.pid, &snap),
            _ => view::text(args.pid, &snap),
        };
        let _ = std::io::stdout().write_all(out.as_bytes());
        return Ok(());
    }
    live(&reader, args)
}

/// The process's name, for the title.
fn command_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The live view: a screen per interval; on a terminal it redraws in place
/// and reads sort keys, elsewhere it prints screen after screen.
fn live(reader: &Reader, args: &Args) -> Result<(), Error> {
    let name = command_name(args.pid);
    let keys = terminal::Keys::new();
    let mut sort = args.sort;
    let mut previous: Option<(snapshot::Snapshot, Instant)> = None;
    let mut screens = 0u64;
    loop {
        let snap = match reader.snapshot() {
            Err(Error::Gone { pid }) => return Err(Error::Gone { pid }),
            other => other?,
        };
        let taken = Instant::now();
        let before = previous
            .as_ref()
            .map(|(p, t)| (p, taken.duration_since(*t).as_secs_f64().max(1e-6)));
        let rows = keys
            .as_ref()
            .map_or(usize::MAX, |k| k.rows().saturating_sub(6));
        let mut screen =
            view::live_screen(args.pid, &name, &snap, before, args.interval, sort, rows);
        if snap.nothing_mapped() {
            // Under the table, which is empty.
            screen += &view::nothing_mapped_note(args.pid, &reader.file);
            screen.push('\n');
        }
        let mut out = std::io::stdout().lock();
        let _ = match keys {
            // Home, clear to the end: one redraw, no flicker of a blank screen.
            Some(_) => write!(out, "\x1b[H{}\x1b[J", screen.replace('\n', "\x1b[K\r\n")),
            None => writeln!(out, "{screen}"),
        };
        let _ = out.flush();
        drop(out);
        previous = Some((snap, taken));
        screens += 1;
        if args.count.is_some_and(|n| screens >= n) {
            return Ok(());
        }
        let deadline = taken + Duration::from_secs_f64(args.interval);
        match &keys {
            Some(k) => match k.wait(deadline) {
                terminal::Key::Quit => return Ok(()),
                terminal::Key::Char(c) => {
                    if let Some(s) = SortKey::from_key(c) {
                        sort = s;
                    }
                }
                terminal::Key::None => {}
            },
            None => std::thread::sleep(deadline.saturating_duration_since(Instant::now())),
        }
    }
}

/// The terminal in the live view: keys read one at a time without echo,
/// restored on every way out (return, `q`, Ctrl-C).
mod terminal {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    static INTERRUPTED: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_interrupt(_: libc::c_int) {
        // Relaxed: a flag alone, nothing published with it; `wait` reads it.
        INTERRUPTED.store(true, Ordering::Relaxed);
    }

    pub enum Key {
        None,
        Quit,
        Char(u8),
    }

    pub struct Keys {
        saved: libc::termios,
    }

    impl Keys {
        /// None unless stdin and stdout are terminals.
        pub fn new() -> Option<Keys> {
            // SAFETY: isatty, tcgetattr, tcsetattr and sigaction on our own
            // fds and a zeroed struct we fill in.
            unsafe {
                if libc::isatty(0) == 0 || libc::isatty(1) == 0 {
                    return None;
                }
                let mut saved: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(0, &mut saved) != 0 {
                    return None;
                }
                let mut raw = saved;
                raw.c_lflag &= !(libc::ICANON | libc::ECHO);
                raw.c_cc[libc::VMIN] = 0;
                raw.c_cc[libc::VTIME] = 0;
                libc::tcsetattr(0, libc::TCSANOW, &raw);
                // Ctrl-C ends the view through `wait`, so the terminal is
                // restored; no SA_RESTART, so poll returns.
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
                libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
                // The alternate screen, as top's.
                print!("\x1b[?1049h\x1b[?25l");
                Some(Keys { saved })
            }
        }

        /// Rows of the terminal.
        pub fn rows(&self) -> usize {
            // SAFETY: TIOCGWINSZ fills a winsize we own.
            unsafe {
                let mut ws: libc::winsize = std::mem::zeroed();
                if libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_row > 0 {
                    ws.ws_row as usize
                } else {
                    24
                }
            }
        }

        /// Waits for a key until `deadline`.
        pub fn wait(&self, deadline: Instant) -> Key {
            loop {
                // Relaxed: pairs with the handler's store; only the flag.
                if INTERRUPTED.load(Ordering::Relaxed) {
                    return Key::Quit;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Key::None;
                }
                let mut pfd = libc::pollfd {
                    fd: 0,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd of ours.
                let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as i32) };
                if n <= 0 {
                    continue;
                }
                let mut b = 0u8;
                // SAFETY: one byte into `b`.
                if unsafe { libc::read(0, (&raw mut b).cast(), 1) } == 1 {
                    return match b {
                        b'q' | b'Q' => Key::Quit,
                        c => Key::Char(c),
                    };
                }
            }
        }
    }

    impl Drop for Keys {
        fn drop(&mut self) {
            print!("\x1b[?25h\x1b[?1049l");
            // SAFETY: restores the settings read in `new`.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.saved) };
        }
    }
}
