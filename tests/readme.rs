//! The README documents every environment variable the allocator reads,
//! with the default the code uses.

#[test]
fn readme_lists_every_environment_variable_with_its_default() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for (name, default, _) in slubmalloc::ENVIRONMENT_VARIABLES {
        let row = format!("| `{name}` | {default} |");
        assert!(
            readme.contains(&row),
            "README is missing the row starting {row}"
        );
    }
}
