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
    for module in ["quality", "policy", "schedule", "cluster", "protocol", "sim", "partition.rs"] {
        let mut files = Vec::new();
        let path = src.join(module);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
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

/// The Pollux traces are the simulators' ground truth: the scheduler must never read them (it
/// learns a job from its reports). Only the simulators, the placement study and tests use them.
#[test]
fn only_the_simulators_read_the_ground_truth_traces() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let allowed = |p: &Path| {
        let p = p.strip_prefix(&src).unwrap_or(p).to_string_lossy().replace('\\', "/");
        p.starts_with("sim/") || p == "cluster/trace.rs" || p == "cluster/bench.rs"
    };
    for file in files.iter().filter(|f| !allowed(f)) {
        let text = std::fs::read_to_string(file).expect("source");
        // Unit tests may compare a model with the truth.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let used = code.lines().any(|l| {
            let l = l.trim_start();
            !l.starts_with("//")
                && (l.contains("cluster::trace") || l.contains("super::trace") || l.contains("trace::{"))
        });
        assert!(!used, "{} reads the ground-truth traces", file.display());
    }
}

/// ARCHITECTURE.md's codemap is the map of `src/`: every source file is on it, and every
/// file or path it names exists (a map that names removed rooms misleads a newcomer).
#[test]
fn the_codemap_names_every_source_file_and_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let names: Vec<String> =
        files.iter().filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    for (file, name) in files.iter().zip(&names) {
        if ["mod.rs", "lib.rs", "main.rs"].contains(&name.as_str()) {
            continue;
        }
        let stem = name.trim_end_matches(".rs");
        let on_map = map.contains(&format!("`{name}`"))
            || map.contains(&format!("{stem}.rs`"))
            || map.contains(&format!("`{stem}/`"));
        assert!(on_map, "{} is on no map: ARCHITECTURE.md's codemap does not name {name}", file.display());
    }
    let spans = map.split('`').enumerate().filter(|(n, _)| n % 2 == 1).map(|(_, s)| s);
    let mut named = 0;
    for span in spans {
        if span.contains(' ') || span.contains('*') {
            continue;
        }
        if ["src/", "tests/", "benches/", "deploy/", "clients/", "config/", "examples/"]
            .iter()
            .any(|d| span.starts_with(d))
        {
            assert!(root.join(span).exists(), "ARCHITECTURE.md names {span}, which does not exist");
            named += 1;
        } else if span.ends_with(".rs") {
            let base = span.rsplit('/').next().unwrap_or(span);
            assert!(names.iter().any(|n| n == base), "ARCHITECTURE.md names {span}, which no file under src/ is");
            named += 1;
        }
    }
    assert!(named >= 40, "only {named} files named: is the scan reading the map?");
}
