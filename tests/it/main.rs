//! One integration-test binary (it links once): modules per area.

mod cli;
mod harness;
mod live;
mod policy_props;
mod protocol_fuzz;
mod python;
mod sim;

use std::path::PathBuf;

/// The shared data directory beside the repository (`../shared/data`).
pub fn shared_data(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("shared").join("data").join(file)
}
