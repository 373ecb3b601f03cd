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
