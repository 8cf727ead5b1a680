//! Metrics every component serves besides its own: `localpv_build_info` and the standard `process_*` family
//! (prometheus-client has no process collector; these are read from `/proc/self` on each scrape).
//!
//! ```text
//!  register(reg, component) ─> localpv_build_info{component, version} 1
//!  scrape ─> ProcessCollector::encode ─> /proc/self/{stat,status,fd,limits} + /proc/stat (btime) ─> process_*
//! ```

use std::hash::Hash;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    component: String,
    version: String,
}

/// Registers `localpv_build_info` (value 1) and the process metrics for `component` (`node` or `extender`).
pub fn register(reg: &mut Registry, component: &str) {
    let info: Family<BuildLabels, Gauge> = Family::default();
    info.get_or_create(&BuildLabels {
        component: component.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
    .set(1);
    reg.register(
        "localpv_build_info",
        "Always 1; the labels say which component and version runs",
        info,
    );
    reg.register_collector(Box::new(ProcessCollector));
}

/// Creates each of `sets` in `family` at zero. Every known label set is exported from registration on: a counter
/// that first appears with its first event has no earlier sample, so `increase(...[30m]) > 0` would miss exactly
/// that first failure.
pub fn at_zero<S, M, C>(family: &Family<S, M, C>, sets: impl IntoIterator<Item = S>)
where
    S: Clone + Hash + Eq,
    C: MetricConstructor<M>,
{
    for set in sets {
        let _ = family.get_or_create(&set);
    }
}

/// `registry` in the text format, as a scrape reads it.
#[cfg(test)]
pub(crate) fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
    text
}

/// What a fresh registry exports once `register` has run: asserts it has each of `lines` (metrics at zero before
/// their first event), and returns it for further checks.
#[cfg(test)]
pub(crate) fn assert_registered<R>(
    register: impl FnOnce(&mut Registry) -> R,
    lines: &[&str],
) -> String {
    let mut reg = Registry::default();
    register(&mut reg);
    let text = scrape(&reg);
    for line in lines {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    text
}

/// What one scrape reads about this process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
    pub threads: i64,
    pub start_time_seconds: f64,
    pub open_fds: i64,
    pub max_fds: Option<i64>,
}

// NB: USER_HZ is 100 on every Linux architecture we build for; the kernel reports stat times in it.
const TICKS_PER_SECOND: f64 = 100.0;

/// Parses `/proc/<pid>/stat` (fields after the parenthesised command, which may itself hold spaces and
/// parentheses), `/proc/<pid>/status` and the `btime` line of `/proc/stat`.
pub fn parse(stat: &str, status: &str, proc_stat: &str) -> Option<ProcessStats> {
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // Field numbers from proc(5), minus 3 (pid, comm and state are not in `fields` as numbered here).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    let virtual_bytes = field(23)? as i64;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let boot: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())?;
    Some(ProcessStats {
        cpu_seconds: ticks / TICKS_PER_SECOND,
        resident_bytes: kib("VmRSS:").unwrap_or(0) * 1024,
        virtual_bytes,
        threads: kib("Threads:").unwrap_or(0),
        start_time_seconds: boot + start_ticks / TICKS_PER_SECOND,
        open_fds: 0,
        max_fds: None,
    })
}

/// The soft "Max open files" limit from `/proc/<pid>/limits`.
fn max_fds(limits: &str) -> Option<i64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn read(root: &Path) -> Option<ProcessStats> {
    let text = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let mut stats = parse(&text("self/stat")?, &text("self/status")?, &text("stat")?)?;
    stats.open_fds = std::fs::read_dir(root.join("self/fd")).map_or(0, |d| d.count() as i64);
    stats.max_fds = text("self/limits").as_deref().and_then(max_fds);
    Some(stats)
}

#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A process whose /proc cannot be read (not Linux) simply has no process metrics.
        let Some(s) = read(Path::new("/proc")) else {
            return Ok(());
        };
        let counter = ConstCounter::new(s.cpu_seconds);
        let help = "Total user and system CPU time spent in seconds";
        counter.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            help,
            None,
            counter.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<f64>); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                Some(s.resident_bytes as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                Some(s.virtual_bytes as f64),
            ),
            (
                "process_threads",
                "Number of OS threads",
                Some(s.threads as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                Some(s.open_fds as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds.map(|m| m as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                Some(s.start_time_seconds),
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_past_a_command_name_with_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
        // cstime priority nice threads itrealvalue starttime vsize rss
        let stat = "42 (local pv) (x)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 900\n";
        let status = "Name:\tlocalpv\nVmRSS:\t   2048 kB\nThreads:\t7\n";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\n";
        let s = parse(stat, status, proc_stat).expect("parses");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.resident_bytes, 2048 * 1024);
        assert_eq!(s.virtual_bytes, 123_456_789);
        assert_eq!(s.threads, 7);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_fds(limits), Some(1024));
    }

    #[test]
    fn this_process_is_described_with_build_info_and_process_metrics() {
        let mut reg = Registry::default();
        register(&mut reg, "node");
        let text = scrape(&reg);
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.contains(&format!(
                "localpv_build_info{{component=\"node\",version=\"{version}\"}} 1"
            )),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_threads ",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        let start = text
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a start time");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 24.0 * 3600.0,
            "start {start}, now {now}"
        );
    }
}
