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
    // The allocator's core and what it reads (not its actix shell, `mod.rs`, nor its tests).
    let allocator_core = [
        "actors/allocator/state.rs",
        "actors/allocator/core.rs",
        "actors/allocator/supervision.rs",
        "actors/allocator/planning.rs",
        "actors/allocator/assignment.rs",
        "actors/allocator/status.rs",
        "actors/bid.rs",
        "actors/registry.rs",
        "actors/types.rs",
    ];
    // The job routing table both service shells keep: its time is an `Instant` passed in.
    let routing = ["service/routes.rs", "service/ended.rs"];
    let modules = ["quality", "policy", "schedule", "cluster", "protocol", "sim", "partition.rs"];
    for module in modules.into_iter().chain(allocator_core).chain(routing) {
        let mut files = Vec::new();
        let path = src.join(module);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            assert!(path.exists(), "{module} does not exist");
            files.push(path);
        }
        assert!(!files.is_empty(), "{module}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            // The routing table's tests take their origin from the clock; its code may not.
            let text = match routing.contains(&module) {
                true => text.split("mod tests {").next().unwrap_or_default().to_string(),
                false => text,
            };
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
                if routing.contains(&module) { "Instant::now" } else { "Instant" },
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

/// `path` with its `{…}` groups expanded (`a::{b, c::{D, E}}` → `a::b`, `a::c::D`, `a::c::E`;
/// `self` in a group is the group's head).
fn expand_groups(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return vec![path.to_string()] };
    let (head, mut depth, mut close) = (&path[..open], 0, path.len());
    for (i, c) in path.char_indices().skip_while(|&(i, _)| i < open) {
        depth += i32::from(c == '{') - i32::from(c == '}');
        if depth == 0 {
            close = i;
            break;
        }
    }
    let (inner, mut items, mut item, mut depth) = (&path[open + 1..close.max(open + 1)], Vec::new(), String::new(), 0);
    for c in inner.chars() {
        depth += i32::from(c == '{') - i32::from(c == '}');
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut item));
        } else {
            item.push(c);
        }
    }
    items.push(item);
    items
        .iter()
        .map(|i| i.split(" as ").next().unwrap_or_default().trim())
        .filter(|i| !i.is_empty())
        .flat_map(|i| {
            if i == "self" {
                vec![head.trim_end_matches(':').to_string()]
            } else {
                expand_groups(&format!("{head}{i}"))
            }
        })
        .collect()
}

/// Whether a file does nothing but declare: its children (`mod a;`), imports and re-exports.
fn declares_only(code: &str) -> bool {
    let mut rest = String::new();
    let mut in_use = false;
    for line in code.lines().map(str::trim) {
        let starts_use = ["use ", "pub use ", "pub(crate) use "].iter().any(|p| line.starts_with(p));
        if in_use || starts_use {
            in_use = !line.ends_with(';');
            continue;
        }
        let declaration = line.is_empty()
            || line.starts_with("#[")
            || (line.ends_with(';') && ["mod ", "pub mod ", "pub(crate) mod "].iter().any(|p| line.starts_with(p)));
        if !declaration {
            rest.push_str(line);
        }
    }
    rest.is_empty()
}

/// A file's code without comments and without its re-exports (`pub use`: declarations, not
/// dependencies of its code).
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("source");
    let mut out = String::new();
    let mut in_reexport = false;
    for line in text.lines().map(|l| l.split("//").next().unwrap_or_default()) {
        let t = line.trim();
        if in_reexport || t.starts_with("pub use ") || t.starts_with("pub(crate) use ") {
            in_reexport = !t.ends_with(';');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// No two modules import each other, directly or round a cycle. A parent and its children are
/// exempt only when the parent's `mod.rs` does nothing but declare them (and re-export): a
/// parent with code of its own is a module like any other. Imports are read from the
/// `crate::…` and `super::…` paths in the code, tests included, with `{…}` groups expanded,
/// and, in a `mod.rs`, from paths through the children it declares (`lease::Fence`).
#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (cycles, counted) = import_cycles(&src);
    assert!(counted > 50, "only {counted} imports found: is the scan reading the sources?");
    assert!(cycles.is_empty(), "modules that import each other (directly or round a cycle): {cycles:#?}");
}

/// The cycles among the modules under `src` (each as its files), and how many imports were read.
fn import_cycles(src: &Path) -> (std::collections::BTreeSet<Vec<String>>, usize) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let index: std::collections::HashMap<std::path::PathBuf, usize> =
        files.iter().enumerate().map(|(i, f)| (f.clone(), i)).collect();
    let paths: Vec<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    let codes: Vec<String> = files.iter().map(|f| code_of(f)).collect();
    // A `mod.rs` with code of its own: its children and it are not exempt from each other.
    let has_code: Vec<bool> =
        files.iter().zip(&codes).map(|(f, c)| f.ends_with("mod.rs") && !declares_only(c)).collect();
    let mut edges: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let text = &codes[i];
        // Inside an inline `mod tests`, the first `super` is the file's own module.
        let tests_at = text.find("mod tests {").unwrap_or(usize::MAX);
        let here = &paths[i];
        let children: Vec<String> = if file.ends_with("mod.rs") {
            text.lines()
                .filter_map(|l| l.trim().trim_start_matches("pub ").strip_prefix("mod ")?.strip_suffix(';'))
                .map(|c| format!("{c}::"))
                .collect()
        } else {
            Vec::new()
        };
        let starts = ["crate::".to_string(), "super::".to_string()].into_iter().chain(children);
        let mut found: Vec<(usize, String)> = Vec::new();
        for start in starts {
            for (at, _) in text.match_indices(start.as_str()) {
                // A path begins here, not inside another (`a::super::`, `my_lease::`).
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let rest = &text[at..];
                let (mut depth, mut end) = (0, rest.len());
                for (k, c) in rest.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            end = k;
                            break;
                        }
                        '}' => depth -= 1,
                        c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                            end = k;
                            break;
                        }
                        _ => {}
                    }
                }
                let path: String = rest[..end].chars().filter(|c| !c.is_whitespace()).collect();
                found.extend(expand_groups(&path).into_iter().map(|p| (at, p)));
            }
        }
        for (at, path) in found {
            let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty() && *s != "*").collect();
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
                // A path through a child this `mod.rs` declares.
                Some(_) => here.clone(),
                None => continue,
            };
            base.extend(segments.iter().map(|s| s.to_string()));
            let full: Vec<&str> = base.iter().map(String::as_str).collect();
            let Some(target) = module_file(src, &full).and_then(|t| index.get(&t).copied()) else { continue };
            let there = &paths[target];
            // A module and its ancestors or descendants, where the ancestor only declares.
            let related = there.starts_with(here) || here.starts_with(there);
            if target != i && !(related && !has_code[i] && !has_code[target]) {
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
    let name = |i: usize| files[i].strip_prefix(src).unwrap_or(&files[i]).display().to_string();
    let cycles = (0..files.len())
        .filter(|&v| reaches[v].contains(&v))
        .map(|v| reaches[v].iter().copied().filter(|&w| reaches[w].contains(&v)).map(name).collect())
        .collect();
    (cycles, edges.iter().map(|e| e.len()).sum())
}

/// The scan sees the two shapes of cycle it once missed (issue #42): a `{…}` group naming a
/// module that imports back (`sim::teams` and `sim::curves::engine`), and a parent with code of
/// its own that uses a child which uses it (`bus/mod.rs`'s `Publisher` and `bus::lease`). A
/// parent that only declares and re-exports its children is no cycle with them.
#[test]
fn the_cycle_scan_sees_groups_and_parents_with_code() {
    let write = |root: &Path, files: &[(&str, &str)]| {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            std::fs::write(path, text).expect("write");
        }
    };
    let names = |cycles: std::collections::BTreeSet<Vec<String>>| {
        cycles.into_iter().flatten().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>()
    };
    let dir = crate::harness::temp_dir("layout");
    let grouped = dir.join("grouped");
    write(
        &grouped,
        &[
            ("lib.rs", "pub mod sim;\n"),
            ("sim/mod.rs", "pub mod curves;\npub mod teams;\n"),
            ("sim/curves/mod.rs", "pub mod engine;\npub use engine::run;\n"),
            ("sim/curves/engine.rs", "use crate::sim::teams::Teams;\npub fn run(_: Teams) {}\n"),
            (
                "sim/teams/mod.rs",
                "use crate::sim::curves::{engine, Other};\npub struct Teams;\nfn f() { engine::run(Teams) }\n",
            ),
        ],
    );
    assert_eq!(names(import_cycles(&grouped).0), ["sim/curves/engine.rs", "sim/teams/mod.rs"]);
    let parent = dir.join("parent");
    write(
        &parent,
        &[
            ("lib.rs", "pub mod bus;\n"),
            ("bus/mod.rs", "pub mod lease;\npub enum BusError {}\npub struct Publisher { fence: lease::Fence }\n"),
            ("bus/lease.rs", "use super::BusError;\npub struct Fence;\n"),
        ],
    );
    assert_eq!(names(import_cycles(&parent).0), ["bus/lease.rs", "bus/mod.rs"]);
    // The same with the parent only declaring and re-exporting: no cycle.
    write(
        &parent,
        &[
            ("bus/mod.rs", "pub mod lease;\npub mod publisher;\npub use publisher::Publisher;\n"),
            ("bus/publisher.rs", "use super::lease;\npub struct Publisher { fence: lease::Fence }\n"),
            ("bus/lease.rs", "use super::publisher::Publisher;\npub struct Fence;\n"),
        ],
    );
    assert_eq!(names(import_cycles(&parent).0), ["bus/lease.rs", "bus/publisher.rs"], "siblings still count");
    write(&parent, &[("bus/lease.rs", "pub struct Fence;\n")]);
    assert!(import_cycles(&parent).0.is_empty());
}
