//! `docs/benchmarks.md` is generated: `bench/run.sh` keeps the run's inputs in `bench/results/` and renders the
//! page with `bench/report.py`. Re-rendering them here must give the committed page byte for byte, so nobody can
//! edit a figure by hand or commit a page without the measurements behind it.

use std::path::Path;
use std::process::Command;

#[test]
fn benchmarks_page_is_what_report_py_renders_from_the_recorded_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("bench/report.py"))
        .arg(root.join("bench/results"))
        .output()
        .expect("python3 runs (scripts/prereqs.sh installs it)");
    assert!(
        out.status.success(),
        "bench/report.py bench/results failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8(out.stdout).expect("the report is UTF-8");
    let page = std::fs::read_to_string(root.join("docs/benchmarks.md"))
        .expect("docs/benchmarks.md exists");
    assert!(
        rendered == page,
        "docs/benchmarks.md differs from `python3 bench/report.py bench/results`; regenerate it with bench/run.sh \
         (never edit it by hand)"
    );
}
