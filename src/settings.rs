//! Reading settings files: TOML into a serde struct (whose `deny_unknown_fields` turns a typo
//! into an error), with errors that name the file.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}")]
    Io { path: String, source: std::io::Error },
    #[error("invalid settings in {path}")]
    Parse { path: String, source: toml::de::Error },
}

/// Reads and parses a TOML settings file.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Io { path: display.clone(), source })?;
    toml::from_str(&text).map_err(|source| FileError::Parse { path: display, source })
}
