//! The invariants of ARCHITECTURE.md that a file scan can check.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_pure_modules_import_no_runtime_and_no_bus() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for module in ["quality", "policy", "schedule", "cluster", "protocol", "sim"] {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files);
        assert!(!files.is_empty(), "{module}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            // No runtime, no bus, and no clock: pure code decides the same on the same input
            // (time is an input, never read).
            for forbidden in [
                "actix",
                "tokio",
                "async_nats",
                "crate::bus",
                "crate::actors",
                "crate::service",
                "crate::metrics",
                "Instant",
                "SystemTime",
            ] {
                let used = text.lines().any(|l| {
                    let l = l.trim_start();
                    !l.starts_with("//") && l.contains(forbidden)
                });
                assert!(!used, "{} uses {forbidden}", file.display());
            }
        }
    }
}
