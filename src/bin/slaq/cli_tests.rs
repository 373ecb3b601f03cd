//! The command line against the repository's files: the deployment files and the
//! documentation name only commands, flags, variables and settings that exist.

/// The deployment files (`deploy/`) cannot rot: every `slaq` command line they contain parses
/// with this CLI, every `SLAQ_*` variable they set is read by some command, every setting they
/// write is a known key, and every local file they mount or copy exists.
mod deploy_files {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use clap::{CommandFactory, Parser};
    use yaml_rust2::{Yaml, YamlLoader};

    use crate::Cli;

    fn deploy() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Every environment variable a command reads: `serve`'s settings and the flags' `env`s.
    fn known_env() -> BTreeSet<String> {
        fn walk(cmd: &clap::Command, known: &mut BTreeSet<String>) {
            known.extend(cmd.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()));
            cmd.get_subcommands().for_each(|sub| walk(sub, known));
        }
        let mut known: BTreeSet<String> = slaq::service::config::ENV_VARS.iter().map(|s| s.to_string()).collect();
        walk(&Cli::command(), &mut known);
        known
    }

    fn check_command(origin: &str, args: &[String]) {
        // Values Kubernetes fills in when the pod starts.
        let args: Vec<String> =
            args.iter().map(|a| a.replace("$(POD_NAME)", "slaq-worker-0").replace("$(NODE_NAME)", "node-1")).collect();
        if let Err(e) = Cli::try_parse_from(std::iter::once("slaq".to_string()).chain(args.iter().cloned())) {
            panic!("{origin}: `slaq {}` is not a valid command line:\n{e}", args.join(" "));
        }
    }

    fn check_env(origin: &str, names: impl IntoIterator<Item = String>, known: &BTreeSet<String>) -> usize {
        let mut n = 0;
        for name in names.into_iter().filter(|n| n.starts_with("SLAQ_")) {
            assert!(known.contains(&name), "{origin}: sets {name}, which no slaq command reads (known: {known:?})");
            n += 1;
        }
        n
    }

    fn check_settings(origin: &str, toml_text: &str) {
        let raw: slaq::service::RawConfig =
            toml::from_str(toml_text).unwrap_or_else(|e| panic!("{origin}: not valid slaq settings: {e}"));
        if let Err(e) = raw.resolve(&Default::default(), &Default::default()) {
            panic!("{origin}: settings do not validate: {e}");
        }
    }

    fn strings(y: &Yaml) -> Vec<String> {
        y.as_vec().map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    }

    /// A mapping with its YAML merge keys (`<<: *anchor`) applied, as Compose reads it.
    fn merged(y: &Yaml) -> yaml_rust2::yaml::Hash {
        let mut out = yaml_rust2::yaml::Hash::new();
        if let Some(map) = y.as_hash() {
            if let Some(base) = map.get(&Yaml::String("<<".into())) {
                out.extend(merged(base));
            }
            for (k, v) in map {
                if k.as_str() != Some("<<") {
                    let v = if v.as_hash().is_some() { Yaml::Hash(merged(v)) } else { v.clone() };
                    out.insert(k.clone(), v);
                }
            }
        }
        out
    }

    fn key(map: &yaml_rust2::yaml::Hash, k: &str) -> Yaml {
        map.get(&Yaml::String(k.into())).cloned().unwrap_or(Yaml::BadValue)
    }

    #[test]
    fn compose_uses_only_what_slaq_has() {
        let path = deploy().join("compose.yaml");
        let docs = YamlLoader::load_from_str(&read(&path)).expect("compose.yaml is YAML");
        // The settings its replicas mount.
        check_settings("compose/slaq-shared.toml", &read(&deploy().join("compose/slaq-shared.toml")));
        let services = merged(&key(&merged(&docs[0]), "services"));
        let known = known_env();
        let (mut commands, mut envs) = (0, 0);
        for (name, service) in &services {
            let name = name.as_str().unwrap_or_default();
            let service = merged(service);
            for volume in strings(&key(&service, "volumes")) {
                if let Some(local) = volume.strip_prefix("./") {
                    let source = local.split(':').next().unwrap_or_default();
                    assert!(deploy().join(source).exists(), "compose service {name} mounts missing ./{source}");
                }
            }
            if !key(&service, "image").as_str().is_some_and(|i| i.starts_with("slaq")) {
                continue;
            }
            let command = strings(&key(&service, "command"));
            assert!(!command.is_empty(), "compose service {name} runs slaq without a command");
            check_command(&format!("compose service {name}"), &command);
            commands += 1;
            let env = key(&service, "environment");
            let names: Option<Vec<String>> =
                env.as_hash().map(|h| h.keys().filter_map(|k| k.as_str().map(str::to_string)).collect());
            envs += check_env(&format!("compose service {name}"), names.unwrap_or_default(), &known);
        }
        assert!(commands >= 6 && envs >= 6, "compose.yaml: {commands} slaq services, {envs} variables checked");
    }

    #[test]
    fn kubernetes_manifests_use_only_what_slaq_has() {
        let known = known_env();
        let (mut commands, mut settings) = (0, 0);
        for entry in std::fs::read_dir(deploy().join("k8s")).expect("deploy/k8s") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let origin = path.display().to_string();
            for doc in YamlLoader::load_from_str(&read(&path)).unwrap_or_else(|e| panic!("{origin}: {e}")) {
                if let (Some("ConfigMap"), Some(toml_text)) = (doc["kind"].as_str(), doc["data"]["slaq.toml"].as_str())
                {
                    check_settings(&origin, toml_text);
                    settings += 1;
                }
                for container in doc["spec"]["template"]["spec"]["containers"].as_vec().into_iter().flatten() {
                    if !container["image"].as_str().is_some_and(|i| i.starts_with("slaq")) {
                        continue;
                    }
                    let mut argv = strings(&container["command"]);
                    argv.retain(|a| !a.ends_with("/slaq") && a != "slaq");
                    argv.extend(strings(&container["args"]));
                    check_command(&origin, &argv);
                    commands += 1;
                    let names = container["env"].as_vec().into_iter().flatten();
                    check_env(&origin, names.filter_map(|e| e["name"].as_str().map(str::to_string)), &known);
                }
            }
        }
        assert!(commands >= 2 && settings >= 1, "deploy/k8s: {commands} commands and {settings} settings checked");
    }

    #[test]
    fn dockerfile_and_systemd_units_use_only_what_slaq_has() {
        let dockerfile = read(&deploy().join("Dockerfile"));
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for line in dockerfile.lines() {
            if let Some(cmd) = line.strip_prefix("CMD ") {
                let argv: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
                check_command("deploy/Dockerfile CMD", &argv);
            }
            if let Some(copy) = line.strip_prefix("COPY ").filter(|c| !c.starts_with("--from")) {
                let parts: Vec<&str> = copy.split_whitespace().collect();
                for source in &parts[..parts.len() - 1] {
                    assert!(root.join(source).exists(), "deploy/Dockerfile copies missing {source}");
                }
            }
        }
        check_settings("config/slaq.toml", &read(&root.join("config/slaq.toml")));
        let mut units = 0;
        for entry in std::fs::read_dir(deploy()).expect("deploy") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("service") {
                continue;
            }
            for line in read(&path).lines() {
                if let Some(exec) = line.strip_prefix("ExecStart=") {
                    let argv: Vec<String> = exec.split_whitespace().skip(1).map(|a| a.replace("%i", "w0")).collect();
                    check_command(&path.display().to_string(), &argv);
                    units += 1;
                }
            }
        }
        assert!(units >= 2, "{units} systemd units checked");
    }

    #[test]
    fn a_made_up_flag_is_caught() {
        let bad = std::panic::catch_unwind(|| check_command("test", &["serve".into(), "--no-such-flag".into()]));
        assert!(bad.is_err());
    }
}

/// The documentation cannot name a command or flag that does not exist: every `slaq` command
/// line in a shell block of README.md or `docs/` parses with this CLI, and every flag an
/// inline `slaq ...` (usage lines included) names belongs to the command it names.
mod doc_commands {
    use std::path::{Path, PathBuf};

    use clap::{CommandFactory, Parser};

    use crate::Cli;

    fn documents() -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
        let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
            .expect("docs/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        files
    }

    /// `text` with every `$(...)` replaced by one word (the simulator's file lists are made so).
    fn without_substitutions(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            out.push_str(&rest[..start]);
            let mut depth = 0;
            let mut end = rest.len();
            for (i, c) in rest[start + 1..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + 1 + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.push_str("substituted");
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }

    /// The shell lines of one block, continuations joined and comments cut.
    fn shell_lines(block: &[&str]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut current = String::new();
        for line in block {
            let line = line.trim();
            let line = line.strip_prefix("$ ").unwrap_or(line);
            if let Some(head) = line.strip_suffix('\\') {
                current.push_str(head);
                current.push(' ');
                continue;
            }
            current.push_str(line);
            let joined = std::mem::take(&mut current);
            // A comment starts at a `#` after white space, outside quotes.
            let (mut quote, mut cut) = (None, joined.len());
            let bytes = joined.as_bytes();
            for (i, &b) in bytes.iter().enumerate() {
                match (quote, b) {
                    (None, b'\'' | b'"') => quote = Some(b),
                    (Some(q), b) if b == q => quote = None,
                    (None, b'#') if i == 0 || bytes[i - 1] == b' ' => {
                        cut = i;
                        break;
                    }
                    _ => {}
                }
            }
            lines.push(without_substitutions(&joined[..cut]));
        }
        lines
    }

    /// The arguments after `slaq` of every slaq command in a shell line.
    fn slaq_commands(line: &str) -> Vec<Vec<String>> {
        let Some(words) = shlex::split(line) else { return Vec::new() };
        let mut out = Vec::new();
        for command in words.split(|w| ["&&", "||", ";", "|", "&"].contains(&w.as_str())) {
            let skip = match command {
                [first, ..] if first == "slaq" || first.ends_with("/slaq") => 1,
                [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" => {
                    match rest.iter().position(|w| w == "--") {
                        Some(i) => 3 + i,
                        None => continue,
                    }
                }
                _ => continue,
            };
            out.push(command[skip..].to_vec());
        }
        out
    }

    #[test]
    fn every_shell_command_line_in_the_docs_parses() {
        let mut checked = 0;
        for file in documents() {
            let text = std::fs::read_to_string(&file).expect("readable");
            let lines: Vec<&str> = text.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let fence = lines[i].trim_start();
                let shell = ["```sh", "```bash", "```console", "```shell"].contains(&fence);
                i += 1;
                if !fence.starts_with("```") {
                    continue;
                }
                let start = i;
                while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                    i += 1;
                }
                if shell {
                    for line in shell_lines(&lines[start..i]) {
                        for args in slaq_commands(&line) {
                            let argv = std::iter::once("slaq".to_string()).chain(args.iter().cloned());
                            if let Err(e) = Cli::try_parse_from(argv) {
                                panic!(
                                    "{} (block at line {start}): `slaq {}` does not parse:\n{e}",
                                    file.display(),
                                    args.join(" ")
                                );
                            }
                            checked += 1;
                        }
                    }
                }
                i += 1;
            }
        }
        assert!(checked >= 8, "only {checked} command lines found: is the scan reading the blocks?");
    }

    #[test]
    fn every_flag_named_inline_belongs_to_its_command() {
        let root = Cli::command();
        let mut checked = 0;
        for file in documents() {
            let text = std::fs::read_to_string(&file).expect("readable").replace("\\|", "|");
            for (n, span) in text.split('`').enumerate().filter(|(n, _)| n % 2 == 1) {
                let Some(rest) = span.strip_prefix("slaq ") else { continue };
                let words: Vec<&str> = rest.split_whitespace().collect();
                // The command: the leading words that are subcommands.
                let mut command = &root;
                let mut path = Vec::new();
                for w in &words {
                    match command.find_subcommand(w) {
                        Some(sub) => {
                            command = sub;
                            path.push(*w);
                        }
                        None => break,
                    }
                }
                let origin = format!("{}: `{span}` (span {n})", file.display());
                assert!(!path.is_empty(), "{origin}: names no slaq command");
                for w in &words {
                    for flag in w.split(['[', ']', '|', '=', ',', '(', ')']).filter(|f| f.starts_with("--")) {
                        let name = flag.trim_start_matches('-').trim_end_matches(['.', ':', ';']);
                        if name.is_empty() {
                            continue; // `--` before a program's arguments
                        }
                        let known = command.get_arguments().any(|a| a.get_long() == Some(name))
                            || ["help", "version"].contains(&name);
                        assert!(known, "{origin}: `slaq {}` has no flag --{name}", path.join(" "));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 40, "only {checked} inline flags found: is the scan reading the spans?");
    }
}
