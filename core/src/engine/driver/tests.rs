use super::*;
use crate::config::{replicated, uniform};

fn schedule(strategy: Strategy, pipelined: bool) -> Schedule {
    Schedule { strategy, pipelined }
}

fn primaries(d: &PlanDriver) -> Vec<u32> {
    d.placement().iter().map(|r| r.primary).collect()
}

#[test]
fn waits_for_completion_unless_pipelined() {
    let mut d = PlanDriver::single(&uniform(16, 2), 2);
    d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
        .unwrap();
    assert_eq!(d.poll(5, 0, 0.1).0.len(), 1);
    assert!(d.poll(6, 0, 0.1).0.is_empty());
    assert_eq!(d.poll(7, 6, 0.2).0.len(), 1);
    let mut p = PlanDriver::single(&uniform(16, 2), 2);
    p.start(schedule(Strategy::Fluid, true), &Target::Pack(1), 0.0)
        .unwrap();
    let issued: usize = (1..=8).map(|t| p.poll(t, 0, 0.0).0.len()).sum();
    assert_eq!(issued, 8);
    assert!(p.busy());
    assert!(p.poll(9, 0, 0.0).0.is_empty());
    assert!(p.poll(10, 9, 0.5).0.is_empty());
    assert!(!p.busy());
    let r = &p.records()[0];
    assert_eq!((r.steps, r.bins_moved, r.completed_s), (8, 8, Some(0.5)));
    assert_eq!(primaries(&p), vec![0; 16]);
}

#[test]
fn pipelined_steps_keep_their_gap_whatever_the_output_does() {
    let mut p = PlanDriver::single(&uniform(16, 2), 2).with_step_gap(10);
    p.start(schedule(Strategy::Fluid, true), &Target::Pack(1), 0.0)
        .unwrap();
    assert_eq!(p.poll(3, 0, 0.0).0.len(), 1);
    // Not before ten times later, even with the first step complete.
    assert!((4..13).all(|t| p.poll(t, t, 0.0).0.is_empty()));
    assert_eq!(p.poll(13, 13, 0.0).0.len(), 1);
    assert_eq!(p.records()[0].step_times, vec![3, 13]);
}

#[test]
fn an_unfinished_plan_reports_only_what_was_issued() {
    let mut d = PlanDriver::single(&uniform(16, 2), 2);
    d.start(schedule(Strategy::Fluid, false), &Target::Pack(1), 0.0)
        .unwrap();
    assert_eq!(d.poll(1, 0, 0.0).0.len(), 1);
    assert_eq!(d.poll(2, 2, 0.0).0.len(), 1);
    // The run ends: the issued steps complete, nothing new is issued.
    d.retire(u64::MAX, 1.0);
    let r = &d.records()[0];
    assert_eq!((r.step_times.len(), r.bins_moved, r.bins_planned), (2, 2, 8));
    assert_eq!(r.completed_s, None);
    assert_eq!(primaries(&d).iter().filter(|w| **w == 0).count(), 10);
}

#[test]
fn rejects_bad_commands_and_keeps_the_placement() {
    let mut d = PlanDriver::single(&uniform(16, 2), 2);
    let before = d.placement().clone();
    let mv = |bins: Vec<usize>, worker| Command::MoveBins {
        bins,
        worker,
        standby: false,
    };
    assert_eq!(
        d.command(mv(vec![16], 0), 0.0),
        Err(CommandError::UnknownBin { bin: 16, bins: 16 })
    );
    assert_eq!(
        d.command(mv(vec![0], 2), 0.0),
        Err(CommandError::UnknownWorker {
            worker: 2,
            workers: 2
        })
    );
    let drain5 = Command::StartPlan {
        schedule: schedule(Strategy::Fluid, false),
        target: Target::Drain(5),
    };
    assert!(d.command(drain5, 0.0).is_err());
    assert_eq!(d.command(Command::CancelPlan, 0.0), Err(CommandError::NoPlan));
    assert_eq!(
        d.command(Command::Rejoin { worker: 1 }, 0.0),
        Err(CommandError::NotFailed(1))
    );
    let standby = Command::MoveBins {
        bins: vec![1],
        worker: 0,
        standby: true,
    };
    assert!(matches!(
        d.command(standby, 0.0),
        Err(CommandError::BadStandby { .. })
    ));
    assert_eq!(d.placement(), &before);
    d.command(mv(vec![1], 0), 0.0).unwrap();
    assert_eq!(d.command(mv(vec![3], 0), 0.0), Err(CommandError::PlanRunning));
    assert_eq!(
        d.poll(3, 0, 0.0).0,
        vec![ControlInst::Place {
            bin: 1,
            replicas: Replicas::single(0)
        }]
    );
}

#[test]
fn a_failure_goes_out_alone_then_recovery_copies_the_degraded_bins() {
    let matched = schedule(Strategy::Matched, false);
    let mut d = PlanDriver::new(replicated(&uniform(6, 3), 3, 3), 3, 3, 2, matched);
    d.start(schedule(Strategy::Fluid, false), &Target::Pack(2), 0.0)
        .unwrap();
    assert_eq!(d.poll(1, 0, 0.0).0.len(), 1);
    d.command(Command::Fail { worker: 1 }, 0.5).unwrap();
    assert_eq!(
        d.command(Command::Fail { worker: 1 }, 0.5),
        Err(CommandError::WorkerFailed(1))
    );
    // The failure's instructions, alone and sealed.
    let (insts, seal) = d.poll(2, 1, 0.5);
    assert!(seal && insts[0] == ControlInst::Fail { worker: 1 });
    // The migration was cancelled; recovery copies one bin per worker pair per step.
    assert!(d.records()[0].cancelled);
    let mut copied = 0;
    for t in 3..40 {
        copied += d.poll(t, t, 1.0).0.len();
    }
    assert!(!d.busy());
    let f = &d.failures()[0];
    let recovery = f.recovery.as_ref().unwrap();
    assert_eq!(recovery.bins_moved, copied);
    assert_eq!(copied, f.degraded);
    assert!(d.placement().iter().all(|r| !r.is_degraded() && !r.holds(1)));
    // Worker 1 comes back: the bins rebalance over the workers the user's `pack:2` left
    // serving (worker 2 stays excluded: the operator's word), standbys chained.
    d.command(Command::Rejoin { worker: 1 }, 2.0).unwrap();
    assert_eq!(d.poll(50, 50, 2.0).0, vec![ControlInst::Rejoin { worker: 1 }]);
    for t in 51..200 {
        d.poll(t, t, 3.0);
    }
    assert_eq!(d.placement(), &replicated(&uniform(6, 2), 3, 3));
    assert_eq!(d.failures()[0].rejoined_s, Some(2.0));
}

#[test]
fn without_a_spare_the_rejoin_is_the_recovery() {
    let mut d = PlanDriver::new(
        replicated(&uniform(4, 2), 2, 2),
        2,
        2,
        2,
        schedule(Strategy::AllAtOnce, false),
    );
    d.command(Command::Fail { worker: 0 }, 1.0).unwrap();
    d.poll(10, 10, 1.0);
    assert!(!d.busy());
    assert!(d.placement().iter().all(|r| *r == Replicas::single(1)));
    d.command(Command::Rejoin { worker: 0 }, 2.0).unwrap();
    for t in 20..30 {
        d.poll(t, t, 2.5);
    }
    let f = &d.failures()[0];
    assert_eq!(f.recovery.as_ref().map(|r| r.bins_moved), Some(4));
    assert!(d.records().is_empty());
}

#[test]
fn losing_the_last_replica_is_recorded() {
    let mut d = PlanDriver::single(&uniform(4, 2), 2);
    d.command(Command::Fail { worker: 1 }, 1.0).unwrap();
    d.poll(5, 5, 1.0);
    assert_eq!(d.lost(), vec![1, 3]);
}

#[test]
fn failures_and_rejoins_each_go_out_alone_at_a_time_of_their_own() {
    let pipelined = schedule(Strategy::Fluid, true);
    let mut d = PlanDriver::new(replicated(&uniform(8, 3), 3, 3), 3, 3, 2, pipelined);
    d.start(pipelined, &Target::Pack(2), 0.0).unwrap();
    // A pipelined step goes out at 4 without sealing it...
    let (step, seal) = d.poll(4, 0, 0.1);
    assert!(!step.is_empty() && !seal);
    // ...then a failure and a rejoin of the same worker come in at the same time.
    d.command(Command::Fail { worker: 2 }, 0.2).unwrap();
    d.command(Command::Rejoin { worker: 2 }, 0.2).unwrap();
    assert_eq!(
        d.command(Command::Rejoin { worker: 2 }, 0.2),
        Err(CommandError::NotFailed(2))
    );
    // Time 4 is taken: the failure waits for 5, the rejoin for 6.
    assert_eq!(d.poll(4, 0, 0.2), (Vec::new(), true));
    let (fail, seal) = d.poll(5, 0, 0.2);
    assert!(seal && fail.first() == Some(&ControlInst::Fail { worker: 2 }));
    assert!(
        fail.iter()
            .all(|i| matches!(i, ControlInst::Fail { .. } | ControlInst::Drop { .. }))
    );
    assert_eq!(d.poll(5, 0, 0.2), (Vec::new(), true));
    assert_eq!(d.poll(6, 0, 0.3).0, vec![ControlInst::Rejoin { worker: 2 }]);
}

/// Polls at times from `*t` on, the output frontier right behind them, until nothing runs
/// or waits to be issued: the bin changes that went out, and the steps they went out in.
fn settle(d: &mut PlanDriver, t: &mut Time) -> (usize, usize) {
    let (mut changes, mut steps) = (0, 0);
    for _ in 0..1000 {
        let (insts, _) = d.poll(*t, *t, *t as f64 / 1000.0);
        let placed = insts
            .iter()
            .filter(|i| matches!(i, ControlInst::Place { .. }))
            .count();
        changes += placed;
        steps += usize::from(placed > 0);
        *t += 1;
        if !d.busy() && !d.urgent() {
            return (changes, steps);
        }
    }
    panic!("the driver never settled");
}

#[test]
fn thousands_of_plans_keep_a_bounded_history_with_exact_totals() {
    const BINS: usize = 1024;
    let plans = 3 * KEPT_PLANS + 17;
    let mut d = PlanDriver::single(&uniform(BINS, 2), 2);
    let (mut t, mut changes, mut steps) = (1, 0, 0);
    for i in 0..plans {
        let to = (i % 2) as u32;
        let command = if i % 4 < 2 {
            // A map names every bin's worker: far more than a record keeps.
            Command::StartPlan {
                schedule: schedule(Strategy::AllAtOnce, false),
                target: Target::Map(vec![to; BINS]),
            }
        } else {
            Command::MoveBins {
                bins: (0..BINS).step_by(2).collect(),
                worker: to as usize,
                standby: false,
            }
        };
        d.command(command, t as f64 / 1000.0).unwrap();
        let (c, s) = settle(&mut d, &mut t);
        changes += c;
        steps += s;
    }
    let records = d.records();
    assert_eq!(records.len(), KEPT_PLANS);
    assert_eq!(d.migrations.len(), KEPT_PLANS);
    assert_eq!(records.len() as u64 + records.unlisted.plans, plans as u64);
    assert_eq!(d.plans, plans as u64);
    let moved: usize = records.iter().map(|r| r.bins_moved).sum();
    assert_eq!(moved as u64 + records.unlisted.bins_moved, changes as u64);
    let stepped: usize = records.iter().map(|r| r.step_times.len()).sum();
    assert_eq!(stepped as u64 + records.unlisted.steps, steps as u64);
    assert_eq!(records.unlisted.completed, records.unlisted.plans);
    assert_eq!((records.unlisted.cancelled, records.unlisted.recoveries), (0, 0));
    // The first plans are the listed ones, in order.
    assert!(records.iter().enumerate().all(|(i, r)| r.id == i as u64));
    // What worker 0 walks each turn is the last few plans, whatever the run's length.
    let recent: Vec<u64> = d.finished().map(|r| r.id).collect();
    assert_eq!(recent.len(), RECENT_PLANS);
    assert_eq!(recent.last().copied(), Some(plans as u64 - 1));
    assert!(d.finished().all(|r| r.step_times.is_empty()));
    // No record keeps a target longer than a short description.
    let long = |r: &MigrationRecord| r.target.chars().count() > TARGET_CHARS + 1;
    assert!(!records.iter().chain(d.finished()).any(long));
    assert!(records[0].target.starts_with("map:0,0,"), "{}", records[0].target);
    let even = "512 bins (0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46,48,50,52,54,56,\
                58,60,62,64,66…) on worker 0";
    assert_eq!(records[2].target, even);
}

#[test]
fn thousands_of_failures_keep_a_bounded_history_with_exact_totals() {
    let cycles = 2 * KEPT_FAILURES + 5;
    let matched = schedule(Strategy::Matched, false);
    let layout = replicated(&uniform(6, 3), 3, 3);
    let mut d = PlanDriver::new(layout.clone(), 3, 3, 2, matched);
    let (mut t, mut failed_at) = (1, Vec::new());
    for i in 0..cycles {
        let worker = i % 3;
        failed_at.push(t as f64 / 1000.0);
        d.command(Command::Fail { worker }, t as f64 / 1000.0).unwrap();
        settle(&mut d, &mut t);
        assert!(
            d.placement().iter().all(|r| !r.is_degraded()),
            "cycle {i}: recovered"
        );
        d.command(Command::Rejoin { worker }, t as f64 / 1000.0).unwrap();
        settle(&mut d, &mut t);
        assert_eq!(d.placement(), &layout, "cycle {i}: rebalanced");
    }
    let (records, failures) = (d.records(), d.failures());
    assert_eq!(failures.len(), KEPT_FAILURES);
    assert_eq!(failures.len() as u64 + failures.unlisted.failures, cycles as u64);
    let rejoined = failures.iter().filter(|f| f.rejoined_s.is_some()).count();
    assert_eq!(rejoined as u64 + failures.unlisted.rejoined, cycles as u64);
    let degraded: usize = failures.iter().map(|f| f.degraded).sum();
    assert_eq!(
        degraded as u64 + failures.unlisted.bins_degraded,
        4 * cycles as u64
    );
    assert!(
        failures
            .iter()
            .all(|f| f.recovery.as_ref().is_some_and(|r| !r.cancelled))
    );
    assert_eq!(failures.unlisted.first_at_s, Some(failed_at[KEPT_FAILURES]));
    // Every plan made counts once: a listed migration, a listed failure's recovery, or in
    // the totals (a recovery and a rebalance per cycle).
    let recoveries = failures.iter().filter(|f| f.recovery.is_some()).count();
    assert_eq!(d.plans, 2 * cycles as u64);
    assert_eq!(
        (records.len() + recoveries) as u64 + records.unlisted.plans,
        d.plans
    );
    assert_eq!(records.len(), KEPT_PLANS);
    assert_eq!(records.unlisted.recoveries, (cycles - KEPT_FAILURES) as u64);
    assert!(d.lost().is_empty() && d.down.is_empty() && d.unrecovered.is_none());
    assert!(d.recent.len() <= RECENT_PLANS);
}

#[test]
fn a_standby_is_not_put_in_its_primary_process_while_another_has_room() {
    // Two processes of two workers (0 and 1, 2 and 3).
    let initial = replicated(&uniform(8, 4), 4, 2);
    let mut d = PlanDriver::new(initial, 4, 2, 2, schedule(Strategy::Matched, false));
    let beside = Command::MoveBins {
        bins: vec![0],
        worker: 1,
        standby: true,
    };
    match d.command(beside, 0.0) {
        Err(CommandError::BadStandby { reason, .. }) => assert!(reason.contains("process"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Rebalances after a failure keep them apart too.
    d.command(Command::Fail { worker: 2 }, 0.0).unwrap();
    let mut t = 1;
    while d.urgent() || d.busy() {
        d.poll(t, t, 0.0);
        t += 1;
    }
    assert_eq!(
        crate::config::colocated(d.placement(), 4, 2),
        0,
        "{:?}",
        d.placement()
    );
}

fn loads(bins: Vec<f64>) -> Loads {
    let n = bins.len();
    Loads {
        bins,
        bytes: vec![8; n],
        workers: Vec::new(),
        standbys: Vec::new(),
        busy: false,
        applied: Vec::new(),
        operators: Vec::new(),
        offered: 0.0,
        true_rates: Vec::new(),
        at_s: 0.0,
    }
}

#[test]
fn a_standing_proposal_is_what_balance_starts_and_stays_if_refused() {
    let mut d = PlanDriver::single(&uniform(4, 2), 2);
    let fluid = schedule(Strategy::Fluid, false);
    // A proposal that names a worker the job does not have cannot start: it stands.
    let proposal = |map: Vec<u32>| Balanced {
        map,
        moved: vec![1],
        bytes: 8,
        before: 2.0,
        after: 1.0,
        workers: None,
        placement: None,
    };
    let bad = proposal(vec![0, 5, 0, 1]);
    d.propose(Some(bad.clone()));
    assert!(d.start(fluid, &Target::Balance, 0.0).is_err());
    assert_eq!(d.proposal, Some(bad));
    // A good one starts, goes, and is logged as the map it moved to.
    d.propose(Some(proposal(vec![0, 0, 0, 1])));
    d.start(fluid, &Target::Balance, 0.0).unwrap();
    assert_eq!(d.proposal, None);
    assert_eq!(d.take_balanced(), Some((fluid, Target::Map(vec![0, 0, 0, 1]))));
    assert_eq!(d.take_balanced(), None);
}

#[test]
fn an_elastic_runs_balance_keeps_to_the_workers_serving() {
    // Bins on workers 0 and 1 of three; worker 0 carries most of the load.
    let mut d = PlanDriver::single(&[0, 0, 1, 1], 3);
    d.set_loads(Some(loads(vec![4.0, 4.0, 1.0, 0.0])));
    let spread = d.by_load().unwrap();
    assert!(spread.map.contains(&2), "{spread:?}");
    d.set_elastic(true);
    let kept = d.by_load().unwrap();
    assert!(!kept.map.contains(&2), "{kept:?}");
    assert_eq!(kept.map.iter().filter(|w| **w == 1).count(), 3, "{kept:?}");
}

/// Fails worker 2 of three (two replicas, 12 bins, bin 0 six times as busy as each other
/// one), lets the recovery run, rejoins it and runs the rebalance: the placement after.
fn rejoined(balancing: bool, load: &[f64]) -> Placement {
    let mut d = PlanDriver::new(
        replicated(&uniform(12, 3), 3, 3),
        3,
        3,
        2,
        schedule(Strategy::AllAtOnce, false),
    );
    d.set_balancing(balancing);
    d.set_loads(Some(loads(load.to_vec())));
    // A plan ran since: the loads the balancer gives the driver are gone, the known ones stay.
    d.set_loads(None);
    d.command(Command::Fail { worker: 2 }, 1.0).unwrap();
    for t in 1..20 {
        d.poll(t, t, 1.0);
    }
    assert!(!d.busy(), "the recovery ran");
    d.command(Command::Rejoin { worker: 2 }, 2.0).unwrap();
    for t in 20..60 {
        d.poll(t, t, 2.0);
    }
    assert!(!d.busy(), "the rebalance ran");
    let why = d.records().last().expect("the rebalance's record").target.clone();
    assert_eq!(why.contains("by load"), balancing, "{why}");
    d.placement().clone()
}

#[test]
fn a_rejoin_under_the_balancer_rebalances_by_load_and_without_it_uniformly() {
    let mut load = vec![10.0; 12];
    load[0] = 60.0;
    let uniform = rejoined(false, &load);
    assert_eq!(uniform, replicated(&crate::config::uniform(12, 3), 3, 3));
    let by_load = rejoined(true, &load);
    let work = crate::balance::replicas::work;
    let (spread, even) = (work(&uniform, &load, 3), work(&by_load, &load, 3));
    let imbalance = crate::balance::imbalance;
    assert!(
        imbalance(&even) < imbalance(&spread),
        "by load {even:?} ({:.2}x) is no better than uniform {spread:?} ({:.2}x)",
        imbalance(&even),
        imbalance(&spread)
    );
    assert!(
        by_load
            .iter()
            .all(|r| r.primary != r.standby && r.standby != NONE)
    );
    assert!(
        by_load.iter().any(|r| r.holds(2)),
        "the rejoined worker holds bins"
    );
}

/// Fails worker 3 of four (two replicas, eight bins, bin 0 eight times as busy as each
/// other one) and runs the recovery: each worker's work after it.
fn recovered(balancing: bool) -> Vec<f64> {
    let mut load = vec![10.0; 8];
    load[0] = 80.0;
    let mut d = PlanDriver::new(
        replicated(&uniform(8, 4), 4, 4),
        4,
        4,
        2,
        schedule(Strategy::AllAtOnce, false),
    );
    d.set_balancing(balancing);
    d.set_loads(Some(loads(load.clone())));
    d.command(Command::Fail { worker: 3 }, 1.0).unwrap();
    for t in 1..30 {
        d.poll(t, t, 1.0);
    }
    assert!(!d.busy(), "the recovery ran");
    assert!(d.placement().iter().all(|r| !r.is_degraded() && !r.holds(3)));
    assert!(d.placement().iter().all(|r| r.primary != r.standby));
    crate::balance::replicas::work(d.placement(), &load, 4)
}

#[test]
fn a_recovery_under_the_balancer_gives_the_new_standbys_to_the_least_worked_workers() {
    // Chained, the new standbys of worker 3's bins go to workers 0 and 1, already the
    // busiest (110 each, worker 2 40): 130 / 130 / 40. By load they go where the work is
    // least: 120 / 120 / 60.
    let chained = recovered(false);
    assert_eq!(chained, [130.0, 130.0, 40.0, 0.0]);
    let by_load = recovered(true);
    assert_eq!(by_load, [120.0, 120.0, 60.0, 0.0]);
}
