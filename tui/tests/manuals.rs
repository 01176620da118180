//! The manuals say what works: every `megaflux` command line in a ```sh block of the
//! README, the crates' manuals, performance pages and test pages is one the command line
//! accepts (its subcommand, flags and values, and for `run` the job's own flags), and every
//! relative link leads to a file that is there, and to a heading of it that is there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use megaflux::job::{Flag, Job, Jobs, Operators, Params};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{RunConfig, Source, Time};
use megaflux_tui::cli::{Usage, check_command_line};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds tui/")
        .to_path_buf()
}

/// Every Markdown file of the docs: the README, and those of each crate and its tests.
fn manuals() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = vec![root.join("README.md")];
    for dir in ["core", "probe", "tui", "replay", "traces"] {
        for sub in [root.join(dir), root.join(dir).join("tests")] {
            let Ok(entries) = std::fs::read_dir(&sub) else {
                continue;
            };
            let mut here: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect();
            here.sort();
            files.extend(here);
        }
    }
    files
}

/// A job standing in for an example's, by its name and flags: the manuals run the examples
/// (`cargo run --release --example sessions -- run ...`) as well as `megaflux`.
struct StandIn {
    name: &'static str,
    params: Params,
}

impl Job for StandIn {
    type In = String;
    type Out = String;

    fn name(&self) -> &str {
        self.name
    }

    fn params(&self) -> Params {
        self.params.clone()
    }

    fn source(&self, _run: &RunConfig) -> Source<String> {
        Source::lines(|l: &str| Ok::<_, String>(l.to_string()))
    }

    fn dataflow<'s>(
        &self,
        input: StreamVec<'s, Time, String>,
        _ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, String> {
        input
    }
}

/// The sessions example's flag (`tui/examples/sessions.rs`).
const GAP_MS: Flag<u64> = Flag::new("gap-ms", "200", "gap");

/// The jobs of the binary a command runs: `megaflux`'s built-in workloads, or an example's
/// (`filecount` offers the built-in workloads too).
fn jobs(example: Option<&str>) -> Jobs {
    let stand_in = |name: &'static str, params: Params| Jobs::from(StandIn { name, params });
    match example {
        None => megaflux::workload::builtin(),
        Some("filecount") => megaflux::workload::builtin().and(stand_in("filecount", Params::new())),
        Some("sessions") => stand_in("sessions", Params::new().with(&GAP_MS)),
        Some("pageviews") => stand_in("pageviews", Params::new()),
        Some("active") => stand_in("active", Params::new()),
        Some(other) => panic!("the manuals run an example this test does not know: {other}"),
    }
}

/// `word` with the services' variables that `tui/scripts/services.sh` prints (the manuals'
/// Kafka and PostgreSQL commands use them) set to addresses of their form.
fn services(word: &str) -> String {
    word.replace("$MEGAFLUX_KAFKA", "127.0.0.1:9092").replace(
        "$MEGAFLUX_PG_URL",
        "postgresql://postgres@127.0.0.1:5432/postgres",
    )
}

/// `to_kafka HOST:PORT TOPIC PARTITIONS < FILE` (`tui/examples/to_kafka.rs`, which fills a
/// topic) is no megaflux command line: its three arguments.
fn to_kafka(args: &[String]) -> Result<(), String> {
    let given: Vec<&String> = args.iter().take_while(|a| *a != "<").collect();
    match given.as_slice() {
        [_, topic, n] if !topic.is_empty() && n.parse::<u32>().is_ok_and(|n| n > 0) => Ok(()),
        _ => Err(format!(
            "to_kafka takes HOST:PORT TOPIC PARTITIONS, not {given:?}"
        )),
    }
}

/// Whether `args` of the binary of `example` are accepted; what is wrong if not.
fn accepted(example: Option<&str>, args: Vec<String>) -> Result<(), String> {
    if example == Some("to_kafka") {
        return to_kafka(&args);
    }
    let argv = std::iter::once("megaflux".to_string()).chain(args);
    match check_command_line(argv, &jobs(example)) {
        Ok(()) => Ok(()),
        Err(Usage::Clap(e)) if !e.use_stderr() => Ok(()),
        Err(Usage::Clap(e)) => Err(e.render().to_string()),
        Err(Usage::Jobs(why)) => Err(why),
    }
}

/// The ```sh blocks of `text`, each line with its number.
fn sh_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut inside = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            inside = !inside && trimmed.trim_end() == "```sh";
            continue;
        }
        if !inside {
            continue;
        }
        let (number, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        match line.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((number, joined));
            }
            None => {
                joined.push_str(line);
                lines.push((number, joined));
            }
        }
    }
    lines
}

/// `line` in words as a shell splits it (quotes, and a comment from an unquoted `#`), cut
/// into its commands at `&&`, `||`, `;`, `|` and `&`.
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '#') if word.is_none() => break,
            (None, c) if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    commands.last_mut().unwrap().push(w);
                }
            }
            (None, '&' | '|' | ';') => {
                if let Some(w) = word.take() {
                    commands.last_mut().unwrap().push(w);
                }
                while chars.peek().is_some_and(|n| matches!(n, '&' | '|')) {
                    chars.next();
                }
                commands.push(Vec::new());
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = word {
        commands.last_mut().unwrap().push(w);
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The example `words` run (`None`: `megaflux` itself) and the arguments it gets, if they
/// run one: `megaflux ...`, a path to it, or `cargo run --release [--example NAME] -- ...`
/// (environment settings before it are skipped).
fn megaflux_args(words: &[String]) -> Option<(Option<String>, Vec<String>)> {
    let start = words
        .iter()
        .position(|w| !w.contains('=') || w.starts_with('-'))?;
    let words = &words[start..];
    let first = words.first()?;
    if first == "megaflux" || first.ends_with("/megaflux") {
        return Some((None, words[1..].to_vec()));
    }
    if first == "cargo" && words.get(1).is_some_and(|w| w == "run") {
        let dashes = words.iter().position(|w| w == "--").unwrap_or(words.len());
        let example = words[..dashes]
            .iter()
            .position(|w| w == "--example")
            .and_then(|i| words.get(i + 1).cloned());
        let args = words.get(dashes + 1..).unwrap_or_default().to_vec();
        return Some((example, args));
    }
    None
}

#[test]
fn every_megaflux_command_in_the_manuals_is_accepted() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in manuals() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in sh_lines(&text) {
            for words in commands(&line) {
                let words: Vec<String> = words.iter().map(|w| services(w)).collect();
                let Some((example, args)) = megaflux_args(&words) else {
                    continue;
                };
                checked += 1;
                if let Err(why) = accepted(example.as_deref(), args) {
                    let first = why.lines().next().unwrap_or_default().to_string();
                    wrong.push(format!("{}:{number}: `{line}`: {first}", file.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The set-up commands alone are more than this: the check reads the blocks it means to.
    assert!(checked >= 20, "only {checked} megaflux commands found");
}

#[test]
fn the_checker_refuses_what_the_command_line_refuses() {
    let check = |line: &str| {
        commands(line)
            .iter()
            .filter_map(|w| megaflux_args(w))
            .map(|(example, args)| accepted(example.as_deref(), args).is_ok())
            .collect::<Vec<_>>()
    };
    assert_eq!(check("cargo run --release -- run --keys 10   # ten keys"), [true]);
    assert_eq!(check("megaflux run --workload q4 --keys 10"), [false]);
    assert_eq!(check("megaflux run --rate many"), [false]);
    assert_eq!(
        check("megaflux bench --quick && megaflux report x.json --svg x.svg"),
        [true, true]
    );
    assert_eq!(check("MEGAFLUX_TOKEN=x megaflux run --no-such-flag &"), [false]);
    assert_eq!(
        check("cargo run --release --example sessions -- run --input c.csv --gap-ms 5"),
        [true]
    );
    assert_eq!(
        check("cargo run --release -- run --input c.csv --gap-ms 5"),
        [false]
    );
    assert_eq!(check("cargo test --workspace"), Vec::<bool>::new());
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut inside = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside && let Some(heading) = line.strip_prefix('#') {
            found.insert(anchor(heading.trim_start_matches('#')));
        }
    }
    found
}

/// The targets of the Markdown links in `text`: `](target)`.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn every_relative_link_of_the_manuals_leads_somewhere() {
    let mut wrong = Vec::new();
    for file in manuals() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let to = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !to.exists() {
                wrong.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            if !fragment.is_empty() && to.extension().is_some_and(|x| x == "md") {
                let there = anchors(&std::fs::read_to_string(&to).unwrap());
                if !there.contains(fragment) {
                    wrong.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
