//! `megaflux report` draws summaries as SVG and rejects files that are not results.

use std::process::Command;

fn megaflux(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn a_run_summary_becomes_an_svg_and_bad_files_exit_2() {
    let dir = std::env::temp_dir().join(format!("megaflux-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
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
    let _ = std::fs::remove_dir_all(&dir);
}
