//! Pure presentation of LocalDisks for `localpv disks`: filtering, ordering, tables with human sizes, a summary,
//! and JSON/YAML lists. No I/O: the CLI fetches the objects and prints what this returns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::crd::{LocalDisk, LocalDiskPhase};

/// Output formats of `localpv disks -o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("failed to serialise the disks as JSON")]
    Json(#[source] serde_json::Error),
    #[error("failed to serialise the disks as YAML")]
    Yaml(#[source] serde_yaml_ng::Error),
}

/// Which disks to show; `None` fields match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub node: Option<String>,
    pub class: Option<String>,
    pub phase: Option<LocalDiskPhase>,
}

impl Filter {
    pub fn matches(&self, disk: &LocalDisk) -> bool {
        let spec = &disk.spec;
        self.node.as_ref().is_none_or(|n| *n == spec.node)
            && self.class.as_ref().is_none_or(|c| *c == spec.storage_class)
            && self.phase.is_none_or(|p| p == phase(disk))
    }
}

/// The disks matching `filter`, ordered by node, then path, then name.
pub fn select(mut disks: Vec<LocalDisk>, filter: &Filter) -> Vec<LocalDisk> {
    disks.retain(|d| filter.matches(d));
    disks.sort_by(|a, b| {
        (&a.spec.node, &a.spec.path, &a.metadata.name).cmp(&(
            &b.spec.node,
            &b.spec.path,
            &b.metadata.name,
        ))
    });
    disks
}

/// Renders `disks` (already selected and ordered) in `output`. `now` dates the AGE column.
pub fn render(disks: &[LocalDisk], output: Output, now: SystemTime) -> Result<String, FormatError> {
    match output {
        Output::Table => Ok(table(disks, false, now)),
        Output::Wide => Ok(table(disks, true, now)),
        Output::Json => serde_json::to_string_pretty(&list(disks))
            .map(|mut text| {
                text.push('\n');
                text
            })
            .map_err(FormatError::Json),
        Output::Yaml => serde_yaml_ng::to_string(&list(disks)).map_err(FormatError::Yaml),
    }
}

fn phase(disk: &LocalDisk) -> LocalDiskPhase {
    disk.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// A `List` like `kubectl get -o json` prints, without managed fields (noise for a reader).
fn list(disks: &[LocalDisk]) -> serde_json::Value {
    let items: Vec<serde_json::Value> = disks
        .iter()
        .map(|disk| {
            let disk = crate::watch::without_managed_fields(disk.clone());
            serde_json::to_value(&disk).unwrap_or(serde_json::Value::Null)
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
}

const HEADERS: [&str; 10] = [
    "NODE", "PATH", "CLASS", "SIZE", "PHASE", "REASON", "HEALTH", "PV", "CLAIM", "AGE",
];
const WIDE_HEADERS: [&str; 6] = ["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL", "NAME"];

fn table(disks: &[LocalDisk], wide: bool, now: SystemTime) -> String {
    if disks.is_empty() {
        return "No disks found.\n".to_string();
    }
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(disks.len() + 1);
    let mut header: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    if wide {
        header.extend(WIDE_HEADERS.iter().map(|h| h.to_string()));
    }
    rows.push(header);
    rows.extend(disks.iter().map(|disk| row(disk, wide, now)));
    let mut out = align(&rows);
    out.push('\n');
    out.push_str(&summary(disks));
    out
}

/// `Degraded` or `Failed` as the agent last judged; `Healthy` for a disk that is there and shows no sign; `-` for
/// an entry that is not a disk or is gone.
fn health(status: &crate::inventory::LocalDiskStatus) -> String {
    use crate::inventory::LocalDiskPhase;
    match (&status.health, status.phase) {
        (Some(health), _) => health.clone(),
        (None, LocalDiskPhase::Missing | LocalDiskPhase::Unusable) => "-".to_string(),
        (None, _) => "Healthy".to_string(),
    }
}

fn row(disk: &LocalDisk, wide: bool, now: SystemTime) -> Vec<String> {
    let spec = &disk.spec;
    let status = disk.status.clone().unwrap_or_default();
    let or_dash = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".to_string());
    let age = disk
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0))
        .map_or_else(
            || "-".to_string(),
            |created| human_age(now.duration_since(created).unwrap_or_default()),
        );
    let mut row = vec![
        spec.node.clone(),
        spec.path.clone(),
        spec.storage_class.clone(),
        spec.capacity_bytes
            .map_or_else(|| "-".to_string(), human_bytes),
        status.phase.as_str().to_string(),
        or_dash(status.reason.as_ref()),
        health(&status),
        or_dash(status.pv.as_ref()),
        or_dash(status.claim.as_ref()),
        age,
    ];
    if wide {
        row.extend([
            or_dash(spec.device.as_ref()),
            or_dash(spec.fs_type.as_ref()),
            or_dash(spec.fs_uuid.as_ref()),
            or_dash(spec.model.as_ref()),
            or_dash(spec.serial.as_ref()),
            or_dash(disk.metadata.name.as_ref()),
        ]);
    }
    row
}

/// Left-aligned columns three spaces apart, as kubectl prints them; no trailing spaces.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}   ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[derive(Default)]
struct ClassCount {
    free: usize,
    free_bytes: u64,
    bound: usize,
    other: usize,
}

/// `3 disks, 30.0GiB in total; fast: 1 free (10.0GiB), 1 bound; slow: 0 free, 0 bound, 1 other`, then a warning
/// per filesystem UUID seen on more than one node.
fn summary(disks: &[LocalDisk]) -> String {
    let total: u64 = disks.iter().filter_map(|d| d.spec.capacity_bytes).sum();
    let mut classes: BTreeMap<&str, ClassCount> = BTreeMap::new();
    for disk in disks {
        let count = classes.entry(&disk.spec.storage_class).or_default();
        match phase(disk) {
            LocalDiskPhase::Available => {
                count.free += 1;
                count.free_bytes += disk.spec.capacity_bytes.unwrap_or(0);
            }
            LocalDiskPhase::Bound => count.bound += 1,
            _ => count.other += 1,
        }
    }
    let noun = if disks.len() == 1 { "disk" } else { "disks" };
    let mut out = format!("{} {noun}, {} in total", disks.len(), human_bytes(total));
    for (class, count) in &classes {
        let _ = write!(out, "; {class}: {} free", count.free);
        if count.free > 0 {
            let _ = write!(out, " ({})", human_bytes(count.free_bytes));
        }
        let _ = write!(out, ", {} bound", count.bound);
        if count.other > 0 {
            let _ = write!(out, ", {} other", count.other);
        }
    }
    out.push('\n');
    for (uuid, nodes) in cloned(disks) {
        let nodes: Vec<&str> = nodes.into_iter().collect();
        let _ = writeln!(
            out,
            "warning: filesystem UUID {uuid} is on nodes {}: cloned disks are listed apart, never merged",
            nodes.join(", ")
        );
    }
    out
}

/// Filesystem UUIDs reported by more than one node.
fn cloned(disks: &[LocalDisk]) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut nodes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for disk in disks {
        if let Some(uuid) = &disk.spec.fs_uuid {
            nodes.entry(uuid).or_default().insert(&disk.spec.node);
        }
    }
    nodes.retain(|_, n| n.len() > 1);
    nodes
}

/// Bytes in binary units with one decimal: `512B`, `1.5KiB`, `10.0GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // NB: compare the rounded value, or 1023.96 KiB would print as "1024.0KiB" instead of "1.0MiB".
    while (value * 10.0).round() / 10.0 >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// An age the way kubectl prints one: `45s`, `5m30s`, `95m`, `5h3m`, `27h`, `3d4h`, `45d`, `2y30d`, `9y`.
pub fn human_age(age: Duration) -> String {
    let s = age.as_secs();
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    let with = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    match () {
        () if s < 120 => format!("{s}s"),
        () if m < 10 => with(m, "m", s % 60, "s"),
        () if m < 180 => format!("{m}m"),
        () if h < 8 => with(h, "h", m % 60, "m"),
        () if h < 48 => format!("{h}h"),
        () if h < 24 * 8 => with(d, "d", h % 24, "h"),
        () if d < 365 * 2 => format!("{d}d"),
        () if d < 365 * 8 => with(d / 365, "y", d % 365, "d"),
        () => format!("{}y", d / 365),
    }
}

#[cfg(test)]
mod tests;
