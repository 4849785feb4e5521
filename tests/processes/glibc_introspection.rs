//! glibc's introspection calls answered by slubmalloc: `mallinfo2`,
//! `mallinfo`, `malloc_info` and the closing lines of `malloc_stats`.
//! `tests/c/glibc_introspection.c` runs one group per invocation; each group
//! passes on glibc's malloc first (its checks are glibc's meaning of the
//! fields), then under the preload, where slubmalloc's own numbers are
//! checked too.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;

fn program() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile_c("glibc_introspection", &[]))
        .clone()
}

/// Runs `group` on glibc's malloc and then preloaded; both must print
/// "ok <group>". Returns (glibc's output, slubmalloc's).
fn contract(group: &str) -> (Output, Output) {
    let run = |preloaded| {
        let o = common::run_guarded(&program(), &[group], preloaded, &[], LIMIT);
        assert!(
            o.status.success() && common::stdout(&o).contains(&format!("ok {group}\n")),
            "group {group} failed (preloaded: {preloaded}): {}\nstdout:\n{}\nstderr:\n{}",
            o.status,
            common::stdout(&o),
            common::stderr(&o)
        );
        o
    };
    (run(false), run(true))
}

/// The fields of the line of stdout that starts with `label ` (`k=v ...`).
fn fields(o: &Output, label: &str) -> HashMap<String, u64> {
    let out = common::stdout(o);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{label} ")))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{out}"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_owned(), v.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn mallinfo2_counts_live_blocks_and_drops_after_free() {
    // The program checks uordblks, arena = uordblks + fordblks, hblks and
    // hblkhd on both mallocs; here slubmalloc's numbers are checked exactly.
    let (_, o) = contract("mallinfo2");
    let live = fields(&o, "live");
    let after = fields(&o, "after");
    // 1000-byte requests are served from the 1024-byte class.
    let class = slubmalloc::class_size(1000).unwrap() as u64;
    assert!(live["uordblks"] >= 1024 * class, "{live:?}");
    assert_eq!(live["hblks"], 1, "{live:?}");
    assert_eq!(live["hblkhd"], MIB, "{live:?}");
    // The freed 1 MiB mapping is cached: counted in arena and keepcost.
    assert_eq!(after["ordblks"], 1, "{after:?}");
    assert_eq!(after["keepcost"], MIB, "{after:?}");
    assert_eq!(after["arena"], live["arena"] + MIB, "{after:?}");
}

#[test]
fn mallinfo_saturates_its_int_fields() {
    let (glibc, o) = contract("mallinfo");
    let value = |o: &Output, key: &str| -> i64 {
        common::stdout(o)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} "))?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in:\n{}", common::stdout(o)))
    };
    assert!(value(&o, "hblkhd2") >= 3 << 30);
    assert_eq!(value(&o, "hblkhd"), i32::MAX as i64, "3 GiB live");
    // glibc 2.36 truncates instead (3 GiB reads as -1073729536 there).
    println!(
        "glibc's mallinfo hblkhd for 3 GiB: {}",
        value(&glibc, "hblkhd")
    );
}

/// One element of the XML: its name and attributes.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: HashMap<String, String>,
}

/// The elements of `xml` in document order, checking that it is well
/// formed (every open tag closed in order, nothing but whitespace outside
/// tags).
fn parse_xml(xml: &str) -> Vec<(Vec<String>, Element)> {
    let mut open: Vec<String> = Vec::new();
    let mut out = Vec::new();
    let mut rest = xml.trim();
    while !rest.is_empty() {
        assert!(rest.starts_with('<'), "text outside a tag: {rest:.40}");
        let end = rest.find('>').expect("an unclosed tag");
        let tag = &rest[1..end];
        rest = rest[end + 1..].trim_start();
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name),
                "closing tag out of order"
            );
            continue;
        }
        let empty = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let mut parts = tag.splitn(2, ' ');
        let name = parts.next().unwrap().to_owned();
        let mut attrs = HashMap::new();
        for kv in parts.next().unwrap_or("").split_whitespace() {
            let (k, v) = kv.split_once('=').expect("an attribute");
            let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
            attrs.insert(k.to_owned(), v.expect("a quoted value").to_owned());
        }
        out.push((
            open.clone(),
            Element {
                name: name.clone(),
                attrs,
            },
        ));
        if !empty {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    out
}

#[test]
fn malloc_info_writes_glibc_xml_with_slubmalloc_numbers() {
    let (glibc, o) = contract("malloc_info");
    let xml_of = |o: &Output| -> String {
        let out = common::stdout(o);
        let start = out.find("<malloc").expect("the XML");
        let end = out.find("</malloc>\n").expect("the XML's end") + "</malloc>\n".len();
        out[start..end].to_owned()
    };
    // The top-level totals (children of <malloc>), by type.
    let totals = |els: &[(Vec<String>, Element)], name: &str, ty: &str| -> (u64, u64) {
        let e = els
            .iter()
            .find(|(path, e)| path.len() == 1 && e.name == name && e.attrs["type"] == ty)
            .unwrap_or_else(|| panic!("no top-level <{name} type=\"{ty}\">"))
            .1
            .attrs
            .clone();
        let n = |k: &str| e.get(k).map_or(0, |v| v.parse::<u64>().expect("a number"));
        (n("count"), n("size"))
    };
    for o in [&glibc, &o] {
        let els = parse_xml(&xml_of(o));
        assert_eq!(els[0].1.name, "malloc");
        assert_eq!(els[0].1.attrs["version"], "1");
        assert!(els.iter().any(|(_, e)| e.name == "heap"));
        let (count, size) = totals(&els, "total", "mmap");
        assert!(count >= 1 && size >= MIB, "mmap totals {count} {size}");
    }
    let els = parse_xml(&xml_of(&o));
    let m = fields(&o, "mallinfo2");
    assert_eq!(totals(&els, "total", "mmap"), (1, MIB));
    assert_eq!(totals(&els, "total", "mmap"), (m["hblks"], m["hblkhd"]));
    let (_, system) = totals(&els, "system", "current");
    let (_, max) = totals(&els, "system", "max");
    assert_eq!(system, m["arena"] + m["hblkhd"], "all bytes mapped");
    assert!(max >= system + 64 * MIB, "64 MiB more were mapped before");
    // <sizes> lists the classes with free slots; their sum is "fast".
    let sizes: Vec<&Element> = els
        .iter()
        .filter(|(path, e)| path.last().map(String::as_str) == Some("sizes") && e.name == "size")
        .map(|(_, e)| e)
        .collect();
    let n = |e: &Element, k: &str| e.attrs[k].parse::<u64>().unwrap();
    let mut sum = (0, 0);
    for e in &sizes {
        assert_eq!(n(e, "from"), n(e, "to"));
        assert!(slubmalloc::class_size(n(e, "from") as usize) == Some(n(e, "from") as usize));
        assert_eq!(n(e, "total"), n(e, "count") * n(e, "from"));
        sum = (sum.0 + n(e, "count"), sum.1 + n(e, "total"));
    }
    assert!(!sizes.is_empty() && sum.0 > 0);
    assert_eq!(totals(&els, "total", "fast"), sum);
}

/// The values of malloc_stats' closing lines, which must end stderr.
fn closing_lines(o: &Output) -> HashMap<String, u64> {
    let err = common::stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 5, "{err}");
    let tail = &lines[lines.len() - 5..];
    assert_eq!(tail[0], "Total (incl. mmap):", "{err}");
    let keys = [
        "system bytes",
        "in use bytes",
        "max mmap regions",
        "max mmap bytes",
    ];
    keys.iter()
        .zip(&tail[1..])
        .map(|(k, l)| {
            let (key, value) = l.split_once('=').unwrap_or_else(|| panic!("{l:?}"));
            assert_eq!(key.trim_end(), *k, "{err}");
            assert_eq!(key.len(), 17, "glibc's column: {l:?}");
            (k.to_string(), value.trim().parse().expect("a number"))
        })
        .collect()
}

#[test]
fn malloc_stats_ends_with_glibc_closing_lines() {
    let (glibc, o) = contract("stats");
    // 1 MiB in small blocks and one 1 MiB block live, on both mallocs.
    for o in [&glibc, &o] {
        let v = closing_lines(o);
        assert!(v["in use bytes"] >= 2 * 1_000_000, "{v:?}");
        assert!(v["system bytes"] >= v["in use bytes"], "{v:?}");
        assert!(
            v["max mmap regions"] >= 1 && v["max mmap bytes"] >= MIB,
            "{v:?}"
        );
    }
    let v = closing_lines(&o);
    assert_eq!((v["max mmap regions"], v["max mmap bytes"]), (1, MIB));
    // The same numbers as slubmalloc's own totals line.
    let err = common::stderr(&o);
    let total = |label: &str| -> u64 {
        let at = err.find(&format!("{label} ")).expect(label) + label.len() + 1;
        err[at..].split(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(v["in use bytes"], total("in use"));
    assert_eq!(v["system bytes"], total("mapped"));
}
