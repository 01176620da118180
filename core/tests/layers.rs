//! The crate's layers use only those below them: the engine (`src/engine/`) names no module
//! of the runner or the workloads, and the runner (`src/runner/`) names no built-in
//! workload, in code (comments and doc links may point anywhere).

use std::path::{Path, PathBuf};

/// The runner's modules, and what the crate's root re-exports of them.
const RUNNER: &[&str] = &[
    "RunConfig",
    "RunError",
    "run_job",
    "Job",
    "Jobs",
    "Operators",
    "Source",
    "files",
    "harness",
    "job",
    "latency",
    "membership",
    "rate",
    "rss",
    "sampler",
    "sink",
    "source",
    "summary",
];
const WORKLOADS: &[&str] = &["workload", "nexmark", "skew"];

fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|x| x == "rs") {
            into.push(path);
        }
    }
}

/// The top modules `code` names after `crate::`: `crate::a::b` names `a`, and
/// `crate::{a::b, c}` names `a` and `c`.
fn named(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let end = group
                    .char_indices()
                    .find(|(_, c)| {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => return true,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        false
                    })
                    .map_or(group.len(), |(i, _)| i);
                // Top-level items only: those after a comma outside inner braces.
                let mut depth = 0;
                let mut item = String::new();
                for c in group[..end].chars().chain([',']) {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.push(ident(item.trim()));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
            }
            None => names.push(ident(rest)),
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Each file under `src/layer` that names a module of `above`, with the modules it names.
fn reaching_up(layer: &str, above: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(layer);
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(!files.is_empty(), "{} holds the {layer}'s files", root.display());
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let mut up: Vec<String> = named(&code)
            .into_iter()
            .filter(|n| above.contains(&n.as_str()))
            .collect();
        up.sort();
        up.dedup();
        if !up.is_empty() {
            found.push(format!("{}: {}", file.display(), up.join(", ")));
        }
    }
    found
}

#[test]
fn the_engine_knows_neither_the_runner_nor_the_workloads() {
    let above: Vec<&str> = RUNNER.iter().chain(WORKLOADS).copied().collect();
    let found = reaching_up("engine", &above);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_runner_knows_no_built_in_workload() {
    let found = reaching_up("runner", WORKLOADS);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn names_are_read_from_paths_and_groups() {
    assert_eq!(named("use crate::harness::RunConfig;"), ["harness"]);
    assert_eq!(
        named("use crate::{\n    bins::Bins,\n    job::{Job, Operators},\n    skew,\n};"),
        ["bins", "job", "skew"]
    );
    assert_eq!(named("let n = crate::nexmark::Query::new(1);"), ["nexmark"]);
    // The workloads do name the runner: the check reads what it means to.
    assert!(!reaching_up("nexmark", RUNNER).is_empty());
}
