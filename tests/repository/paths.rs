//! Every path of the repository that the docs, comments and scripts cite
//! (`src/slab.rs`, `tests/processes/stats_dump.rs`, `ci/model.sh`) exists:
//! a file that moves leaves no comment pointing at where it was.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top directories whose paths are checked where they are cited.
const TOPS: [&str; 7] = ["src", "tests", "ci", "benches", "bench", "fuzz", "preload"];

/// Directories the scripts create (outputs, not sources): paths into them
/// are cited before they exist.
const OUTPUTS: [&str; 4] = ["ci/out/", "fuzz/artifacts/", "fuzz/corpus/", "fuzz/target/"];

/// The files read: the top-level documents and manifests, and the sources
/// and scripts under these directories (no build output, no data).
const READ_UNDER: [&str; 8] = [
    "src",
    "tests",
    "ci",
    "benches",
    "fuzz/fuzz_targets",
    "preload",
    ".ci",
    "bench/report",
];

fn is_text_source(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    let ext = p.extension().map(|e| e.to_string_lossy().into_owned());
    matches!(
        ext.as_deref(),
        Some("rs" | "c" | "cpp" | "h" | "sh" | "py" | "md" | "toml")
    ) || (p
        .parent()
        .and_then(|d| d.file_name())
        .is_some_and(|d| d == ".ci")
        && name == "run")
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && name != "raw" {
                files_under(&p, out);
            }
        } else if is_text_source(&p) {
            out.push(p);
        }
    }
}

fn files() -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("md" | "toml")) {
            out.push(p);
        }
    }
    for dir in READ_UNDER {
        files_under(&root.join(dir), &mut out);
    }
    out
}

/// The repository paths cited in `text`: a top directory of `TOPS` and what
/// follows it, not preceded by a path character (so `target/preload/x` or
/// `"/src/lib.rs"` is not one), nor followed by a placeholder (`<name>`,
/// `*`, `{a,b}`, `$VAR`). Trailing punctuation is not part of the path.
fn cited(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut out = Vec::new();
    for top in TOPS {
        let needle = format!("{top}/");
        let mut from = 0;
        while let Some(i) = text[from..].find(&needle) {
            let start = from + i;
            from = start + needle.len();
            if text[..start].chars().next_back().is_some_and(is_path_char) {
                continue;
            }
            let len = text[start..]
                .find(|c: char| !is_path_char(c))
                .unwrap_or(text.len() - start);
            let end = start + len;
            if text[end..].starts_with(['<', '*', '{', '$']) {
                continue;
            }
            let path = text[start..end].trim_end_matches(['.', ',', ':', ';']);
            out.push(path.to_string());
        }
    }
    out
}

#[test]
fn the_citation_finder_takes_paths_and_leaves_placeholders() {
    let text = "see `src/slab.rs`, tests/processes/misuse.rs. Not target/preload/x, \
                \"/src/lib.rs\", tests/c/<name>.c, tests/c/misuse_*.c or ci/$X.";
    assert_eq!(cited(text), ["src/slab.rs", "tests/processes/misuse.rs"]);
}

#[test]
fn every_path_the_docs_and_comments_cite_exists() {
    let root = root();
    let mut missing = Vec::new();
    for file in files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for path in cited(&text) {
            // A C program may be named by its source without the `.c`
            // (`benches/c/churn 4 400000000 2000`).
            let exists = root.join(&path).exists() || root.join(format!("{path}.c")).exists();
            if OUTPUTS.iter().any(|o| path.starts_with(o)) || exists {
                continue;
            }
            let at = file.strip_prefix(&root).unwrap().display();
            missing.push(format!("{at}: {path}"));
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "paths cited that do not exist:\n{}",
        missing.join("\n")
    );
}
