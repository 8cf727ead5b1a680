//! The one definition of a figure's statistics and the one writer of the figures file (issue 16 point 5), so a
//! median on docs/benchmarks.md means the same thing whichever benchmark printed it.
//!
//! ```text
//!  samples ─ sort ─ percentile(q): linear between the two nearest ranks ─ median = percentile(0.5)
//!          └─ figure(key, label, unit, samples) ─ one JSON line ─ $LOCALPV_BENCH_FIGURES ─ bench/report.py
//! ```
//!
//! A percentile is interpolated between the two samples around the rank `(n - 1) * q` (the definition numpy
//! and R use by default), so the median of an even count is the mean of the middle two and p99 of 100 runs
//! sits between the 99th and the 100th. The tables a benchmark prints use the same functions as its figures.
//!
//! The line format is what bench/report.py reads: `{"key", "label", "unit", "median", "min", "max", "n"}`.

use std::io::Write as _;
use std::time::Duration;

/// Median, extremes and count of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// The value at quantile `q` (0..=1) of `sorted` (ascending, not empty), interpolated between the two nearest
/// ranks.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "a percentile of no samples");
    let rank = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// `samples` sorted ascending (NaN last), for `percentile`.
pub fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The median of `samples` (not empty): the mean of the middle two for an even count.
pub fn median(samples: &[f64]) -> f64 {
    percentile(&sorted(samples), 0.5)
}

/// Median, min, max and count of `samples` (not empty).
pub fn spread(samples: &[f64]) -> Spread {
    let v = sorted(samples);
    Spread {
        median: percentile(&v, 0.5),
        min: v[0],
        max: v[v.len() - 1],
        n: v.len(),
    }
}

/// Durations as milliseconds, the unit most figures use.
pub fn millis(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| d.as_secs_f64() * 1e3).collect()
}

/// Appends the figure `key` with the spread of `samples` to the file `$LOCALPV_BENCH_FIGURES` names (nothing
/// when it is unset).
pub fn figure(key: &str, label: &str, unit: &str, samples: &[f64]) {
    figure_spread(key, label, unit, spread(samples));
}

/// `figure` for a spread computed elsewhere (a ratio of medians with the per-round ratios as its range).
pub fn figure_spread(key: &str, label: &str, unit: &str, s: Spread) {
    append(serde_json::json!({
        "key": key, "label": label, "unit": unit,
        "median": significant(s.median), "min": significant(s.min), "max": significant(s.max), "n": s.n,
    }));
}

/// Appends `line` to the file `$LOCALPV_BENCH_FIGURES` names (nothing when it is unset): a figure, or an outcome
/// in words (`"unit": "text"`).
pub fn append(line: serde_json::Value) {
    let Some(path) = std::env::var_os("LOCALPV_BENCH_FIGURES") else {
        return;
    };
    // One write per line, so figures appended by other benchmark binaries never interleave within a line.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
        .unwrap_or_else(|e| panic!("failed to append to {}: {e}", path.to_string_lossy()));
}

/// `v` kept to 6 significant digits: more than any figure's noise, and the same for 0.012 ms and 12,345 pods/s
/// (a fixed number of decimals loses the first and pads the second).
fn significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(5 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}
