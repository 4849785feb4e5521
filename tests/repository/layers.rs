//! The crate's modules keep the order that `ARCHITECTURE.md` declares:
//! every module of `src/` is in the list and every module listed exists, a
//! module uses only modules listed above it (in a lower layer, or earlier in
//! its own), so no import cycle exists, and no source file is longer than
//! 700 lines. A nested
//! module is named by its path (`prof::table`, `src/prof/table.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    root().join("src")
}

/// The place of each module, from the "## Layers" section of
/// `ARCHITECTURE.md`: a heading `### Layer N: ...` starts layer N, and each
/// item under it, "- `module`: what it is", names one module; a module's
/// place is its layer and its rank in the layer's list.
fn declared_layers() -> BTreeMap<String, (usize, usize)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    parse_layers(&text)
}

fn parse_layers(text: &str) -> BTreeMap<String, (usize, usize)> {
    let mut layers = BTreeMap::new();
    let mut in_section = false;
    let mut layer = None;
    let mut rank = 0;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_section = title.trim() == "Layers";
            layer = None;
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### Layer ") {
            let number = heading.split(':').next().unwrap().trim();
            let n = number
                .parse::<usize>()
                .unwrap_or_else(|_| panic!("ARCHITECTURE.md: a layer numbered {number:?}"));
            layer = Some(n);
            rank = 0;
        } else if let Some(item) = line.strip_prefix("- `") {
            let name = item.split('`').next().unwrap();
            let n = layer.unwrap_or_else(|| panic!("ARCHITECTURE.md: `{name}` before any layer"));
            rank += 1;
            let before = layers.insert(name.to_string(), (n, rank));
            assert!(before.is_none(), "ARCHITECTURE.md lists `{name}` twice");
        }
    }
    assert!(
        !layers.is_empty(),
        "ARCHITECTURE.md has no \"## Layers\" list"
    );
    layers
}

#[test]
fn the_layer_parser_reads_headings_and_items() {
    let text = "## Layers\n\nprose\n### Layer 1: low\n- `a`: A.\n- `b`: B, not `c`.\n\
                ### Layer 2: high\n- `d`: D.\n## Next\n- `e`: not a module.\n";
    let expected: BTreeMap<String, (usize, usize)> = [("a", (1, 1)), ("b", (1, 2)), ("d", (2, 1))]
        .into_iter()
        .map(|(m, l)| (m.to_string(), l))
        .collect();
    assert_eq!(parse_layers(text), expected);
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

/// The paths a source file refers to, as written after `crate::`
/// (`crate::m::x` anywhere, each item of `use crate::{m, n::x}`) or, in a
/// nested module, after `super::`, made absolute (`super::x` in `a::b` is
/// `a::x`); `resolve` finds the module each names.
fn uses(code: &str, module: &str) -> BTreeSet<String> {
    let parent = module.rsplit_once("::").map(|(p, _)| p);
    let mut out = BTreeSet::new();
    for (prefix, base) in [("crate::", None), ("super::", parent)] {
        if prefix == "super::" && base.is_none() {
            continue; // a test module's `super::`: the module itself.
        }
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = &code[..code.len() - rest.len() + i];
            rest = &rest[i + prefix.len()..];
            if before.ends_with(|c: char| is_ident(c) || c == ':') {
                continue; // `super::super::x`, `$crate::x`: not this form.
            }
            let mut add = |path: String| {
                if !path.is_empty() {
                    out.insert(match base {
                        Some(b) => format!("{b}::{path}"),
                        None => path,
                    });
                }
            };
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap();
                for item in group[..end].split(',') {
                    add(path_at(item.trim()));
                }
            } else {
                add(path_at(rest));
            }
        }
    }
    out
}

/// The `a::b::c` path at the start of `text`.
fn path_at(text: &str) -> String {
    let path: String = text
        .chars()
        .take_while(|&c| is_ident(c) || c == ':')
        .collect();
    path.trim_end_matches(':').to_string()
}

/// The module a path names: its longest prefix that is a module of
/// `modules` (`prof::table::TABLES` is in `prof::table`), else its first
/// segment (an item of `lib.rs`, or a module that is not there).
fn resolve(path: &str, modules: &BTreeSet<String>) -> String {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
        .unwrap_or_else(|| segments[0].to_string())
}

/// Every `.rs` file under `dir`, with its module's name: `src/slab.rs` is
/// `slab`, `src/prof/table.rs` is `prof::table`, and `src/prof/mod.rs` is
/// `prof`, the module of its directory.
fn source_files(dir: &std::path::Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = if prefix.is_empty() {
            name.clone()
        } else if name == "mod" {
            prefix.to_string()
        } else {
            format!("{prefix}::{name}")
        };
        if path.is_dir() {
            source_files(&path, &module, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((module, path));
        }
    }
}

fn sources() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    source_files(&src(), "", &mut out);
    out
}

/// The modules a directory holds (`prof` of `src/prof/`): their `mod.rs`
/// only declares their submodules, and is checked for that, not layered.
fn is_directory_module(path: &std::path::Path) -> bool {
    path.file_name().is_some_and(|n| n == "mod.rs")
}

/// A module's unit tests in a file of their own (`src/segment/tests.rs`,
/// `segment::tests`): part of the module, not layered.
fn is_unit_tests(module: &str) -> bool {
    module.ends_with("::tests")
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<_> = sources()
        .into_iter()
        .filter(|(m, _)| !is_unit_tests(m))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g = BTreeMap::new();
    for (module, path) in files.into_iter().filter(|(_, p)| !is_directory_module(p)) {
        let code = code_of(&std::fs::read_to_string(&path).unwrap());
        let mut used: BTreeSet<String> = uses(&code, &module)
            .iter()
            .map(|p| resolve(p, &modules))
            .collect();
        used.remove(&module);
        g.insert(module, used);
    }
    g
}

#[test]
fn nested_modules_are_named_by_their_path() {
    let modules: BTreeSet<String> = ["prof", "prof::table", "slab"]
        .into_iter()
        .map(String::from)
        .collect();
    let code = "use crate::prof::table::{Tables, TABLES};\nuse crate::{slab::Slab, prof};\n\
                let x = super::table::ln(1.0);";
    let used: BTreeSet<String> = uses(code, "prof::sample")
        .iter()
        .map(|p| resolve(p, &modules))
        .collect();
    let expected: BTreeSet<String> = ["prof::table", "slab", "prof"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(used, expected);
}

#[test]
fn a_module_directory_only_declares_its_submodules() {
    let mut code_in_mod = Vec::new();
    for (module, path) in sources().iter().filter(|(_, p)| is_directory_module(p)) {
        let code = code_of(&std::fs::read_to_string(path).unwrap());
        let other = code.lines().map(str::trim).any(|l| {
            !(l.is_empty()
                || l.starts_with("#[")
                || (l.ends_with(';') && l.trim_start_matches("pub(crate) ").starts_with("mod ")))
        });
        if other {
            code_in_mod.push(module.clone());
        }
    }
    assert!(
        code_in_mod.is_empty(),
        "mod.rs with code beyond `mod` lines (layer it as a module, or move the code): {code_in_mod:?}"
    );
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
        "modules missing from ARCHITECTURE.md's layers: {missing:?}"
    );
}

#[test]
fn every_module_in_the_layers_exists() {
    let modules = graph();
    let gone: Vec<_> = declared_layers()
        .into_keys()
        .filter(|m| !modules.contains_key(m))
        .collect();
    assert!(
        gone.is_empty(),
        "ARCHITECTURE.md lists modules that src/ does not have: {gone:?}"
    );
}

#[test]
fn a_module_uses_only_modules_listed_above_it() {
    let layers = declared_layers();
    let place = |m: &str| {
        if m == "lib" {
            (usize::MAX, 0)
        } else {
            layers[m]
        }
    };
    let mut upward = Vec::new();
    // A module missing from the list is `every_module_is_in_a_declared_layer`'s.
    for (m, used) in graph()
        .into_iter()
        .filter(|(m, _)| m == "lib" || layers.contains_key(m))
    {
        for u in used.iter().filter(|u| layers.contains_key(*u)) {
            if place(u) > place(&m) {
                let ((lm, rm), (lu, ru)) = (place(&m), place(u));
                upward.push(format!(
                    "{m} (layer {lm}, #{rm}) -> {u} (layer {lu}, #{ru})"
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "edges up the declared order (a module uses one listed below it):\n{}",
        upward.join("\n")
    );
}

/// The paths the `use crate::...;` items of a file import (`use
/// crate::{a, b::{self, X}}` imports `a`, `b` and `b::X`).
fn use_line_paths(code: &str) -> BTreeSet<String> {
    fn expand(prefix: &str, tree: &str, out: &mut BTreeSet<String>) {
        let tree = tree.trim();
        let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) else {
            let path = format!("{prefix}{tree}");
            let path = path.split(" as ").next().unwrap().trim();
            out.insert(path.trim_end_matches("::self").to_string());
            return;
        };
        let (mut depth, mut start) = (0, 0);
        let bytes = inner.as_bytes();
        for i in 0..=bytes.len() {
            let c = bytes.get(i).copied().unwrap_or(b',');
            match c {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                b',' if depth == 0 => {
                    let part = inner[start..i].trim();
                    if !part.is_empty() {
                        match part.find('{') {
                            Some(j) => expand(&format!("{prefix}{}", &part[..j]), &part[j..], out),
                            None => expand(prefix, part, out),
                        }
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
    }
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("use crate::") {
        let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
        let before = rest[line_start..i].trim();
        let item = before.is_empty() || before.starts_with("pub");
        rest = &rest[i + "use crate::".len()..];
        let end = rest.find(';').unwrap();
        if item {
            let tree = rest[..end].replace('\n', " ");
            match tree.find('{') {
                Some(j) => expand(&tree[..j], &tree[j..], &mut out),
                None => expand("", &tree, &mut out),
            }
        }
        rest = &rest[end..];
    }
    out
}

#[test]
fn the_use_line_reader_reads_groups_and_nesting() {
    let code = "use crate::a;\nuse crate::{b::{self, X}, c::d as e};\npub use crate::f::G;\n\
                fn x() { crate::h::i(); }";
    let expected: BTreeSet<String> = ["a", "b", "b::X", "c::d", "f::G"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(use_line_paths(code), expected);
}

/// A file's `use` lines say what it touches: every module it reaches,
/// through a path written anywhere, is imported at its top (as a module,
/// `use crate::node;`, or by items of it), so that they list its edges.
#[test]
fn a_module_imports_every_module_it_uses() {
    let files: Vec<_> = sources()
        .into_iter()
        .filter(|(m, p)| !is_unit_tests(m) && !is_directory_module(p))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let graph = graph();
    let mut unlisted = Vec::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        // A module's own `#[cfg(test)] mod tests` imports what it tests.
        let text = text.split("#[cfg(all(test").next().unwrap();
        let code = code_of(text);
        let imported: BTreeSet<String> = use_line_paths(&code)
            .iter()
            .map(|p| resolve(p, &modules))
            .collect();
        for used in graph[module.as_str()]
            .iter()
            .filter(|u| modules.contains(*u))
        {
            let in_tests_only = !uses(&code, module)
                .iter()
                .any(|p| &resolve(p, &modules) == used);
            if !imported.contains(used) && !in_tests_only {
                unlisted.push(format!("{module} -> {used}"));
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "modules reached with no `use` line for them:\n{}",
        unlisted.join("\n")
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
fn no_import_cycle() {
    let found: Vec<_> = cycles(&graph())
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    assert!(found.is_empty(), "import cycles: {found:?}");
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
fn no_source_file_is_over_700_lines() {
    let long: Vec<_> = sources()
        .into_iter()
        .map(|(_, p)| p)
        .filter(|p| std::fs::read_to_string(p).unwrap().lines().count() > 700)
        .collect();
    assert!(long.is_empty(), "over 700 lines: {long:?}");
}
