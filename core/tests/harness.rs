//! Commands sent through the control handle while a job runs: applied ones move bins,
//! rejected ones change nothing, and the output stays the same. Scripted commands (a
//! re-run's) are taken at exactly their epochs, up to the run's last one, at either pace.
//!
//! A run here is in real time on a machine that may be busy: nothing a test checks depends
//! on how far a run got by a time. Commands go in once the run says it is under way, the
//! next once the plans before it completed (as the run's own events say), and the run is
//! then stopped and compared with one of the same length.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::mpsc::channel;
use std::thread;
use std::time::Duration;

use megaflux::control::{Command, ControlHandle};
use megaflux::epoch::EpochLen;
use megaflux::harness::{EpochMode, Idle, Pace, RunConfig, RunError, Scripted};
use megaflux::job::ParamValues;
use megaflux::plan::{Schedule, Strategy, Target};
use megaflux::summary::Summary;
use megaflux::workload::run;
use megaflux_testkit::{deadline, wait_until};

mod common;

use common::{Logged, Running, length_of};

fn config(workload: &str) -> RunConfig {
    RunConfig {
        workload: workload.to_string(),
        workers: 2,
        // The counting workloads' own flag; the NEXMark queries take theirs.
        params: match workload {
            "keycount" | "hashcount" => ParamValues::new().with("keys", 5_000),
            _ => ParamValues::new(),
        },
        rate: 20_000,
        duration: Duration::from_millis(1500),
        ..RunConfig::default()
    }
}

/// Runs `config` in this process with nobody sending commands; its summary.
fn summary_of(config: RunConfig) -> Summary {
    common::in_time("a run with nobody sending commands", move || {
        run(config, ControlHandle::new())
    })
    .expect("the run succeeds")
    .expect("this process hosts worker 0")
}

/// This run's events on the thread that took the commands of its handle (its worker 0's;
/// no other run of these tests is sent commands through a handle, and the tests run at
/// once).
fn handle_events(running: &Running) -> Vec<Logged> {
    let since = running.events();
    let Some(worker0) = since
        .iter()
        .find(|e| e.target == "megaflux::command" && e.field("source") == Some("handle"))
        .map(|e| e.thread)
    else {
        return Vec::new();
    };
    since.into_iter().filter(|e| e.thread == worker0).collect()
}

/// Plans of the run sent commands that completed.
fn plans_completed(running: &Running) -> usize {
    handle_events(running)
        .iter()
        .filter(|e| e.target == "megaflux::plan" && e.field("phase") == Some("completed"))
        .count()
}

/// What became of each command of the run's handle taken so far: `applied` or `rejected`.
fn commands_taken(running: &Running) -> Vec<String> {
    handle_events(running)
        .iter()
        .filter(|e| e.target == "megaflux::command" && e.field("source") == Some("handle"))
        .map(|e| e.field("outcome").unwrap_or("?").to_string())
        .collect()
}

#[test]
fn control_handle_commands_move_bins_without_changing_output() {
    for workload in ["keycount", "hashcount"] {
        // Far longer than the test waits: the test stops it. As fast as it goes: the input
        // waits for the output, so that a machine too busy to keep up neither piles up
        // records nor leaves the plans waiting behind them.
        let long = RunConfig {
            duration: Duration::from_secs(3600),
            pace: Pace::Max,
            ..config(workload)
        };
        let mut running = Running::start(&format!("the {workload} run sent commands"), long);
        running.wait_for("its first epoch measured", |r| !r.handle().progress().is_zero());
        let sender = running.handle().clone();
        sender.send(Command::MoveBins {
            bins: vec![999],
            worker: 0,
            standby: false,
        });
        sender.send(Command::MoveBins {
            bins: vec![0],
            worker: 7,
            standby: false,
        });
        sender.send(Command::MoveBins {
            bins: (0..20).collect(),
            worker: 1,
            standby: false,
        });
        running.wait_for("the three moves taken", |r| commands_taken(r).len() >= 3);
        assert_eq!(
            commands_taken(&running),
            ["rejected", "rejected", "applied"],
            "a bin and a worker the job does not have are refused"
        );
        running.wait_for("the move of bins 0..20 completed", |r| plans_completed(r) >= 1);
        // Once it completed: a plan is refused while another runs.
        sender.send(Command::StartPlan {
            schedule: Schedule {
                strategy: Strategy::Fluid,
                pipelined: true,
            },
            target: Target::Pack(1),
        });
        running.wait_for("the fluid plan completed", |r| plans_completed(r) >= 2);
        assert_eq!(
            commands_taken(&running),
            ["rejected", "rejected", "applied", "applied"]
        );
        let moved = running.stop();
        // The same run, as long, with nobody sending commands.
        let baseline = summary_of(RunConfig {
            duration: length_of(&moved),
            pace: Pace::Max,
            ..config(workload)
        });
        assert_eq!(moved.duration_s, baseline.duration_s);
        assert_eq!(moved.output_digest, baseline.output_digest);
        assert_eq!(moved.outputs, baseline.outputs);
        let m = &moved.migrations;
        assert_eq!(m.len(), 2, "{m:?}");
        // Bins 0..20 alternate between the workers: the ten on worker 0 move.
        assert_eq!(m[0].bins_moved, 10);
        assert_eq!(m[0].steps, 1);
        assert!(m[0].completed_s.is_some());
        // Then everything on worker 1 goes to worker 0: its 128 bins and the 10 it got.
        assert_eq!(m[1].strategy, "fluid+pipelined");
        assert_eq!(m[1].bins_moved, 138);
        assert!(m[1].completed_s.is_some(), "{:?}", m[1]);
        assert!(m.iter().all(|m| m.bytes_moved > 0));
    }
}

#[test]
fn scripted_commands_are_taken_at_their_epochs_even_the_last() {
    for pace in [Pace::Max, Pace::OpenLoop] {
        let last = 400;
        let config = RunConfig {
            workers: 3,
            replicas: 2,
            // Epochs of 1 ms: the script's epochs are the run's milliseconds.
            epoch: EpochLen::MS,
            duration: Duration::from_millis(last),
            pace,
            script: vec![
                Scripted {
                    epoch: 150,
                    command: Command::StartPlan {
                        schedule: Schedule {
                            strategy: Strategy::Fluid,
                            pipelined: false,
                        },
                        target: Target::Pack(2),
                    },
                },
                Scripted {
                    epoch: last - 3,
                    command: Command::Fail { worker: 2 },
                },
                Scripted {
                    epoch: last,
                    command: Command::Rejoin { worker: 2 },
                },
            ],
            ..config("keycount")
        };
        let baseline = summary_of(RunConfig {
            script: Vec::new(),
            ..config.clone()
        });
        // A command held for but never taken would keep the run from ever ending.
        let what = format!("the {pace:?} run with its last command at its last epoch");
        let summary = common::in_time(&what, move || run(config, ControlHandle::new()))
            .unwrap()
            .unwrap();
        // One preload time: measured epoch e is time 1 + e.
        let failed: Vec<(u32, u64)> = summary.failures.iter().map(|f| (f.worker, f.time)).collect();
        assert_eq!(failed, vec![(2, 1 + last - 3)], "{pace:?}");
        assert!(
            summary.failures[0].rejoined_s.is_some(),
            "{pace:?}: the rejoin at the last epoch"
        );
        assert_eq!(summary.migrations.len(), 1, "{pace:?}");
        assert_eq!(summary.output_digest, baseline.output_digest, "{pace:?}");
    }
}

#[test]
fn parked_workers_give_the_same_outputs() {
    let config = RunConfig {
        duration: Duration::from_millis(600),
        rate: 5_000,
        // One step, issued at once: what it moves does not depend on how fast the run goes.
        migrations: vec!["all-at-once@0.2:pack:1".parse().unwrap()],
        ..config("hashcount")
    };
    let spin = summary_of(config.clone());
    let park = summary_of(RunConfig {
        idle: Idle::Park,
        ..config
    });
    assert_eq!(park.output_digest, spin.output_digest);
    assert_eq!(park.records_in, spin.records_in);
    assert_eq!(park.migrations.len(), 1);
    assert_eq!(park.migrations[0].bins_moved, spin.migrations[0].bins_moved);
}

#[test]
fn per_record_work_costs_time_not_output() {
    for workload in ["keycount", "hashcount"] {
        let config = RunConfig {
            duration: Duration::from_millis(600),
            rate: 5_000,
            ..config(workload)
        };
        let plain = summary_of(config.clone());
        let worked = summary_of(RunConfig {
            params: config.params.clone().with("work", 200),
            ..config
        });
        assert_eq!(worked.output_digest, plain.output_digest, "{workload}");
        assert_eq!(worked.outputs, plain.outputs, "{workload}");
    }
}

/// A directory of the test `name`'s own, empty.
fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("megaflux-harness-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Runs `config` writing its outputs to a file named for `tag` in `dir`; its summary and
/// the output lines (each output without its time), sorted.
fn outputs_of(config: RunConfig, dir: &std::path::Path, tag: &str) -> (Summary, Vec<String>) {
    let path = dir.join(format!("{tag}.jsonl"));
    let summary = summary_of(RunConfig {
        output: Some(path.clone().into()),
        replace_output: true,
        ..config
    });
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .expect("the output file")
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    let _ = std::fs::remove_file(&path);
    (summary, lines)
}

#[test]
fn adaptive_epochs_measure_every_record_and_keep_a_counts_outputs() {
    // 0.8 s at 20,000 records/s: 16,000 records, whose batches depend on how fast the
    // loop turns; each record is measured once, in the window its epoch closes in.
    let config = RunConfig {
        duration: Duration::from_millis(800),
        ..config("keycount")
    };
    let dir = test_dir("adaptive-epochs");
    let (fixed, fixed_lines) = outputs_of(config.clone(), &dir, "fixed");
    let (adaptive, lines) = outputs_of(
        RunConfig {
            epoch_mode: EpochMode::Adaptive,
            epoch: EpochLen::from_us(10).unwrap(),
            // One step, issued at once: what it moves does not depend on how fast the run
            // goes (a fluid plan's 128 steps may not all finish in 0.8 s of a test build).
            migrations: vec!["all-at-once@0.2:pack:1".parse().unwrap()],
            ..config.clone()
        },
        &dir,
        "adaptive",
    );
    assert_eq!(adaptive.latency_ns.count, 16_000);
    let counts: Vec<u64> = adaptive.timeline.iter().map(|w| w.latency_ns.count).collect();
    assert_eq!(counts, [5000, 5000, 5000, 1000]);
    assert_eq!(adaptive.records_in, fixed.records_in);
    assert_eq!(adaptive.outputs, adaptive.records_in);
    // A count's outputs do not depend on the times its records went in at, nor on where
    // its bins were.
    assert_eq!(lines.len(), fixed_lines.len());
    assert!(lines == fixed_lines, "adaptive epochs changed a count's outputs");
    let moves: Vec<usize> = adaptive.migrations.iter().map(|m| m.bins_moved).collect();
    assert_eq!(moves, [128]);
    // Its digest leaves out the times, which depend on how the batches fell: the same
    // without the move (a digest with times would differ between these two runs).
    let still = summary_of(RunConfig {
        epoch_mode: EpochMode::Adaptive,
        epoch: EpochLen::from_us(10).unwrap(),
        ..config
    });
    assert_eq!(still.output_digest, adaptive.output_digest);
    assert_ne!(fixed.output_digest, adaptive.output_digest);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jobs_that_read_times_are_refused_adaptive_epochs() {
    for (workload, refused) in [("q4", true), ("q7", true), ("q3", false), ("hashcount", false)] {
        let config = RunConfig {
            epoch_mode: EpochMode::Adaptive,
            duration: Duration::from_millis(100),
            ..config(workload)
        };
        let what = format!("the adaptive {workload} run");
        match common::in_time(&what, move || run(config, ControlHandle::new())) {
            Err(RunError::Config(e)) if refused => {
                assert!(e.to_string().contains("--epochs fixed"), "{workload}: {e}");
            }
            Ok(Some(_)) if !refused => {}
            other => panic!("{workload}: {:?}", other.map(|s| s.map(|s| s.output_digest))),
        }
    }
}

#[test]
fn fine_epochs_count_every_record_and_migrate_without_changing_outputs() {
    let fine = EpochLen::from_us(100).unwrap();
    for workload in ["keycount", "q4"] {
        // 8,000 epochs in 0.8 s, two records each at 20,000 records/s.
        let config = RunConfig {
            epoch: fine,
            duration: Duration::from_millis(800),
            ..config(workload)
        };
        let still = summary_of(config.clone());
        assert_eq!(still.latency_ns.count, 16_000, "{workload}");
        assert_eq!(still.duration_s, 0.8, "{workload}");
        let t_s: Vec<f64> = still.timeline.iter().map(|w| w.t_s).collect();
        assert_eq!(t_s, [0.0, 0.25, 0.5, 0.75], "{workload}");
        let counts: Vec<u64> = still.timeline.iter().map(|w| w.latency_ns.count).collect();
        assert_eq!(counts, [5000, 5000, 5000, 1000], "{workload}");
        if workload == "keycount" {
            assert_eq!(still.outputs, still.records_in, "{workload}");
        }
        // Plans at given epochs, as fast as the job goes: both run to their end in the run
        // however slow this machine (a test build) is.
        let plan = |epoch, strategy, pipelined, target| Scripted {
            epoch,
            command: Command::StartPlan {
                schedule: Schedule { strategy, pipelined },
                target,
            },
        };
        let paced = RunConfig {
            pace: Pace::Max,
            ..config
        };
        let moved = summary_of(RunConfig {
            script: vec![
                plan(2000, Strategy::AllAtOnce, false, Target::Pack(1)),
                plan(4000, Strategy::Fluid, true, Target::Uniform),
            ],
            ..paced.clone()
        });
        let unmoved = summary_of(paced);
        assert_eq!(unmoved.output_digest, still.output_digest, "{workload}");
        assert_eq!(moved.output_digest, still.output_digest, "{workload}");
        let moves: Vec<usize> = moved.migrations.iter().map(|m| m.bins_moved).collect();
        assert_eq!(moves, [128, 128], "{workload}");
    }
}

/// `n` ports of loopback free when looked at (they may be taken again before the run
/// listens on them: a run that cannot listen fails, and the test forms the cluster again).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Whether a run failed because a port it was to listen on was taken.
fn port_taken(result: &Result<Option<Summary>, RunError>) -> bool {
    matches!(result, Err(e) if e.to_string().to_lowercase().contains("in use"))
}

#[test]
fn a_stop_ends_every_process_of_a_cluster_at_the_same_epoch() {
    let dir = test_dir("stop");
    // Far longer than the test waits: only a stop that reaches process 1 ends it.
    let config = RunConfig {
        workers: 1,
        duration: Duration::from_secs(3600),
        ..config("hashcount")
    };
    let limit = deadline(common::JOB_LIMIT);
    let mut clashes = Vec::new();
    let (stopped, hosts) = loop {
        assert!(clashes.len() < 5, "the cluster could not listen: {clashes:?}");
        // Timely's two ports and process 0's membership coordinator's: all picked free (the
        // coordinator's is not left at timely's plus 1000, which may be anyone's).
        let ports = free_ports(3);
        let hosts = dir.join(format!("hosts-{}.txt", clashes.len()));
        std::fs::write(
            &hosts,
            format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
        )
        .unwrap();
        let in_cluster = |process: &str| RunConfig {
            timely_args: ["-n", "2", "-p", process, "-h"]
                .into_iter()
                .map(String::from)
                .chain([hosts.display().to_string()])
                .collect(),
            coordinator_port: Some(ports[2]),
            ..config.clone()
        };
        let (done, finished) = channel();
        let mut handles = Vec::new();
        for process in ["0", "1"] {
            let (config, done, handle) = (in_cluster(process), done.clone(), ControlHandle::new());
            handles.push(handle.clone());
            thread::spawn(move || {
                let _ = done.send((process, run(config, handle)));
            });
        }
        // Once process 0's run is under way (it has measured some epochs), stop it alone;
        // a process that failed first is looked at below.
        let mut early = Vec::new();
        wait_until("process 0's run under way, or a process ended", limit, || {
            early.extend(finished.try_iter());
            !early.is_empty() || handles[0].progress() >= Duration::from_millis(300)
        });
        handles[0].stop();
        let mut results = early;
        while results.len() < 2 {
            let next = finished.recv_timeout(limit).unwrap_or_else(|_| {
                panic!("a process of the cluster did not end within {limit:?} of the stop: {results:?}")
            });
            results.push(next);
        }
        if results.iter().any(|(_, r)| port_taken(r)) {
            clashes.push(format!("{results:?}"));
            continue;
        }
        let mut summary = None;
        for (process, result) in results {
            let result = result.unwrap_or_else(|e| panic!("process {process} failed: {e}"));
            if let Some(s) = result {
                assert_eq!(process, "0");
                summary = Some(s);
            }
        }
        break (summary.expect("process 0 summarizes"), hosts);
    };
    let _ = std::fs::remove_file(&hosts);
    // The stop ended the run, long before its configured length.
    assert!(stopped.duration_s < 3600.0, "{}", stopped.duration_s);
    // Every worker counted the outputs up to the same last epoch: one process running
    // exactly that long gives the same outputs.
    let same_length = summary_of(RunConfig {
        workers: 2,
        duration: length_of(&stopped),
        ..config
    });
    assert_eq!(stopped.duration_s, same_length.duration_s);
    assert_eq!(
        (&stopped.output_digest, stopped.outputs),
        (&same_length.output_digest, same_length.outputs),
        "records in: {} stopped, {} in the run as long",
        stopped.records_in,
        same_length.records_in
    );
    // Every record of those epochs went in, and no other: process 1 may have sent some of
    // later epochs, due on its clock before the stop reached it through a busy dataflow,
    // which are not the run's (no output of theirs is).
    assert_eq!(
        stopped.records_in, same_length.records_in,
        "records in: stopped, and in the run as long"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
