//! Per-disk health series (issue 37, point 2): one series per found disk, labelled by its class and its entry in
//! the class's directory (`vol1`, what `localpv disks` shows after the node). Bounded by the disks the node holds,
//! stable across the PVs a disk serves (unlike PV names or UIDs), and removed once the disk is no longer found.
//!
//! ```text
//! HealthBook::samples (every health look) ─> DiskMetrics::publish ─> disk_health_state, disk_io_errors_total,
//!                                                                    disk_media_errors, disk_endurance_used_percent,
//!                                                                    disk_hardware_warnings
//! ```

use std::collections::BTreeSet;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::agent::health::DiskSample;
use crate::health::State;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct DiskLabels {
    pub storage_class: String,
    pub entry: String,
}

#[derive(Default)]
pub struct DiskMetrics {
    health_state: Family<DiskLabels, Gauge>,
    io_errors: Family<DiskLabels, Counter>,
    media_errors: Family<DiskLabels, Gauge>,
    endurance_used: Family<DiskLabels, Gauge>,
    hardware_warnings: Family<DiskLabels, Gauge>,
    /// The disks of the last publish, so a disk no longer found loses its series.
    shown: Mutex<BTreeSet<DiskLabels>>,
}

/// The value of `disk_health_state`.
fn state_value(state: State) -> i64 {
    match state {
        State::Healthy => 0,
        State::Degraded => 1,
        State::Failed => 2,
    }
}

impl DiskMetrics {
    /// Registers the families under `r` (the agent's `localpv_node` registry).
    pub fn register(r: &mut Registry) -> DiskMetrics {
        let m = DiskMetrics::default();
        r.register(
            "disk_health_state",
            "Health of each found disk: 0 Healthy, 1 Degraded, 2 Failed",
            m.health_state.clone(),
        );
        r.register(
            "disk_io_errors",
            "I/O errors the agent has seen on each found disk (filesystem error counter rises, failed reads)",
            m.io_errors.clone(),
        );
        r.register(
            "disk_media_errors",
            "Media errors the drive reports (NVMe media and data integrity errors; ATA reallocated, pending and uncorrectable sectors; SCSI uncorrected read and write errors), for disks whose drive health log is read",
            m.media_errors.clone(),
        );
        r.register(
            "disk_endurance_used_percent",
            "Percentage of the drive's rated endurance used (may exceed 100), where the drive reports it",
            m.endurance_used.clone(),
        );
        r.register(
            "disk_hardware_warnings",
            "Warnings the drive raises about itself now (NVMe critical warning bits, ATA SMART status and attributes at threshold, SCSI informational exceptions), for disks whose drive health log is read",
            m.hardware_warnings.clone(),
        );
        m
    }

    /// Sets every found disk's series and removes those of disks no longer found.
    pub fn publish<'a>(&self, samples: impl IntoIterator<Item = &'a DiskSample>) {
        let mut now = BTreeSet::new();
        for s in samples {
            let labels = DiskLabels {
                storage_class: s.class.clone(),
                entry: s.entry.clone(),
            };
            self.health_state
                .get_or_create(&labels)
                .set(state_value(s.state));
            let counter = self.io_errors.get_or_create(&labels);
            counter.inc_by(s.io_errors.saturating_sub(counter.get()));
            drop(counter);
            let hw = s.hardware.as_ref();
            set_or_remove(&self.media_errors, &labels, hw.map(|h| h.media_errors));
            let used = hw.and_then(|h| h.percentage_used).map(u64::from);
            set_or_remove(&self.endurance_used, &labels, used);
            let warnings = hw.map(|h| h.warnings.len() as u64);
            set_or_remove(&self.hardware_warnings, &labels, warnings);
            now.insert(labels);
        }
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        for gone in shown.difference(&now) {
            self.health_state.remove(gone);
            self.io_errors.remove(gone);
            self.media_errors.remove(gone);
            self.endurance_used.remove(gone);
            self.hardware_warnings.remove(gone);
        }
        *shown = now;
    }
}

fn set_or_remove(family: &Family<DiskLabels, Gauge>, labels: &DiskLabels, value: Option<u64>) {
    match value {
        Some(v) => {
            family
                .get_or_create(labels)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        None => {
            family.remove(labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{DriveWarning, Hardware, HardwareSource};

    fn sample(entry: &str, state: State, io_errors: u64, hardware: Option<Hardware>) -> DiskSample {
        DiskSample {
            class: "local-ssd".into(),
            entry: entry.into(),
            state,
            io_errors,
            hardware,
        }
    }

    fn render(reg: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, reg).expect("encodes");
        text
    }

    #[test]
    fn each_disk_has_its_series_by_class_and_entry_and_a_disk_no_longer_found_loses_them() {
        let mut reg = Registry::default();
        let m = DiskMetrics::register(reg.sub_registry_with_prefix("localpv_node"));
        let nvme = Hardware {
            source: HardwareSource::Nvme,
            warnings: vec![DriveWarning::SpareLow],
            media_errors: 12,
            percentage_used: Some(103),
        };
        m.publish(&[
            sample("vol1", State::Healthy, 0, None),
            sample("nvme0", State::Degraded, 2, Some(nvme)),
        ]);
        let text = render(&reg);
        for line in [
            r#"localpv_node_disk_health_state{storage_class="local-ssd",entry="vol1"} 0"#,
            r#"localpv_node_disk_health_state{storage_class="local-ssd",entry="nvme0"} 1"#,
            r#"localpv_node_disk_io_errors_total{storage_class="local-ssd",entry="vol1"} 0"#,
            r#"localpv_node_disk_io_errors_total{storage_class="local-ssd",entry="nvme0"} 2"#,
            r#"localpv_node_disk_media_errors{storage_class="local-ssd",entry="nvme0"} 12"#,
            r#"localpv_node_disk_endurance_used_percent{storage_class="local-ssd",entry="nvme0"} 103"#,
            r#"localpv_node_disk_hardware_warnings{storage_class="local-ssd",entry="nvme0"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(
            !text.contains(
                r#"localpv_node_disk_media_errors{storage_class="local-ssd",entry="vol1"}"#
            ),
            "no drive health log, no hardware series:\n{text}"
        );

        m.publish(&[sample("nvme0", State::Failed, 5, None)]);
        let text = render(&reg);
        assert!(!text.contains(r#"entry="vol1""#), "{text}");
        for line in [
            r#"localpv_node_disk_health_state{storage_class="local-ssd",entry="nvme0"} 2"#,
            r#"localpv_node_disk_io_errors_total{storage_class="local-ssd",entry="nvme0"} 5"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
