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
