//! `docs/benchmarks.md` is generated: `bench/run.sh` keeps the run's inputs in `bench/results/` and renders the
//! page with `bench/report.py`. Re-rendering them here must give the committed page byte for byte, so nobody can
//! edit a figure by hand or commit a page without the measurements behind it.

use std::path::Path;
use std::process::Command;

use crate::support::proc::stdout_of;

#[test]
fn benchmarks_page_is_what_report_py_renders_from_the_recorded_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rendered = stdout_of(
        Command::new("python3")
            .arg(root.join("bench/report.py"))
            .arg(root.join("bench/results")),
        "python3 bench/report.py bench/results (scripts/prereqs.sh installs python3)",
    );
    let page = std::fs::read_to_string(root.join("docs/benchmarks.md"))
        .expect("docs/benchmarks.md exists");
    assert!(
        rendered == page,
        "docs/benchmarks.md differs from `python3 bench/report.py bench/results`; regenerate it with bench/run.sh \
         (never edit it by hand)"
    );
}
