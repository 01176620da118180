//! A trace as Chrome trace-event JSON (the "JSON object format"), which the Perfetto UI and
//! `chrome://tracing` open.
//!
//! The mapping:
//! * a *process* per timely process, a *thread* per worker (`tid` is the worker's index in
//!   the job), named from the hellos;
//! * an *async slice* per bin move, from `issued` to `completed` (category `move`), and per
//!   plan, from `plan_started` to `plan_completed` (category `plan`); a move or plan still
//!   open when the trace ends is closed there, with `incomplete: true`;
//! * *instants* for the phases in between (`extracted`, `received`, `installed`, on the
//!   worker's thread), takeovers, commands, failures, rejoins, recoveries, lost bins and
//!   recording gaps;
//! * *counters* for each worker's keys and state bytes per operator, its records and busy
//!   share per sampling interval, the job's latency (p50, p99, max in ms) and events dropped.
//!
//! Timestamps are microseconds on one axis: each process's `at_s` plus its clock's
//! wall-clock anchor (version 2 hellos), less the first anchor seen. Version 1 traces have
//! no anchors and use `at_s` as it is.
//!
//! The export streams: it holds one event and the open slices, never the trace.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};

use megaflux_probe::event::{BalancePhase, Event, Phase, Stamped};
use megaflux_probe::model::MAX_PEERS;
use megaflux_probe::record::TraceReader;
use serde_json::{Value, json};

use crate::error::ReplayError;

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    /// Trace events in the output (metadata included).
    pub events: u64,
    /// Async slices of bin moves (one per `issued` migration event).
    pub moves: u64,
    /// Async slices of plans.
    pub plans: u64,
    /// Moves or plans the trace ended before completing.
    pub incomplete: u64,
}

/// An async slice waiting for its end.
struct Open {
    id: u64,
    pid: u32,
    name: String,
}

/// The state of one export.
struct Exporter<W> {
    out: W,
    what: String,
    first: bool,
    stats: Exported,
    /// Workers per process (from the header; hellos confirm it).
    workers: u32,
    /// The first anchor seen, and each process's offset from it in seconds.
    base_anchor: Option<f64>,
    offsets: HashMap<u32, f64>,
    /// The latest timestamp written (µs), where open slices are closed at the end.
    last_ts: f64,
    next_id: u64,
    moves: HashMap<(u32, u64), Open>,
    /// Open plans by id (plans of version 1 traces have none: key `u64::MAX`, FIFO).
    plans: BTreeMap<u64, Vec<Open>>,
    named: Vec<u32>,
}

/// Writes the trace read by `reader` to `out` as Chrome trace-event JSON; `what` names the
/// output in errors.
pub fn export<R: BufRead, W: Write>(
    reader: &mut TraceReader<R>,
    out: W,
    what: &str,
) -> Result<Exported, ReplayError> {
    let header = reader.header();
    let mut exporter = Exporter {
        out,
        what: what.to_string(),
        first: true,
        stats: Exported::default(),
        workers: header.workers.max(1),
        base_anchor: None,
        offsets: HashMap::new(),
        last_ts: 0.0,
        next_id: 1,
        moves: HashMap::new(),
        plans: BTreeMap::new(),
        named: Vec::new(),
    };
    exporter.raw(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    while let Some(event) = reader.next_event()? {
        exporter.event(&event)?;
    }
    exporter.finish()
}

impl<W: Write> Exporter<W> {
    fn raw(&mut self, bytes: &[u8]) -> Result<(), ReplayError> {
        self.out
            .write_all(bytes)
            .map_err(|e| ReplayError::write(&self.what, e))
    }

    fn emit(&mut self, value: Value) -> Result<(), ReplayError> {
        if !self.first {
            self.raw(b",\n")?;
        }
        self.first = false;
        let line = serde_json::to_vec(&value).map_err(|e| ReplayError::write(&self.what, e.into()))?;
        self.raw(&line)?;
        self.stats.events += 1;
        Ok(())
    }

    fn process_of(&self, worker: u32) -> u32 {
        worker / self.workers
    }

    /// The event's timestamp in µs on the common axis.
    fn ts(&mut self, e: &Stamped) -> f64 {
        let offset = self.offsets.get(&e.process).copied().unwrap_or(0.0);
        let ts = ((offset + e.at_s) * 1e6).max(0.0);
        self.last_ts = self.last_ts.max(ts);
        ts
    }

    /// Names `process` and its `workers` threads, once. A trace's hellos may say any number
    /// of processes and workers: at most [`MAX_PEERS`] of each are named.
    fn name_process(&mut self, process: u32, workers: u32) -> Result<(), ReplayError> {
        if self.named.contains(&process) || self.named.len() >= MAX_PEERS as usize {
            return Ok(());
        }
        self.named.push(process);
        self.emit(json!({"ph": "M", "name": "process_name", "pid": process,
            "args": {"name": format!("process {process}")}}))?;
        self.emit(json!({"ph": "M", "name": "process_sort_index", "pid": process,
            "args": {"sort_index": process}}))?;
        let first = process.saturating_mul(workers);
        for w in first..first.saturating_add(workers.min(MAX_PEERS)) {
            self.emit(json!({"ph": "M", "name": "thread_name", "pid": process, "tid": w,
                "args": {"name": format!("worker {w}")}}))?;
        }
        Ok(())
    }

    fn instant(
        &mut self,
        ts: f64,
        pid: u32,
        tid: Option<u32>,
        name: String,
        args: Value,
    ) -> Result<(), ReplayError> {
        let mut e = json!({"ph": "i", "ts": ts, "pid": pid, "name": name, "args": args});
        match tid {
            Some(tid) => {
                e["tid"] = json!(tid);
                e["s"] = json!("t");
            }
            None => e["s"] = json!("g"),
        }
        self.emit(e)
    }

    fn counter(&mut self, ts: f64, pid: u32, name: String, args: Value) -> Result<(), ReplayError> {
        self.emit(json!({"ph": "C", "ts": ts, "pid": pid, "name": name, "args": args}))
    }

    fn begin(
        &mut self,
        ts: f64,
        cat: &str,
        pid: u32,
        name: String,
        args: Value,
    ) -> Result<Open, ReplayError> {
        let id = self.next_id;
        self.next_id += 1;
        self.emit(
            json!({"ph": "b", "cat": cat, "id": id, "ts": ts, "pid": pid, "name": name, "args": args}),
        )?;
        Ok(Open { id, pid, name })
    }

    fn end(&mut self, ts: f64, cat: &str, open: Open, args: Value) -> Result<(), ReplayError> {
        self.emit(
            json!({"ph": "e", "cat": cat, "id": open.id, "ts": ts, "pid": open.pid,
            "name": open.name, "args": args}),
        )
    }

    fn event(&mut self, e: &Stamped) -> Result<(), ReplayError> {
        if let Event::Hello {
            workers,
            anchor_unix_s,
            ..
        } = &e.event
        {
            if let Some(anchor) = anchor_unix_s {
                let base = *self.base_anchor.get_or_insert(*anchor);
                self.offsets.insert(e.process, anchor - base);
            }
            self.workers = (*workers).max(1);
            return self.name_process(e.process, self.workers);
        }
        let ts = self.ts(e);
        let pid = e.process;
        match &e.event {
            Event::Migration {
                phase: Phase::Issued,
                bin,
                time,
                from,
                to,
                step,
                primary,
                standby,
                copy,
                ..
            } => {
                let holder = to.or(*primary).unwrap_or(0);
                let args = json!({"bin": bin, "time": time, "from": from, "to": to, "step": step,
                    "primary": primary, "standby": standby, "copy": copy});
                let open = self.begin(ts, "move", self.process_of(holder), format!("bin {bin}"), args)?;
                self.stats.moves += 1;
                // A bin moved again at the same time replaces its slice: close the old one.
                if let Some(old) = self.moves.insert((*bin, *time), open) {
                    self.end(ts, "move", old, json!({"superseded": true}))?;
                }
            }
            Event::Migration {
                phase: Phase::Completed,
                bin,
                time,
                ..
            } => {
                if let Some(open) = self.moves.remove(&(*bin, *time)) {
                    self.end(ts, "move", open, json!({}))?;
                }
            }
            Event::Migration {
                phase,
                bin,
                time,
                worker,
                bytes,
                ..
            } => {
                let w = worker.unwrap_or(0);
                let name = format!("{} bin {bin}", phase.name());
                self.instant(
                    ts,
                    self.process_of(w),
                    Some(w),
                    name,
                    json!({"time": time, "bytes": bytes}),
                )?;
            }
            Event::PlanStarted { id, .. } => {
                let name = plan_name(&e.event);
                let args = serde_json::to_value(&e.event).unwrap_or(Value::Null);
                let open = self.begin(ts, "plan", 0, name, args)?;
                self.stats.plans += 1;
                self.plans.entry(id.unwrap_or(u64::MAX)).or_default().push(open);
            }
            Event::PlanCompleted {
                id,
                cancelled,
                seconds,
                ..
            } => {
                let key = id.unwrap_or(u64::MAX);
                if let Some(list) = self.plans.get_mut(&key)
                    && !list.is_empty()
                {
                    let open = list.remove(0);
                    self.end(
                        ts,
                        "plan",
                        open,
                        json!({"cancelled": cancelled, "seconds": seconds}),
                    )?;
                }
            }
            Event::Sampled {
                worker,
                operator,
                keys,
                bytes,
                ..
            } => {
                let name = format!("worker {worker} {operator}");
                self.counter(
                    ts,
                    self.process_of(*worker),
                    name,
                    json!({"keys": keys, "bytes": bytes}),
                )?;
            }
            Event::WorkerStats {
                worker,
                records,
                busy_ns,
                interval_ns,
                ..
            } => {
                let busy = *busy_ns as f64 / (*interval_ns).max(1) as f64;
                let name = format!("worker {worker} load");
                self.counter(
                    ts,
                    self.process_of(*worker),
                    name,
                    json!({"records": records, "busy": busy}),
                )?;
            }
            Event::Latency { p50, p99, max, .. } => {
                let ms = |ns: &u64| *ns as f64 / 1e6;
                let args = json!({"p50": ms(p50), "p99": ms(p99), "max": ms(max)});
                self.counter(ts, 0, "latency (ms)".to_string(), args)?;
            }
            Event::Dropped { place, count } => {
                self.counter(ts, pid, format!("dropped ({place})"), json!({"events": count}))?;
            }
            Event::Balance {
                phase: BalancePhase::Measured,
                imbalance: Some(imbalance),
                ..
            } => {
                let name = "imbalance (busiest ÷ mean)".to_string();
                self.counter(ts, 0, name, json!({"imbalance": imbalance}))?;
            }
            Event::Balance { phase, reason, .. } if *phase != BalancePhase::Measured => {
                let name = match reason {
                    Some(r) => format!("balancer {}: {r}", phase.name()),
                    None => format!("balancer {}", phase.name()),
                };
                let args = serde_json::to_value(&e.event).unwrap_or(Value::Null);
                self.instant(ts, pid, None, name, args)?;
            }
            Event::Takeover {
                operator,
                worker,
                bin,
                time,
            } => {
                let name = format!("takeover bin {bin}");
                let args = json!({"operator": operator, "time": time});
                self.instant(ts, self.process_of(*worker), Some(*worker), name, args)?;
            }
            Event::Command { outcome, command, .. } => {
                let name = format!("command {}: {command}", outcome.name());
                let args = serde_json::to_value(&e.event).unwrap_or(Value::Null);
                self.instant(ts, pid, None, name, args)?;
            }
            Event::Failure { worker, .. } => {
                let args = serde_json::to_value(&e.event).unwrap_or(Value::Null);
                self.instant(
                    ts,
                    self.process_of(*worker),
                    None,
                    format!("worker {worker} failed"),
                    args,
                )?;
            }
            Event::Rejoin { worker, time } => {
                let name = format!("worker {worker} rejoined");
                self.instant(ts, self.process_of(*worker), None, name, json!({"time": time}))?;
            }
            Event::Recovery { worker, bins } => {
                let name = format!("recovered from worker {worker}");
                self.instant(ts, pid, None, name, json!({"bins": bins.len()}))?;
            }
            Event::Restart {
                generation,
                from,
                lost,
                survivors,
                joined,
            } => {
                let name = crate::seek::restart_name(lost, joined, *generation);
                let args = json!({"from": from, "survivors": survivors, "lost": lost, "joined": joined});
                self.instant(ts, pid, None, name, args)?;
            }
            Event::Lost { time, bins } => {
                self.instant(ts, pid, None, format!("bins lost: {bins}"), json!({"time": time}))?;
            }
            Event::Recording { on, .. } => {
                let name = if *on {
                    "recording resumed"
                } else {
                    "recording paused"
                };
                self.instant(ts, pid, None, name.to_string(), json!({}))?;
            }
            // Per-bin sizes, frontiers, placements, keyframes and the summary are the
            // dashboard's; the counters above carry their totals.
            _ => {}
        }
        Ok(())
    }

    /// Closes what the trace left open and ends the JSON.
    fn finish(mut self) -> Result<Exported, ReplayError> {
        let ts = self.last_ts;
        let mut open: Vec<(&str, Open)> = self.moves.drain().map(|(_, o)| ("move", o)).collect();
        open.extend(
            std::mem::take(&mut self.plans)
                .into_values()
                .flatten()
                .map(|o| ("plan", o)),
        );
        open.sort_by_key(|(_, o)| o.id);
        for (cat, o) in open {
            self.stats.incomplete += 1;
            self.end(ts, cat, o, json!({"incomplete": true}))?;
        }
        self.raw(b"\n]}\n")?;
        self.out.flush().map_err(|e| ReplayError::write(&self.what, e))?;
        Ok(self.stats)
    }
}

fn plan_name(event: &Event) -> String {
    match event {
        Event::PlanStarted {
            strategy,
            target,
            purpose,
            ..
        } => format!(
            "{} {strategy} → {target}",
            purpose.as_deref().unwrap_or("migration")
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> String {
        let header = r#"{"format":"megaflux-trace","version":2,"megaflux":"0.1.0","config":{},"processes":1,"workers":2,"peers":2,"bins":4,"initial_map":[0,1,0,1]}"#;
        let mut s = format!("{header}\n");
        for l in lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    fn run(text: &str) -> (Exported, Value) {
        let mut reader = TraceReader::new(text.as_bytes(), "test").unwrap();
        let mut out = Vec::new();
        let stats = export(&mut reader, &mut out, "out").unwrap();
        (stats, serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn a_move_is_one_async_slice_from_issued_to_completed() {
        let (stats, json) = run(&trace(&[
            r#"{"at_s":0.0,"process":0,"kind":"hello","processes":1,"workers":2,"peers":2,"bins":4,"config":{},"anchor_unix_s":100.0}"#,
            r#"{"at_s":1.0,"process":0,"kind":"migration","phase":"issued","bin":3,"time":50,"from":1,"to":0}"#,
            r#"{"at_s":1.5,"process":0,"kind":"migration","phase":"extracted","bin":3,"time":50,"worker":1,"bytes":10}"#,
            r#"{"at_s":2.0,"process":0,"kind":"migration","phase":"completed","bin":3,"time":50}"#,
        ]));
        assert_eq!((stats.moves, stats.incomplete), (1, 0));
        let events = json["traceEvents"].as_array().unwrap();
        let b: Vec<&Value> = events.iter().filter(|e| e["ph"] == "b").collect();
        let e: Vec<&Value> = events.iter().filter(|e| e["ph"] == "e").collect();
        assert_eq!((b.len(), e.len()), (1, 1));
        assert_eq!(b[0]["id"], e[0]["id"]);
        assert_eq!((b[0]["ts"].as_f64(), e[0]["ts"].as_f64()), (Some(1e6), Some(2e6)));
        let threads = events.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(threads, 2);
        assert!(events.iter().any(|e| e["ph"] == "i" && e["tid"] == 1));
    }

    /// Hellos from a trace may claim any number of workers: the threads named stay bounded,
    /// and their numbers do not overflow.
    #[test]
    fn a_hello_of_any_size_names_a_bounded_number_of_threads() {
        let (_, json) = run(&trace(&[
            r#"{"at_s":0.0,"process":0,"kind":"hello","processes":2,"workers":4294967295,"peers":2,"bins":4,"config":{}}"#,
            r#"{"at_s":0.0,"process":1,"kind":"hello","processes":2,"workers":4294967295,"peers":2,"bins":4,"config":{}}"#,
        ]));
        let events = json["traceEvents"].as_array().unwrap();
        let threads = events.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(threads, MAX_PEERS as usize);
    }

    #[test]
    fn processes_share_one_axis_through_their_anchors() {
        let (_, json) = run(&trace(&[
            r#"{"at_s":0.0,"process":0,"kind":"hello","processes":2,"workers":1,"peers":2,"bins":4,"config":{},"anchor_unix_s":100.0}"#,
            r#"{"at_s":0.0,"process":1,"kind":"hello","processes":2,"workers":1,"peers":2,"bins":4,"config":{},"anchor_unix_s":100.5}"#,
            r#"{"at_s":1.0,"process":1,"kind":"rejoin","worker":1,"time":7}"#,
        ]));
        let events = json["traceEvents"].as_array().unwrap();
        let rejoin = events.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(rejoin["ts"].as_f64(), Some(1.5e6));
        assert_eq!(rejoin["pid"], 1);
    }

    #[test]
    fn what_the_trace_left_open_is_closed_at_its_end() {
        let (stats, json) = run(&trace(&[
            r#"{"at_s":1.0,"process":0,"kind":"plan_started","strategy":"fluid","target":"uniform","steps":2,"bins":2,"id":0,"time":5}"#,
            r#"{"at_s":1.0,"process":0,"kind":"migration","phase":"issued","bin":1,"time":6,"from":0,"to":1}"#,
            r#"{"at_s":3.0,"process":0,"kind":"latency","window":0,"t_s":0.0,"count":1,"p50":1000000,"p99":2000000,"max":3000000,"histogram":""}"#,
        ]));
        assert_eq!((stats.moves, stats.plans, stats.incomplete), (1, 1, 2));
        let events = json["traceEvents"].as_array().unwrap();
        let ends: Vec<&Value> = events.iter().filter(|e| e["ph"] == "e").collect();
        assert_eq!(ends.len(), 2);
        assert!(
            ends.iter()
                .all(|e| e["ts"].as_f64() == Some(3e6) && e["args"]["incomplete"] == true)
        );
        let latency = events.iter().find(|e| e["ph"] == "C").unwrap();
        assert_eq!(latency["args"]["p99"].as_f64(), Some(2.0));
    }
}
