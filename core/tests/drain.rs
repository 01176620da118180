//! The end of a run whose operators scheduled work for later times: the drain. A job whose
//! timers re-arm themselves for ever still ends — at `--duration`, at a stop, or at the
//! horizon its `Job::drain` gives — with every output of the times before the end written
//! once, and the summary saying what was left.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::epoch::EpochLen;
use megaflux::harness::Pace;
use megaflux::job::{Drain, Job, Operators};
use megaflux::summary::Summary;
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, Bins, RunConfig, Source, Time, bins::hash_key, run_job};
use megaflux_testkit::wait_until;
use serde::{Deserialize, Serialize};

mod common;

const LINES: u64 = 2_000;
/// Logical times between two ticks of a bin's timer.
const PERIOD: Time = 10;

/// Counts each key's records, and keeps a timer per bin that ticks every [`PERIOD`] from
/// the bin's first record on and re-arms itself for ever; each tick is an output when the
/// job says so (`ticks_out`).
struct Ticker {
    drain: Drain,
    ticks_out: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
enum Out {
    Seen(u64, u64),
    Tick(Time),
}

/// Each key's count, and whether the bin's timer runs: a tuple of standard types is a bin's
/// state as it is (no newtype, no `StateSize` of one's own).
type Counts = (BTreeMap<u64, u64>, bool);

impl Job for Ticker {
    type In = u64;
    type Out = Out;

    fn name(&self) -> &str {
        "ticker"
    }

    fn source(&self, _run: &RunConfig) -> Source<u64> {
        Source::lines(|l: &str| l.parse::<u64>().map_err(|e| e.to_string()))
    }

    fn drain(&self, _run: &RunConfig) -> Drain {
        self.drain
    }

    fn dataflow<'s>(&self, input: StreamVec<'s, Time, u64>, ops: &Operators<'s>) -> StreamVec<'s, Time, Out> {
        let ticks_out = self.ticks_out;
        ops.unary(
            input,
            "ticker",
            |k: &u64| hash_key(k),
            move |t, bin: &mut Bin<Counts>, keys: &mut Vec<u64>, out: &mut Vec<Out>| {
                if bin.state.1 && bin.scheduled().next().is_none() {
                    // This run is the tick: re-arm.
                    if ticks_out {
                        out.push(Out::Tick(t));
                    }
                    bin.schedule(t + PERIOD);
                }
                for k in keys.drain(..) {
                    let n = bin.state.0.entry(k).or_default();
                    *n += 1;
                    out.push(Out::Seen(k, *n));
                }
                if !bin.state.1 {
                    bin.state.1 = true;
                    bin.schedule(t + PERIOD);
                }
            },
        )
    }
}

/// The input of the test `name`, in a directory of its own (the tests run at once): its
/// output goes next to it.
fn input(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("megaflux-drain-{name}-{}", std::process::id()));
    // What a failed earlier run of this process id left is no input of this one.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("keys.txt");
    let text: String = (0..LINES).map(|i| format!("{}\n", (i * 7919) % 97)).collect();
    std::fs::write(&path, text).expect("the input written");
    path
}

fn config(name: &str, duration: Duration) -> RunConfig {
    let input = input(name);
    let output = input.with_file_name("out.jsonl");
    RunConfig {
        workload: "ticker".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        rate: 20_000,
        duration,
        epoch: EpochLen::MS,
        pace: Pace::Max,
        input: Some(input.display().to_string().parse().unwrap()),
        output: Some(output.into()),
        replace_output: true,
        ..RunConfig::default()
    }
}

/// Runs `job`; its summary and its output file's lines, parsed.
fn run(job: Ticker, config: RunConfig, control: ControlHandle) -> (Summary, Vec<Out>) {
    let output = config
        .output
        .as_ref()
        .and_then(|o| o.file())
        .unwrap()
        .to_path_buf();
    let what = format!("the run writing {}", output.display());
    let summary = common::in_time(&what, move || run_job(Arc::new(job), config, control))
        .expect("the run succeeds")
        .expect("this process hosts worker 0");
    let lines: Vec<Out> = std::fs::read_to_string(&output)
        .expect("the output file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an output line"))
        .collect();
    if let Some(dir) = output.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    (summary, lines)
}

/// The times of the ticks among `lines`.
fn ticks(lines: &[Out]) -> Vec<Time> {
    lines
        .iter()
        .filter_map(|o| match o {
            Out::Tick(t) => Some(*t),
            _ => None,
        })
        .collect()
}

/// Every record's output is there, once.
fn every_record_counted(lines: &[Out]) {
    let seen = lines.iter().filter(|o| matches!(o, Out::Seen(..))).count() as u64;
    assert_eq!(seen, LINES, "one output per record");
}

#[test]
fn a_timer_that_rearms_for_ever_is_cut_at_the_duration() {
    let job = Ticker {
        drain: Drain::All,
        ticks_out: false,
    };
    let (summary, lines) = run(
        job,
        config("duration", Duration::from_secs(2)),
        ControlHandle::new(),
    );
    every_record_counted(&lines);
    assert_eq!(summary.outputs_written, Some(lines.len() as u64));
    assert_eq!(summary.outputs, LINES);
    let drain = summary.drain.expect("the run drained");
    assert!(drain.cut, "{drain:?}");
    assert_eq!(
        drain.bins_pending, 16,
        "every bin's timer was still armed: {drain:?}"
    );
    let next = drain.next_time.expect("a time");
    assert!(
        next >= drain.ended_at && next < drain.ended_at + PERIOD,
        "{drain:?}"
    );
    assert!(drain.ended_at > drain.input_end, "{drain:?}");
}

#[test]
fn a_stop_cuts_the_drain_and_writes_what_came_before() {
    let job = Ticker {
        drain: Drain::All,
        ticks_out: true,
    };
    let control = ControlHandle::new();
    let stopper = control.clone();
    let ended = Arc::new(AtomicBool::new(false));
    let over = Arc::clone(&ended);
    // Stopped once the drain is seen under way (a run that ended before fails below).
    let stopping = std::thread::spawn(move || {
        wait_until("the drain to be under way", common::JOB_LIMIT, || {
            stopper.draining().is_some() || over.load(Ordering::Acquire)
        });
        stopper.stop();
    });
    let (summary, lines) = run(job, config("stop", Duration::from_secs(600)), control);
    ended.store(true, Ordering::Release);
    stopping.join().expect("the stopper waited for the drain");
    every_record_counted(&lines);
    let drain = summary.drain.expect("the run drained");
    assert!(drain.cut && drain.bins_pending == 16, "{drain:?}");
    // Ticks of every time before the end, none after it: each bin ticks every PERIOD from
    // its first record on, so the last tick of every bin is within a period of the end.
    let ticks = ticks(&lines);
    assert_eq!(summary.outputs, lines.len() as u64);
    assert!(ticks.iter().all(|t| *t < drain.ended_at), "{drain:?}");
    let late = ticks.iter().filter(|t| **t + PERIOD >= drain.ended_at).count();
    assert_eq!(
        late, 16,
        "every bin's last tick before the end is written: {drain:?}"
    );
}

#[test]
fn a_drain_of_a_given_length_runs_to_its_horizon_and_no_further() {
    let job = Ticker {
        drain: Drain::For(Duration::from_millis(95)),
        ticks_out: true,
    };
    let (summary, lines) = run(
        job,
        config("horizon", Duration::from_secs(600)),
        ControlHandle::new(),
    );
    every_record_counted(&lines);
    let drain = summary.drain.expect("the run drained");
    // 95 ms of 1 ms epochs after the last epoch.
    assert_eq!(drain.ended_at, drain.input_end + 1 + 95, "{drain:?}");
    assert!(!drain.cut, "work past the horizon is not the drain's: {drain:?}");
    assert_eq!(drain.bins_pending, 16, "{drain:?}");
    let ticks = ticks(&lines);
    assert!(ticks.iter().all(|t| *t < drain.ended_at));
    let late = ticks.iter().filter(|t| **t + PERIOD >= drain.ended_at).count();
    assert_eq!(late, 16, "{drain:?}");
}

#[test]
fn a_run_that_does_not_drain_ends_with_its_last_epoch() {
    let job = Ticker {
        drain: Drain::Off,
        ticks_out: true,
    };
    let (summary, lines) = run(job, config("off", Duration::from_secs(600)), ControlHandle::new());
    every_record_counted(&lines);
    assert_eq!(summary.drain, None);
}
