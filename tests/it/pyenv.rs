//! Virtual environments under `target/` with the `slaq` client package (`clients/python`)
//! installed as a user installs it, with one of its extras (`pip install './clients/python[torch]'`,
//! as the README says) pulling what that extra declares from PyPI (needed the first time, and
//! again only when the extra changes). Shared by the `it` and `train` test binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

pub const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python");

fn system_python() -> Option<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
}

/// A fingerprint of the package's sources: it is installed again when they change.
fn package_fingerprint() -> String {
    use std::hash::{Hash, Hasher};
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == "__pycache__" || name.to_string_lossy().ends_with(".egg-info") || name == "build" {
                continue;
            }
            if path.is_dir() { walk(&path, out) } else { out.push(path) }
        }
    }
    let mut files = Vec::new();
    walk(Path::new(PACKAGE), &mut files);
    files.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        f.hash(&mut hasher);
        std::fs::read(&f).unwrap_or_default().hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The interpreter of `target/tmp/<name>`, a virtual environment with the client package
/// installed, with its optional dependencies `extra` (`Some("torch")`: what
/// `pip install './clients/python[torch]'` installs, nothing more); `None` where there is no
/// Python at all. Made once, then brought up to date: the package is reinstalled when its
/// sources changed, the whole environment is made again when `extra` changed. A file lock keeps
/// parallel test processes apart.
pub fn python_env(name: &str, extra: Option<&str>) -> Option<PathBuf> {
    static MADE: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = made.iter().find(|(n, _)| n == name) {
        return Some(path.clone());
    }
    let python = system_python()?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("target dir");
    let lock = std::fs::File::create(dir.with_extension("lock")).expect("lock file");
    lock.lock().expect("lock the environment");
    let interpreter = dir.join("bin").join("python");
    let (extras_stamp, package_stamp) = (dir.join("extras.stamp"), dir.join("slaq-client.fingerprint"));
    let want_extras = extra.unwrap_or("").to_string();
    let spec = match extra {
        Some(extra) => format!("{PACKAGE}[{extra}]"),
        None => PACKAGE.to_string(),
    };
    let fingerprint = package_fingerprint();
    let pip = |args: &[&str], what: &str| {
        run(
            Command::new(&interpreter)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .args(args),
            what,
        )
    };
    if !interpreter.exists() || std::fs::read_to_string(&extras_stamp).ok().as_deref() != Some(want_extras.as_str()) {
        let _ = std::fs::remove_file(&package_stamp);
        run(
            Command::new(python).args(["-m", "venv", "--clear"]).arg(&dir),
            "creating a virtual environment (Debian: apt-get install python3-venv)",
        );
        pip(&[spec.as_str()], &format!("installing {spec} (its dependencies from PyPI) into {}", dir.display()));
        std::fs::write(&extras_stamp, &want_extras).expect("stamp");
    }
    if std::fs::read_to_string(&package_stamp).ok().as_deref() != Some(fingerprint.as_str()) {
        // The package itself again (its sources changed); its dependencies stay as installed.
        pip(&["--force-reinstall", "--no-deps", PACKAGE], "reinstalling the client package");
        pip(&[spec.as_str()], "the client package's dependencies (PyPI for what is missing)");
        std::fs::write(&package_stamp, fingerprint).expect("stamp");
    }
    made.push((name.to_string(), interpreter.clone()));
    Some(interpreter)
}
