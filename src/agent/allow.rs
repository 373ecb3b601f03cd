//! What a worker agent lets a submitted job run: the program and its leading arguments checked
//! against `--allow-command` on canonical paths, and the job's environment against
//! `--allow-env`. The submitter chooses the command, its arguments, its working directory and
//! its environment; the agent runs them as its own user, so each is a way in:
//!
//! - **Paths.** An entry `python3 /srv/train/` allows `python3` (the program the agent's own
//!   `PATH` finds, compared by its canonical path) with a first argument that is a file under
//!   `/srv/train` once `..`, symbolic links and a relative path (against the job's working
//!   directory) are resolved. `python3 /srv/train/../evil.py`, a link out of the directory and
//!   `python3 -c CODE` or `-m MODULE` (an argument that is not a file there) are refused. Each
//!   word of an entry after the program is one argument: ending in `/`, a file under that
//!   directory; containing `/`, that very file; otherwise that exact word. Arguments after the
//!   entry's words are free (an entry of a program alone allows all its arguments, `-c` too).
//!   What runs is the program as resolved here, never a name looked up again in a `PATH` the
//!   submitter could set.
//! - **Environment.** Variables that make a loader or an interpreter run other code
//!   (`LD_*`, `PYTHON*`, `PERL5*`, `NODE_OPTIONS`, `BASH_ENV`, `PATH`, ... see [`risky_env`]) are
//!   refused unless `--allow-env` names them; with any `--allow-env`, only the names it lists
//!   (`NAME`, or `PREFIX*`) pass. A refused variable refuses the command (exit 126), it is not
//!   dropped silently.
//! - **Secure by default.** An agent that connects with credentials runs a submitted command
//!   only with `--allow-command` or an explicit `--allow-any-command` ([`Commands::Refused`]).

use std::path::{Path, PathBuf};

/// Which submitted commands an agent runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Commands {
    /// Any (an agent without credentials and without `--allow-command`, or
    /// `--allow-any-command`).
    Any,
    /// Those an entry allows.
    Allowed(Vec<Entry>),
    /// None: the agent connects with credentials and was given neither list nor
    /// `--allow-any-command`.
    Refused,
}

/// One `--allow-command` entry, resolved when the agent starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// As given.
    pub text: String,
    /// The program's canonical path.
    program: PathBuf,
    words: Vec<Word>,
}

#[derive(Clone, Debug, PartialEq)]
enum Word {
    /// A file under this canonical directory.
    Under(PathBuf),
    /// This canonical file.
    File(PathBuf),
    /// This exact argument.
    Exact(String),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllowError {
    #[error("--allow-command {0:?} is empty")]
    Empty(String),
    #[error("--allow-command {entry:?}: {what} {path:?} does not exist here")]
    Missing { entry: String, what: &'static str, path: String },
    #[error("--allow-env {0:?} is not a variable name (or NAME_PREFIX*)")]
    EnvName(String),
}

impl Entry {
    /// Parses and resolves an entry (its program on the agent's `PATH`, its paths canonical).
    pub fn parse(text: &str) -> Result<Entry, AllowError> {
        let mut words = text.split_whitespace();
        let program = words.next().ok_or_else(|| AllowError::Empty(text.to_string()))?;
        let missing = |what, path: &str| AllowError::Missing { entry: text.into(), what, path: path.into() };
        let program = resolve_program(program, None)
            .and_then(|p| std::fs::canonicalize(p).ok())
            .ok_or_else(|| missing("the program", program))?;
        let words = words
            .map(|w| {
                if w.ends_with('/') {
                    std::fs::canonicalize(w).map(Word::Under).map_err(|_| missing("the directory", w))
                } else if w.contains('/') {
                    std::fs::canonicalize(w).map(Word::File).map_err(|_| missing("the file", w))
                } else {
                    Ok(Word::Exact(w.to_string()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Entry { text: text.to_string(), program, words })
    }

    /// Whether `argv`, run in `cwd`, is one this entry allows.
    fn allows(&self, program: &Path, argv: &[String], cwd: Option<&Path>) -> bool {
        if std::fs::canonicalize(program).ok().as_deref() != Some(self.program.as_path()) {
            return false;
        }
        let args = argv.get(1..).unwrap_or_default();
        args.len() >= self.words.len()
            && self.words.iter().zip(args).all(|(word, arg)| match word {
                Word::Exact(w) => arg == w,
                Word::File(f) => canonical_file(arg, cwd).is_some_and(|p| p == *f),
                Word::Under(d) => canonical_file(arg, cwd).is_some_and(|p| p.starts_with(d) && p != *d),
            })
    }
}

/// `arg` as a path (relative ones against `cwd`), canonical, if it is an existing file.
fn canonical_file(arg: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    if arg.is_empty() || arg.starts_with('-') {
        return None;
    }
    let path = match cwd {
        Some(dir) if Path::new(arg).is_relative() => dir.join(arg),
        _ => PathBuf::from(arg),
    };
    std::fs::canonicalize(path).ok().filter(|p| p.is_file())
}

/// The program `name` names, as an absolute path: a path (relative ones against `cwd`), or the
/// first executable file of that name on the agent's own `PATH`.
pub fn resolve_program(name: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.is_empty() {
        return None;
    }
    if name.contains('/') {
        let path = match cwd {
            Some(dir) if Path::new(name).is_relative() => dir.join(name),
            _ => PathBuf::from(name),
        };
        let absolute = if path.is_relative() { std::env::current_dir().ok()?.join(path) } else { path };
        return absolute.is_file().then_some(absolute);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file() && p.metadata().is_ok_and(|m| m.permissions().mode() & 0o111 != 0))
}

impl Commands {
    /// What a submitted `argv` runs as in `cwd`: its program resolved to an absolute path
    /// (with a list: the one the entry allowed), or why it is refused.
    pub fn check(&self, argv: &[String], cwd: Option<&Path>) -> Result<PathBuf, &'static str> {
        let name = argv.first().ok_or("an empty command")?;
        let resolved = || resolve_program(name, cwd).ok_or("the command's program is not found");
        match self {
            Commands::Any => resolved(),
            Commands::Refused => {
                Err("this agent runs no submitted command: it connects with credentials and was given \
                 neither --allow-command nor --allow-any-command")
            }
            Commands::Allowed(entries) => {
                let program = resolved().map_err(|_| "the command is not in --allow-command")?;
                match entries.iter().any(|e| e.allows(&program, argv, cwd)) {
                    true => Ok(program),
                    false => Err("the command is not in --allow-command"),
                }
            }
        }
    }
}

/// Environment variables that make a loader, a shell or an interpreter load or run other code,
/// or find programs elsewhere: refused in a submitted job's environment unless `--allow-env`
/// names them.
pub fn risky_env(name: &str) -> bool {
    const PREFIXES: [&str; 12] =
        ["LD_", "PYTHON", "PERL5", "PERL_", "RUBY", "NODE_", "JAVA_", "DYLD_", "MALLOC_", "LUA_", "GIT_", "OPENSSL_"];
    const NAMES: [&str; 22] = [
        "PATH",
        "ZDOTDIR",
        "TCLLIBPATH",
        "CUDA_INJECTION64_PATH",
        "NLSPATH",
        "HOSTALIASES",
        "PROMPT_COMMAND",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "CDPATH",
        "GLOBIGNORE",
        "PERLLIB",
        "GCONV_PATH",
        "LOCPATH",
        "GLIBC_TUNABLES",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name) || name.starts_with("BASH_FUNC_")
}

/// `--allow-env`: the variable names a submitted job may set (`NAME` or `PREFIX*`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvAllowed(Vec<String>);

impl EnvAllowed {
    pub fn new(names: &[String]) -> Result<EnvAllowed, AllowError> {
        for n in names {
            let base = n.strip_suffix('*').unwrap_or(n);
            let ok = !base.is_empty() && base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(AllowError::EnvName(n.clone()));
            }
        }
        Ok(EnvAllowed(names.to_vec()))
    }

    fn names(&self, name: &str) -> bool {
        self.0.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => a == name,
        })
    }

    /// Whether a submitted job may set `name`: named by `--allow-env`, or, without any, not
    /// [`risky_env`].
    pub fn allows(&self, name: &str) -> bool {
        match self.0.is_empty() {
            true => !risky_env(name),
            false => self.names(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    /// A directory of scripts, another outside it, and a link from inside to outside; under a
    /// root of the test's own, removed when the first is dropped.
    fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::Builder::new().prefix("slaq-allow-").tempdir().unwrap();
        let (train, other) = (root.path().join("train"), root.path().join("other"));
        std::fs::create_dir_all(train.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(train.join("ok.py"), "").unwrap();
        std::fs::write(train.join("sub/deep.py"), "").unwrap();
        std::fs::write(other.join("evil.py"), "").unwrap();
        let link = train.join("link.py");
        std::os::unix::fs::symlink(other.join("evil.py"), &link).unwrap();
        (root, train, other)
    }

    #[test]
    fn paths_are_compared_once_resolved() {
        let (_root, train, other) = layout();
        let entry = Entry::parse(&format!("sh {}/", train.display())).unwrap();
        let list = Commands::Allowed(vec![entry]);
        let t = train.display();
        let ok = |line: &str, cwd: Option<&Path>| list.check(&args(line), cwd).is_ok();
        assert!(ok(&format!("sh {t}/ok.py --lr 0.1"), None));
        assert!(ok(&format!("sh {t}/sub/deep.py"), None));
        assert!(ok(&format!("/bin/sh {t}/ok.py"), None), "the same program by its path");
        assert!(ok("sh ok.py", Some(&train)), "relative to the job's directory");
        assert!(!ok(&format!("sh {t}/../other/evil.py"), None), "climbing out");
        assert!(!ok(&format!("sh {t}/sub/../../other/evil.py"), None));
        assert!(!ok(&format!("sh {t}/link.py"), None), "a link out of the directory");
        assert!(!ok("sh ../other/evil.py", Some(&train)));
        assert!(!ok("sh evil.py", Some(&other)));
        assert!(!ok(&format!("sh {t}/"), None), "the directory itself");
        assert!(!ok(&format!("sh {t}/missing.py"), None));
        assert!(!ok("sh -c id", None), "an interpreter's code option");
        assert!(!ok(&format!("sh -c id {t}/ok.py"), None));
        assert!(!ok(&format!("bash {t}/ok.py"), None), "another program");
        assert!(!ok("sh", None), "fewer arguments than the entry");
        // A prefix of a directory's name is not the directory.
        let sibling = train.with_file_name("train2");
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(sibling.join("x.py"), "").unwrap();
        assert!(!ok(&format!("sh {}/x.py", sibling.display()), None));
    }

    #[test]
    fn exact_words_and_files() {
        let (_root, train, _) = layout();
        let file = train.join("ok.py");
        let list = Commands::Allowed(vec![Entry::parse(&format!("sh -e {}", file.display())).unwrap()]);
        assert!(list.check(&args(&format!("sh -e {} x", file.display())), None).is_ok());
        assert!(list.check(&args(&format!("sh -x {}", file.display())), None).is_err());
        assert!(list.check(&args(&format!("sh -e {}/link.py", train.display())), None).is_err());
    }

    #[test]
    fn entries_that_name_nothing_are_refused_when_the_agent_starts() {
        assert!(matches!(Entry::parse("no-such-program-slaq /"), Err(AllowError::Missing { .. })));
        assert!(matches!(Entry::parse("sh /no/such/dir/"), Err(AllowError::Missing { .. })));
        assert!(matches!(Entry::parse("  "), Err(AllowError::Empty(_))));
    }

    #[test]
    fn the_secure_default_and_any() {
        assert!(Commands::Refused.check(&args("sh -c true"), None).is_err());
        assert!(Commands::Any.check(&args("sh -c true"), None).is_ok());
        assert!(Commands::Any.check(&args("no-such-program-slaq"), None).is_err());
        assert!(Commands::Any.check(&[], None).is_err());
    }

    #[test]
    fn risky_variables_need_naming() {
        let default = EnvAllowed::default();
        for risky in ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PERL5OPT", "NODE_OPTIONS"] {
            assert!(!default.allows(risky), "{risky}");
        }
        for risky in ["BASH_ENV", "ENV", "PATH", "BASH_FUNC_x%%", "GLIBC_TUNABLES", "JAVA_TOOL_OPTIONS"] {
            assert!(!default.allows(risky), "{risky}");
        }
        assert!(default.allows("LR") && default.allows("OMP_NUM_THREADS"));
        let named = EnvAllowed::new(&["LR".into(), "PYTHONHASHSEED".into(), "WANDB_*".into()]).unwrap();
        assert!(named.allows("PYTHONHASHSEED") && named.allows("WANDB_MODE") && named.allows("LR"));
        assert!(!named.allows("OMP_NUM_THREADS"), "with a list, only what it names");
        assert!(!named.allows("PYTHONPATH"));
        assert!(EnvAllowed::new(&["A-B".into()]).is_err());
        assert!(EnvAllowed::new(&["*".into()]).is_err());
    }
}
