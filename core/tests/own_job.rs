//! A job defined here, not a built-in, run by the public runner on records it reads from a
//! file: under random moves, plans, failures and rejoins it writes the same outputs to
//! `--output`, each exactly once, and has the same digest as the run without them, its
//! scheduled work moving with its bins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use megaflux::control::{Command, ControlHandle};
use megaflux::epoch::EpochLen;
use megaflux::harness::{Pace, Scripted};
use megaflux::job::{Job, Operators};
use megaflux::plan::{Schedule, Strategy as Plan, Target};
use megaflux::summary::Summary;
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, Bins, RunConfig, Source, Time, bins::hash_key, run_job};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

mod common;

const LINES: u64 = 3_000;
const KEYS: u64 = 40;
const WORKERS: usize = 3;
/// The epochs the input takes at the test's rate (20 records an epoch).
const EPOCHS: u64 = 150;

/// A running total per key, with an alarm a few times later for every fifth record that
/// reports the key's total then: order-sensitive outputs and scheduled work.
struct Tally;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
enum Out {
    Seen(u32, u64, u64),
    Alarm(u32, u64),
}

#[derive(Default, Serialize, Deserialize)]
struct Totals {
    totals: BTreeMap<u32, (u64, u64)>,
    alarms: BTreeMap<Time, Vec<u32>>,
}

impl megaflux::size::StateSize for Totals {
    fn keys(&self) -> usize {
        self.totals.len()
    }
    fn bytes(&self) -> usize {
        self.totals.len() * 24
    }
}

impl Job for Tally {
    type In = (u32, u64);
    type Out = Out;

    fn name(&self) -> &str {
        "tally"
    }

    fn source(&self, _run: &RunConfig) -> Source<(u32, u64)> {
        Source::csv()
    }

    fn dataflow<'s>(
        &self,
        input: StreamVec<'s, Time, (u32, u64)>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Out> {
        ops.unary(
            input,
            "tally",
            |r: &(u32, u64)| hash_key(&r.0),
            |t, bin: &mut Bin<Totals>, records: &mut Vec<(u32, u64)>, out: &mut Vec<Out>| {
                if let Some(keys) = bin.state.alarms.remove(&t) {
                    for k in keys {
                        out.push(Out::Alarm(k, bin.state.totals[&k].0));
                    }
                }
                for (k, v) in records.drain(..) {
                    let total = bin.state.totals.entry(k).or_default();
                    total.0 += v;
                    total.1 += 1;
                    out.push(Out::Seen(k, total.0, total.1));
                    if v % 5 == 0 {
                        bin.state.alarms.entry(t + 7).or_default().push(k);
                        bin.schedule(t + 7);
                    }
                }
            },
        )
    }
}

/// The input file, written once.
fn input() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("megaflux-own-job-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("records.csv");
        let mut text = String::new();
        for i in 0..LINES {
            // Skewed keys: low keys far more often.
            let k = (i * i * 7 + i / 3) % KEYS * (i % 3) / 2;
            text.push_str(&format!("{k},{}\n", i % 17));
        }
        std::fs::write(&path, text).expect("the input written");
        path
    })
}

fn config(replicas: usize, script: Vec<Scripted>, output: PathBuf) -> RunConfig {
    RunConfig {
        workload: "tally".into(),
        workers: WORKERS,
        bins: Bins::new(16).unwrap(),
        rate: 20_000,
        duration: Duration::from_secs(60),
        epoch: EpochLen::MS,
        pace: Pace::Max,
        replicas,
        script,
        input: Some(input().display().to_string().parse().unwrap()),
        output: Some(output.into()),
        replace_output: true,
        ..RunConfig::default()
    }
}

/// Runs `config`; its summary and its output file's lines, sorted.
fn run(config: RunConfig) -> (Summary, Vec<String>) {
    let output = config
        .output
        .as_ref()
        .and_then(|o| o.file())
        .unwrap()
        .to_path_buf();
    let what = format!("the run writing {}", output.display());
    let summary = common::in_time(&what, move || {
        run_job(Arc::new(Tally), config, ControlHandle::new())
    })
    .expect("the run succeeds")
    .expect("this process hosts worker 0");
    let mut lines: Vec<String> = std::fs::read_to_string(&output)
        .expect("the output file")
        .lines()
        .map(str::to_string)
        .collect();
    let _ = std::fs::remove_file(&output);
    lines.sort_unstable();
    (summary, lines)
}

fn baseline() -> &'static (Summary, Vec<String>) {
    static BASE: OnceLock<(Summary, Vec<String>)> = OnceLock::new();
    BASE.get_or_init(|| run(config(1, Vec::new(), input().with_extension("base.jsonl"))))
}

fn schedule() -> impl Strategy<Value = Schedule> {
    (0..4usize, any::<bool>()).prop_map(|(s, pipelined)| Schedule {
        strategy: [Plan::AllAtOnce, Plan::Fluid, Plan::Batched(3), Plan::Matched][s],
        pipelined,
    })
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (prop::collection::vec(0..16usize, 1..6), 0..WORKERS).prop_map(|(bins, worker)| Command::MoveBins {
            bins,
            worker,
            standby: false,
        }),
        (schedule(), 0..3usize).prop_map(|(schedule, t)| Command::StartPlan {
            schedule,
            target: [Target::Uniform, Target::Pack(1), Target::Drain(2)][t].clone(),
        }),
    ]
}

/// Moves and plans at random epochs, and maybe one worker's failure, and its rejoin later.
fn script() -> impl Strategy<Value = (Vec<Scripted>, bool)> {
    (
        prop::collection::vec((1..EPOCHS, command()), 0..5),
        prop::option::of((0..WORKERS, 1..EPOCHS, prop::option::of(1..40u64))),
    )
        .prop_map(|(moves, failure)| {
            let mut script: Vec<Scripted> = moves
                .into_iter()
                .map(|(epoch, command)| Scripted { epoch, command })
                .collect();
            if let Some((worker, at, rejoin)) = failure {
                script.push(Scripted {
                    epoch: at,
                    command: Command::Fail { worker },
                });
                if let Some(after) = rejoin {
                    script.push(Scripted {
                        epoch: at + after,
                        command: Command::Rejoin { worker },
                    });
                }
            }
            script.sort_by_key(|s| s.epoch);
            let fails = script.iter().any(|s| matches!(s.command, Command::Fail { .. }));
            (script, fails)
        })
}

proptest! {
    // Shrinking is bounded in time: a case whose run hangs costs `common::JOB_LIMIT` a try.
    #![proptest_config(ProptestConfig { cases: 12, max_shrink_time: 300_000, ..ProptestConfig::default() })]

    #[test]
    fn any_schedule_gives_the_outputs_of_none((script, fails) in script(), two in any::<bool>()) {
        let (base, base_lines) = baseline();
        prop_assert_eq!(base_lines.len() as u64, base.outputs);
        prop_assert!(base_lines.iter().filter(|l| l.contains("Seen")).count() as u64 == LINES);
        let replicas = if fails || two { 2 } else { 1 };
        let out = input().with_extension(format!("{}.jsonl", rand_name(&script, replicas)));
        let (summary, lines) = run(config(replicas, script, out));
        prop_assert_eq!(&summary.output_digest, &base.output_digest);
        prop_assert_eq!(summary.outputs_written, base.outputs_written);
        prop_assert_eq!(&lines, base_lines);
    }
}

/// A file name per case (cases run one after another, but a failed one leaves its file).
fn rand_name(script: &[Scripted], replicas: usize) -> String {
    format!("case-{replicas}-{:x}", hash_key(&format!("{script:?}")))
}

/// The outputs as JSON values (as a table's JSONB column reads back), sorted by their text.
fn as_values<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut values: Vec<String> = lines
        .into_iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .expect("an output is JSON")
                .to_string()
        })
        .collect();
    values.sort_unstable();
    values
}

/// The same schedules with `--output` to a real PostgreSQL table: the table holds the plain
/// run's outputs, each once, and the sink's progress ends committed to the end of time.
#[test]
fn any_schedule_writes_the_outputs_of_none_to_a_postgresql_table() {
    let pg = megaflux_testkit::Postgres::start();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 4,
        max_shrink_time: 300_000,
        ..ProptestConfig::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&(script(), any::<bool>()), |((script, fails), two)| {
        let (base, base_lines) = baseline();
        let replicas = if fails || two { 2 } else { 1 };
        let table = format!(
            "own_job_{}_{}",
            std::process::id(),
            case.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut config = config(replicas, script, input().with_extension("unused.jsonl"));
        config.output = Some(
            format!("{}?table={table}", pg.url())
                .parse()
                .expect("a PostgreSQL URL"),
        );
        let summary = common::in_time(&format!("the run writing table {table}"), move || {
            run_job(Arc::new(Tally), config, ControlHandle::new())
        })
        .expect("the run succeeds")
        .expect("this process hosts worker 0");
        let mut client = postgres::Client::connect(pg.url(), postgres::NoTls).expect("the test connects");
        let rows: Vec<String> = client
            .query(&format!("SELECT output FROM {table}"), &[])
            .expect("the table is read")
            .iter()
            .map(|r| r.get::<_, serde_json::Value>(0).to_string())
            .collect();
        let upto: i64 = client
            .query_one("SELECT upto FROM megaflux_progress WHERE sink = $1", &[&table])
            .expect("the sink's progress")
            .get(0);
        let mut rows = rows;
        rows.sort_unstable();
        prop_assert_eq!(&summary.output_digest, &base.output_digest);
        prop_assert_eq!(summary.outputs_written, base.outputs_written);
        prop_assert_eq!(rows, as_values(base_lines.iter().map(String::as_str)));
        prop_assert_eq!(upto, i64::MAX);
        prop_assert_eq!(summary.output.map(|o| o.committed_time), Some(u64::MAX));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
