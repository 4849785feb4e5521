//! The README documents every environment variable the allocator reads,
//! with the default the code uses, and no variable the code does not read.

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

#[test]
fn readme_lists_every_environment_variable_with_its_default() {
    let readme = readme();
    for (name, default, _) in slubmalloc::ENVIRONMENT_VARIABLES {
        let row = format!("| `{name}` | {default} |");
        assert!(
            readme.contains(&row),
            "README is missing the row starting {row}"
        );
    }
}

#[test]
fn readme_documents_no_variable_the_allocator_does_not_read() {
    for line in readme().lines().filter(|l| l.starts_with("| `SLUBMALLOC_")) {
        let name = line.split('`').nth(1).unwrap();
        assert!(
            slubmalloc::ENVIRONMENT_VARIABLES
                .iter()
                .any(|(n, _, _)| *n == name),
            "README documents {name}, which the allocator does not read"
        );
    }
}

#[test]
fn readme_usage_example_is_the_one_in_the_crate_docs() {
    let readme = readme();
    let start = readme
        .find("```rust\n")
        .expect("README has a ```rust block")
        + 8;
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    assert!(
        docs.contains(block),
        "src/lib.rs's crate docs (docs.rs) lack the README's usage example:\n{block}"
    );
}
