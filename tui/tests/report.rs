//! `megaflux report` draws summaries as SVG and rejects files that are not results.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A bound on one run of the binary (a report, or a run of 1.5 s): against a hang, not a
/// judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// The binary with `args`, run to its end for at most [`LIMIT`].
fn megaflux(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_megaflux"));
    command.args(args).stdin(Stdio::null());
    megaflux_testkit::run(format!("megaflux {}", args.join(" ")), &mut command, LIMIT)
}

#[test]
fn a_run_summary_becomes_an_svg_and_bad_files_exit_2() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let (summary, svg) = (path("run.json"), path("out.svg"));
    let run = megaflux(&[
        "run",
        "--headless",
        "--keys",
        "1000",
        "--rate",
        "2000",
        "--duration",
        "1.5",
        "--migrate",
        "fluid@0.4:pack:1",
        "--summary",
        &summary,
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report = megaflux(&["report", &summary, "--svg", &svg]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg"));
    assert!(drawn.contains("keycount fluid"), "the legend names the run");
    assert!(
        drawn.matches("<polyline").count() >= 4,
        "timeline lines and the CCDF"
    );

    std::fs::write(path("notjson.json"), "not json").unwrap();
    std::fs::write(path("other.json"), "{\"hello\": 1}").unwrap();
    for bad in ["notjson.json", "other.json", "missing.json"] {
        let out = megaflux(&["report", &path(bad), "--svg", &svg]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(bad), "{stderr}");
        assert!(!stderr.contains("panicked"));
    }
}

#[test]
fn a_trace_becomes_an_svg_and_a_perfetto_export() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/keycount-fluid.jsonl");
    let (svg, json) = (path("trace.svg"), path("trace.json"));
    let out = megaflux(&["report", trace, "--svg", &svg, "--perfetto", &json]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("keycount fluid"));
    let exported: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(exported["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));

    // --perfetto takes exactly one trace; a file that is not one is named with its line.
    let cut = path("cut.jsonl");
    std::fs::write(&cut, "{\"format\":\"megaflux-trace\",\"version\":9}\n").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&[trace, trace], "one trace"),
        (&[&cut], "line 1"),
        (&[concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")], "line 1"),
    ];
    for (inputs, says) in cases {
        let mut args = vec!["report"];
        args.extend_from_slice(inputs);
        args.extend(["--perfetto", &json]);
        let out = megaflux(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{inputs:?}: {stderr}");
        assert!(stderr.contains(says), "{inputs:?}: {stderr}");
    }
}

/// One unreadable line in the middle of a trace: the report goes on, and says which line it
/// skipped.
#[test]
fn a_trace_with_an_unreadable_line_is_reported_with_a_warning() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/keycount-fluid.jsonl");
    let text = std::fs::read_to_string(sample).expect("the sample reads");
    let mut lines: Vec<&str> = text.lines().collect();
    lines[247] = "not an event";
    let trace = dir.path().join("broken.jsonl");
    std::fs::write(&trace, lines.join("\n") + "\n").expect("written");
    let (svg, json) = (dir.path().join("out.svg"), dir.path().join("out.json"));
    let out = megaflux(&[
        "report",
        trace.to_str().expect("UTF-8"),
        "--svg",
        svg.to_str().expect("UTF-8"),
        "--perfetto",
        json.to_str().expect("UTF-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped 1 unreadable line: 248"), "{stderr}");
    assert!(svg.exists() && json.exists());
}
