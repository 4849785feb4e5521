//! The crate's modules keep the layering that `src/lib.rs` declares: no
//! module uses a module of a higher layer, no import cycle spans more than
//! three modules, and no source file is longer than 800 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layer of each module, from the numbered list in `src/lib.rs`'s docs
/// ("//! 3. `freelist`, `slab`: ..."; the names in backticks before the
/// colon, which may come on the item's continuation lines).
fn declared_layers() -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut items: Vec<(usize, String)> = Vec::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//!") else {
            continue;
        };
        let numbered = rest
            .trim_start()
            .split_once(". ")
            .and_then(|(n, text)| Some((n.parse::<usize>().ok()?, text)));
        match numbered {
            Some((layer, text)) => items.push((layer, text.to_string())),
            None if rest.starts_with("    ") => {
                if let Some((_, text)) = items.last_mut() {
                    text.push(' ');
                    text.push_str(rest.trim());
                }
            }
            None => {}
        }
    }
    let mut layers = BTreeMap::new();
    for (layer, text) in items {
        let names = text.split(':').next().unwrap();
        for name in names.split('`').skip(1).step_by(2) {
            layers.insert(name.to_string(), layer);
        }
    }
    layers
}

/// Strips `//` comments (the crate has no block comments in code).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The modules a source file refers to: `crate::m` anywhere, and the first
/// segment of each item in `use crate::{m, n::x}`.
fn uses(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap();
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            out.insert(name);
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        let mut used = uses(&code);
        used.remove(&module);
        g.insert(module, used);
    }
    g
}

#[test]
fn every_module_is_in_a_declared_layer() {
    let layers = declared_layers();
    let missing: Vec<_> = graph()
        .keys()
        .filter(|m| !layers.contains_key(*m) && *m != "lib")
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "modules missing from lib.rs's layers: {missing:?}"
    );
}

#[test]
fn no_module_uses_a_higher_layer() {
    let layers = declared_layers();
    let layer = |m: &str| if m == "lib" { usize::MAX } else { layers[m] };
    let mut upward = Vec::new();
    for (m, used) in graph() {
        for u in used.iter().filter(|u| layers.contains_key(*u)) {
            if layer(u) > layer(&m) {
                upward.push(format!(
                    "{m} (layer {}) -> {u} (layer {})",
                    layer(&m),
                    layer(u)
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "edges up the declared order:\n{}",
        upward.join("\n")
    );
}

/// Strongly connected components (Tarjan), as sets of module names.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        for w in s.g[v].iter().filter(|w| s.g.contains_key(*w)) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_import_cycle_spans_more_than_three_modules() {
    let big: Vec<_> = cycles(&graph())
        .into_iter()
        .filter(|c| c.len() > 3)
        .collect();
    assert!(big.is_empty(), "import cycles over three modules: {big:?}");
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
        .into_iter()
        .map(|(m, u)| (m.to_string(), BTreeSet::from([u.to_string()])))
        .collect();
    assert_eq!(cycles(&g).iter().map(|c| c.len()).max(), Some(4));
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<_> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::read_to_string(p).unwrap().lines().count() > 800)
        .collect();
    assert!(long.is_empty(), "over 800 lines: {long:?}");
}
