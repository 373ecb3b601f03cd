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

/// The module a path names, as a file under `src/`: the longest prefix of `segments` that is a
/// module (`a/b.rs` or `a/b/mod.rs`); `None` for paths outside the crate's modules.
fn module_file(src: &Path, segments: &[&str]) -> Option<std::path::PathBuf> {
    (1..=segments.len()).rev().find_map(|n| {
        let dir: std::path::PathBuf = segments[..n].iter().collect();
        let file = src.join(&dir).with_extension("rs");
        let module = src.join(&dir).join("mod.rs");
        if file.is_file() {
            Some(file)
        } else if module.is_file() {
            Some(module)
        } else {
            None
        }
    })
}

/// The module path (`["bus", "durable"]`) of a file under `src/`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop().filter(|l| l != "mod.rs" && l != "lib.rs") {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// No two modules import each other, directly or round a cycle (a parent and the children it
/// declares aside: a child may use what its parent's `mod.rs` holds). Imports are read from the
/// `crate::…` and `super::…` paths in the code, tests included.
#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let index: std::collections::HashMap<std::path::PathBuf, usize> =
        files.iter().enumerate().map(|(i, f)| (f.clone(), i)).collect();
    let paths: Vec<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
    let mut edges: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); files.len()];
    for (i, file) in files.iter().enumerate() {
        // Code only: a doc link to a module is no import.
        let text: String = std::fs::read_to_string(file)
            .expect("source")
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        // Inside an inline `mod tests`, the first `super` is the file's own module.
        let tests_at = text.find("mod tests {").unwrap_or(usize::MAX);
        let here = &paths[i];
        for (at, _) in text.match_indices("crate::").chain(text.match_indices("super::")) {
            let rest = &text[at..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
            let mut segments: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = match segments.first() {
                Some(&"crate") => {
                    segments.remove(0);
                    Vec::new()
                }
                Some(&"super") => {
                    // `here` is the file's module; each `super` goes one up, but the first
                    // one inside `mod tests` only leaves the tests.
                    let mut b = here.clone();
                    let mut ups = 0;
                    while segments.first() == Some(&"super") {
                        segments.remove(0);
                        ups += 1;
                    }
                    if at > tests_at {
                        ups -= 1;
                    }
                    for _ in 0..ups {
                        b.pop();
                    }
                    b
                }
                _ => continue,
            };
            base.extend(segments.iter().map(|s| s.to_string()));
            let full: Vec<&str> = base.iter().map(String::as_str).collect();
            let Some(target) = module_file(&src, &full).and_then(|t| index.get(&t).copied()) else { continue };
            let there = &paths[target];
            // A module and its ancestors or descendants: a parent declares its children.
            let related = there.starts_with(here) || here.starts_with(there);
            if target != i && !related {
                edges[i].insert(target);
            }
        }
    }
    // What each module reaches through its imports; a module that reaches itself is on a cycle,
    // with every module it reaches that reaches it back.
    let reaches: Vec<std::collections::BTreeSet<usize>> = (0..files.len())
        .map(|from| {
            let (mut seen, mut stack) = (std::collections::BTreeSet::new(), vec![from]);
            while let Some(v) = stack.pop() {
                stack.extend(edges[v].iter().copied().filter(|&w| seen.insert(w)));
            }
            seen
        })
        .collect();
    let name = |i: usize| files[i].strip_prefix(&src).unwrap_or(&files[i]).display().to_string();
    let cycles: std::collections::BTreeSet<Vec<String>> = (0..files.len())
        .filter(|&v| reaches[v].contains(&v))
        .map(|v| reaches[v].iter().copied().filter(|&w| reaches[w].contains(&v)).map(name).collect())
        .collect();
    let counted: usize = edges.iter().map(|e| e.len()).sum();
    assert!(counted > 50, "only {counted} imports found: is the scan reading the sources?");
    assert!(cycles.is_empty(), "modules that import each other (directly or round a cycle): {cycles:#?}");
}
