//! A type whose serde form bincode cannot read passes every run on one process, where
//! nothing is encoded, and then fails in a cluster. Debug builds (the tests') round-trip the
//! first record, output and bin state of every operator, and stop the job at once naming the
//! operator and the type: here a record that is an untagged enum, a bin state with a
//! flattened field and an output that skips a field.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use megaflux::control::ControlHandle;
use megaflux::epoch::EpochLen;
use megaflux::harness::Pace;
use megaflux::job::{Job, Operators};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, Bins, RunConfig, RunError, Source, Time, bins::hash_key, run_job};
use serde::{Deserialize, Serialize};

mod common;

/// Records as the job reads them: a click or a view, told apart by shape alone.
#[derive(Clone, Debug, Hash, Serialize, Deserialize)]
#[serde(untagged)]
enum Event {
    Click { user: u64 },
    View { user: u64, page: String },
}

#[derive(Default, Serialize, Deserialize)]
struct Totals {
    clicks: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct Flattened {
    #[serde(flatten)]
    totals: Totals,
}

impl megaflux::size::StateSize for Flattened {}

#[derive(Clone, Debug, Hash, Serialize, Deserialize)]
struct Sparse {
    user: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<String>,
}

/// Which of the three the job gets wrong.
#[derive(Clone, Copy)]
enum Wrong {
    Record,
    State,
    Output,
}

struct Shapes(Wrong);

impl Job for Shapes {
    type In = u64;
    type Out = Sparse;

    fn name(&self) -> &str {
        "shapes"
    }

    fn source(&self, _run: &RunConfig) -> Source<u64> {
        Source::lines(|l: &str| l.parse::<u64>().map_err(|e| e.to_string()))
    }

    fn dataflow<'s>(
        &self,
        input: StreamVec<'s, Time, u64>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Sparse> {
        use megaflux::timely::dataflow::operators::vec::Map;
        match self.0 {
            Wrong::Record => {
                let events = input.map(|user| Event::Click { user });
                ops.unary(
                    events,
                    "by-user",
                    |e: &Event| hash_key(&user_of(e)),
                    |_t, bin: &mut Bin<BTreeMap<u64, u64>>, events, out| {
                        for e in events.drain(..) {
                            *bin.state.entry(user_of(&e)).or_default() += 1;
                            out.push(Sparse {
                                user: user_of(&e),
                                page: Some("p".into()),
                            });
                        }
                    },
                )
            }
            Wrong::State => ops.unary(
                input,
                "totals",
                |u: &u64| hash_key(u),
                |_t, bin: &mut Bin<Flattened>, users, out| {
                    for user in users.drain(..) {
                        bin.state.totals.clicks += 1;
                        out.push(Sparse {
                            user,
                            page: Some("p".into()),
                        });
                    }
                },
            ),
            Wrong::Output => ops.unary(
                input,
                "sparse",
                |u: &u64| hash_key(u),
                |_t, _bin: &mut Bin<BTreeMap<u64, u64>>, users, out| {
                    out.extend(users.drain(..).map(|user| Sparse { user, page: None }));
                },
            ),
        }
    }
}

impl Wrong {
    fn name(self) -> &'static str {
        match self {
            Wrong::Record => "record",
            Wrong::State => "bin state",
            Wrong::Output => "output",
        }
    }
}

fn user_of(e: &Event) -> u64 {
    match e {
        Event::Click { user } | Event::View { user, .. } => *user,
    }
}

fn run(wrong: Wrong) -> String {
    let dir = std::env::temp_dir().join(format!("megaflux-serde-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("users.txt");
    std::fs::write(
        &input,
        (0..200).map(|i| format!("{}\n", i % 17)).collect::<String>(),
    )
    .unwrap();
    let config = RunConfig {
        workload: "shapes".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        rate: 10_000,
        duration: Duration::from_secs(30),
        epoch: EpochLen::MS,
        pace: Pace::Max,
        input: Some(input.display().to_string().parse().unwrap()),
        ..RunConfig::default()
    };
    let what = format!("the run with a wrong {}", wrong.name());
    let ran = common::in_time(&what, move || {
        run_job(Arc::new(Shapes(wrong)), config, ControlHandle::new()).map(|_| ())
    });
    match ran {
        Err(RunError::Worker(message)) => message,
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("the run succeeded"),
    }
}

#[test]
fn types_bincode_cannot_read_stop_the_job_naming_operator_and_type() {
    let record = run(Wrong::Record);
    assert!(
        record.contains("operator by-user: its records (serde::Event) cannot cross processes"),
        "{record}"
    );
    let state = run(Wrong::State);
    assert!(state.contains("operator totals: its bin state ("), "{state}");
    assert!(
        state.contains("Flattened") && state.contains("#[serde(flatten)]"),
        "{state}"
    );
    let output = run(Wrong::Output);
    assert!(
        output.contains("operator sparse: its outputs (serde::Sparse) cannot cross processes"),
        "{output}"
    );
}
