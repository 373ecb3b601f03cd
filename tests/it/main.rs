//! One integration-test binary (it links once): modules per area.

mod agent;
mod asks;
mod cli;
mod durable;
mod harness;
mod holes;
mod holes3;
mod holes4;
mod isolate;
mod layout;
mod live;
mod observe;
mod page;
mod partitions;
mod placement;
mod policy_props;
mod protocol_fuzz;
mod pyenv;
mod python;
mod ranks;
mod replicas;
mod security;
mod shared;
mod sim;
mod submit;
mod teams;
mod teams_shared;
mod typed;

use std::path::PathBuf;

/// A curve file vendored in the repository (`data/curves/`), so a plain clone runs the tests.
pub fn curve_file(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join("curves").join(file)
}

/// A test's directory is gone once the test passes, and kept (for its logs) when it fails.
#[test]
fn a_test_dir_is_removed_after_a_pass_and_kept_after_a_failure() {
    let passed = harness::temp_dir("passes");
    let path = passed.to_path_buf();
    std::fs::write(passed.join("log"), "ok").unwrap();
    drop(passed);
    assert!(!path.exists(), "{} left behind", path.display());

    let failed = std::thread::spawn(|| {
        let dir = harness::temp_dir("fails");
        std::fs::write(dir.join("log"), "why").unwrap();
        std::panic::panic_any(dir.to_path_buf());
    })
    .join()
    .expect_err("the thread failed");
    let kept = failed.downcast::<PathBuf>().expect("the dir's path");
    assert!(kept.join("log").exists(), "{} removed", kept.display());
    std::fs::remove_dir_all(*kept).unwrap();
}
