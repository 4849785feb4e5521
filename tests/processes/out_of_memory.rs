//! Out of memory (an address-space limit): every C entry point returns NULL
//! with errno ENOMEM, the allocator stays consistent, and allocation works
//! again after frees.

use crate::common;

#[test]
fn allocation_fails_cleanly_under_rlimit_as_and_recovers() {
    let exe = common::compile_c("oom", &[]);
    let out = common::run_preloaded(&exe, &[], &[]);
    let stdout = common::stdout(&out);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        common::stderr(&out)
    );
    assert!(stdout.starts_with("ok "), "{stdout}");
}
