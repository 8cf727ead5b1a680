//! Walks the raw YAML tree, checks every key, and builds a `Config` with warnings, or the list of problems.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeSelectorTerm;
use serde_yaml_ng::Value;

use super::dirs::{self, ClassDirs};
use super::values::is_dns_subdomain;
use super::{
    BlockWipe, ClassConfig, Config, ConfigError, FsWipe, Loaded, Problem, Warning, WipeMethod,
};
use crate::disk::VolumeMode;
use read::{plain, scalar_text};

mod read;

const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// The `data` of a ConfigMap manifest, when the document is one.
pub(super) fn configmap_data(document: &Value) -> Option<BTreeMap<String, String>> {
    let map = plain(document).as_mapping()?;
    if map.get("kind").and_then(Value::as_str) != Some("ConfigMap") {
        return None;
    }
    let data = map.get("data").map(plain).and_then(Value::as_mapping);
    let files = data.into_iter().flatten().filter_map(|(key, value)| {
        Some((
            key.as_str()?.to_string(),
            scalar_text(value).unwrap_or_default(),
        ))
    });
    Some(files.collect())
}

pub(super) fn parse_document(document: &Value) -> Result<Loaded, ConfigError> {
    let mut reader = ConfigReader::default();
    let config = reader.document(document);
    if reader.problems.is_empty() {
        Ok(Loaded {
            config,
            warnings: reader.warnings,
        })
    } else {
        Err(ConfigError::Invalid {
            problems: reader.problems,
            warnings: reader.warnings,
        })
    }
}

#[derive(Default)]
struct ConfigReader {
    problems: Vec<Problem>,
    warnings: Vec<Warning>,
}

/// At most this many classes: each costs a discovery scan per pass and a mount watch.
pub const MAX_CLASSES: usize = 256;

/// The per-class keys before they are combined and checked together.
#[derive(Default)]
struct RawClass {
    host_dir: Option<PathBuf>,
    mount_dir: Option<PathBuf>,
    volume_mode: VolumeMode,
    access_mode: Option<String>,
    fs_type: Option<String>,
    name_patterns: Option<Vec<String>>,
    selector: Vec<NodeSelectorTerm>,
    wipe_method: Option<String>,
    block_cleaner: Option<Vec<String>>,
    fs_cleaner: Option<Vec<String>>,
    wipe_on_first_discovery: Option<bool>,
}

impl ConfigReader {
    fn problem(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.to_string(),
            message: message.into(),
        });
    }

    fn warn(&mut self, key: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            key: key.to_string(),
            message: message.into(),
        });
    }

    fn document(&mut self, document: &Value) -> Config {
        let mut config = Config::default();
        let mut classes = None;
        for (key, value) in self.entries("(top level)", document, "") {
            self.global(&mut config, &key, value, &mut classes);
        }
        match classes {
            Some(value) => config.classes = self.classes(value, config.wipe_on_first_discovery),
            None => self.warn(
                "storageClassMap",
                "no storage classes configured: nothing will be published",
            ),
        }
        config
    }

    fn global<'v>(
        &mut self,
        config: &mut Config,
        key: &str,
        value: &'v Value,
        classes: &mut Option<&'v Value>,
    ) {
        match key {
            "storageClassMap" => *classes = Some(value),
            "nodeLabelsForPV" => set(&mut config.node_labels_for_pv, self.label_keys(key, value)),
            "labelsForPV" => set(&mut config.labels_for_pv, self.labels(key, value)),
            "useNodeNameOnly" => set(&mut config.use_node_name_only, self.bool(key, value)),
            "setPVOwnerRef" => set(&mut config.set_pv_owner_ref, self.bool(key, value)),
            "minResyncPeriod" => {
                let period = self.duration(key, value);
                if period == Some(Duration::ZERO) {
                    self.problem(key, "must be longer than zero");
                }
                set(&mut config.min_resync_period, period)
            }
            "removeNodeNotReadyTaint" => set(
                &mut config.remove_node_not_ready_taint,
                self.bool(key, value),
            ),
            "provisionerNotReadyNodeTaintKey" => {
                let taint = self.string(key, value);
                if taint.as_deref().is_some_and(|t| t.trim().is_empty()) {
                    self.problem(key, "must name a taint key");
                }
                config.provisioner_not_ready_node_taint_key = taint;
            }
            "pvNaming" => set(&mut config.pv_naming, self.pv_naming(key, value)),
            "capacityRounding" => set(&mut config.capacity_rounding, self.bool(key, value)),
            "wipeOnFirstDiscovery" => {
                set(&mut config.wipe_on_first_discovery, self.bool(key, value))
            }
            "wipeConcurrency" => set(
                &mut config.wipe_concurrency,
                self.count(key, value, 1, 64).map(|n| n as usize),
            ),
            "wipeIdleIoPriority" => set(&mut config.wipe_idle_io_priority, self.bool(key, value)),
            "missingDiskGracePeriod" => set(
                &mut config.missing_disk_grace_period,
                self.duration(key, value),
            ),
            "diskHealthCheckPeriod" => {
                let period = self.duration(key, value);
                if period.is_some_and(|p| p < Duration::from_secs(1)) {
                    self.problem(key, "must be at least 1s: every disk is read each period");
                }
                set(&mut config.health_check_period, period)
            }
            "diskFailedAfterErrors" => set(
                &mut config.health.failed_after_errors,
                self.count(key, value, 1, 1_000_000),
            ),
            "diskGoneGracePeriod" => set(&mut config.health.gone_grace, self.duration(key, value)),
            "diskHealthyAfter" => set(&mut config.health.healthy_after, self.duration(key, value)),
            "useJobForCleaning" => {
                if self.bool(key, value) == Some(true) {
                    self.warn(
                        key,
                        "accepted but ignored: localpv wipes volumes in the agent, never in Jobs",
                    );
                }
            }
            "jobTolerations" | "jobContainerImage" => {
                self.warn(
                    key,
                    "accepted but ignored: localpv wipes volumes in the agent, never in Jobs",
                );
            }
            "useAlphaAPI" => {
                if self.bool(key, value) == Some(true) {
                    self.warn(
                        key,
                        "accepted but ignored: the alpha node-affinity annotation is long gone",
                    );
                }
            }
            _ => self.warn(key, "unknown key, ignored"),
        }
    }

    fn classes(&mut self, value: &Value, global_wipe_first: bool) -> Vec<ClassConfig> {
        let mut classes = Vec::new();
        let entries = self.entries("storageClassMap", value, "storageClassMap.");
        if entries.len() > MAX_CLASSES {
            // NB: checked before any class is read; each class is compared with every other one.
            let message = format!(
                "{} classes: at most {MAX_CLASSES} are allowed",
                entries.len()
            );
            self.problem("storageClassMap", message);
            return classes;
        }
        for (name, body) in entries {
            let prefix = format!("storageClassMap.{name}");
            if !is_dns_subdomain(&name) {
                self.problem(
                    &prefix,
                    "is not a valid StorageClass name (lowercase DNS subdomain)",
                );
            }
            let raw = self.raw_class(&prefix, body);
            if let Some(class) = self.class(&prefix, name, raw, global_wipe_first) {
                classes.push(class);
            }
        }
        classes.sort_by(|a, b| a.name.cmp(&b.name));
        // As written here; `Config::load` checks again with symlinks resolved on the host.
        let dirs: Vec<ClassDirs> = classes
            .iter()
            .map(|c| c.dirs(|p| p.to_path_buf()))
            .collect();
        self.problems.extend(dirs::problems(&dirs));
        classes
    }

    fn raw_class(&mut self, prefix: &str, body: &Value) -> RawClass {
        let mut raw = RawClass::default();
        for (key, value) in self.entries(prefix, body, &format!("{prefix}.")) {
            let path = format!("{prefix}.{key}");
            let path = path.as_str();
            match key.as_str() {
                "hostDir" => raw.host_dir = self.abs_path(path, value),
                "mountDir" => raw.mount_dir = self.abs_path(path, value),
                "volumeMode" => raw.volume_mode = self.volume_mode(path, value).unwrap_or_default(),
                "accessMode" => raw.access_mode = self.one_of(path, value, &ACCESS_MODES),
                "fsType" => raw.fs_type = self.string(path, value).filter(|s| !s.is_empty()),
                "namePattern" => raw.name_patterns = self.name_patterns(path, value),
                "selector" => raw.selector = self.selector(path, value),
                "wipeMethod" => raw.wipe_method = self.string(path, value),
                "blockCleanerCommand" => raw.block_cleaner = self.argv(path, value),
                "fsCleanerCommand" => raw.fs_cleaner = self.argv(path, value),
                "wipeOnFirstDiscovery" => raw.wipe_on_first_discovery = self.bool(path, value),
                _ => self.warn(path, "unknown key, ignored"),
            }
        }
        raw
    }

    fn class(
        &mut self,
        prefix: &str,
        name: String,
        raw: RawClass,
        global_wipe_first: bool,
    ) -> Option<ClassConfig> {
        let Some(host_dir) = raw.host_dir.clone() else {
            // Only report "required" when the key is absent, not when it was present and already reported.
            if !self
                .problems
                .iter()
                .any(|p| p.key == format!("{prefix}.hostDir"))
            {
                self.problem(&format!("{prefix}.hostDir"), "required");
            }
            return None;
        };
        if raw.fs_type.is_some() && raw.volume_mode == VolumeMode::Block {
            self.warn(
                &format!("{prefix}.fsType"),
                "ignored for Block classes (PVs expose the raw device)",
            );
        }
        let wipe = self.wipe_method(prefix, &raw)?;
        let device_wipe = match (&wipe, &raw.block_cleaner) {
            (WipeMethod::Block(method), _) => method.clone(),
            (WipeMethod::Filesystem(_), Some(argv)) => device_wipe_of(argv),
            (WipeMethod::Filesystem(_), None) => BlockWipe::default(),
        };
        Some(ClassConfig {
            name,
            mount_dir: raw.mount_dir.unwrap_or_else(|| host_dir.clone()),
            host_dir,
            volume_mode: raw.volume_mode,
            access_modes: vec![
                raw.access_mode
                    .unwrap_or_else(|| ACCESS_MODES[0].to_string()),
            ],
            fs_type: raw
                .fs_type
                .filter(|_| raw.volume_mode == VolumeMode::Filesystem),
            name_patterns: raw.name_patterns.unwrap_or_else(|| vec!["*".to_string()]),
            selector: raw.selector,
            wipe,
            device_wipe,
            wipe_on_first_discovery: raw.wipe_on_first_discovery.unwrap_or(global_wipe_first),
        })
    }

    /// Combines `wipeMethod` with the two cleaner commands into one method of the class's volume mode; a method or
    /// stock script of the other mode is refused, naming the key.
    fn wipe_method(&mut self, prefix: &str, raw: &RawClass) -> Option<WipeMethod> {
        let method_key = format!("{prefix}.wipeMethod");
        let mode = raw.volume_mode;
        let (own_cmd, own_key, other_cmd, other_key) = match mode {
            VolumeMode::Block => (
                &raw.block_cleaner,
                "blockCleanerCommand",
                &raw.fs_cleaner,
                "fsCleanerCommand",
            ),
            VolumeMode::Filesystem => (
                &raw.fs_cleaner,
                "fsCleanerCommand",
                &raw.block_cleaner,
                "blockCleanerCommand",
            ),
        };
        let mode_name = mode.as_str();
        match mode {
            VolumeMode::Block if other_cmd.is_some() => self.warn(
                &format!("{prefix}.{other_key}"),
                format!("ignored: this class's volumeMode is {mode_name}"),
            ),
            // NB: a Filesystem class's blockCleanerCommand wipes the raw devices found in it (`device_wipe_of`).
            _ => {}
        }
        let Some(method) = raw.wipe_method.as_deref() else {
            return match own_cmd {
                Some(argv) => self.command_default(&format!("{prefix}.{own_key}"), mode, argv),
                None if mode == VolumeMode::Block => Some(WipeMethod::Block(BlockWipe::default())),
                None => Some(WipeMethod::Filesystem(FsWipe::RemoveContents)),
            };
        };
        let allowed = WipeMethod::spellings(mode);
        if !allowed.contains(&method) {
            let other = other_mode(mode);
            let why = if WipeMethod::spellings(other).contains(&method) {
                format!(
                    "; {method:?} is for {} classes and this class is {mode_name}",
                    other.as_str()
                )
            } else {
                String::new()
            };
            self.problem(
                &method_key,
                format!(
                    "{method:?} is not one of {} for {mode_name} classes{why}",
                    allowed.join(", ")
                ),
            );
            return None;
        }
        if method == "command" {
            let Some(argv) = own_cmd else {
                self.problem(&method_key, format!("\"command\" needs {own_key}"));
                return None;
            };
            return Some(match mode {
                VolumeMode::Block => WipeMethod::Block(BlockWipe::command(argv.clone())),
                VolumeMode::Filesystem => WipeMethod::Filesystem(FsWipe::Command(argv.clone())),
            });
        }
        if own_cmd.is_some() {
            self.warn(
                &format!("{prefix}.{own_key}"),
                format!("ignored: wipeMethod is {method:?}"),
            );
        }
        Some(match mode {
            VolumeMode::Filesystem => WipeMethod::Filesystem(FsWipe::RemoveContents),
            VolumeMode::Block => {
                let builtin = crate::contract::BlockMethod::ALL
                    .into_iter()
                    .find(|m| m.as_str() == method)
                    .and_then(BlockWipe::builtin);
                WipeMethod::Block(builtin.unwrap_or_default())
            }
        })
    }

    /// A cleaner command with no explicit `wipeMethod`: the reference provisioner's stock scripts are not in our
    /// image, so on a Block class they map to the built-in method doing the same job; they erase a block device, so
    /// a Filesystem class naming one is refused rather than silently wiped another way. Anything else is run as
    /// given.
    fn command_default(
        &mut self,
        key: &str,
        mode: VolumeMode,
        argv: &[String],
    ) -> Option<WipeMethod> {
        let Some(method) = stock_script(argv) else {
            return Some(match mode {
                VolumeMode::Block => WipeMethod::Block(BlockWipe::command(argv.to_vec())),
                VolumeMode::Filesystem => WipeMethod::Filesystem(FsWipe::Command(argv.to_vec())),
            });
        };
        let name = method.as_str();
        if mode == VolumeMode::Filesystem {
            self.problem(
                key,
                format!(
                    "{argv:?} is a reference provisioner block script (built-in {name:?}), for Block classes; \
                     this class is Filesystem"
                ),
            );
            return None;
        }
        self.warn(
            key,
            format!("{argv:?} is a reference provisioner script; using the built-in {name:?} method instead \
                     (set wipeMethod: command to run it anyway)"),
        );
        BlockWipe::builtin(method).map(WipeMethod::Block)
    }
}

fn other_mode(mode: VolumeMode) -> VolumeMode {
    match mode {
        VolumeMode::Block => VolumeMode::Filesystem,
        VolumeMode::Filesystem => VolumeMode::Block,
    }
}

/// Stores a parsed value; a value that failed to parse was reported and leaves the default.
fn set<T>(slot: &mut T, parsed: Option<T>) {
    if let Some(parsed) = parsed {
        *slot = parsed;
    }
}

/// The method for raw devices of a Filesystem class from its `blockCleanerCommand`: the reference provisioner's stock
/// scripts as their built-in equivalents (as for Block classes), anything else run as given.
fn device_wipe_of(argv: &[String]) -> BlockWipe {
    match stock_script(argv).and_then(BlockWipe::builtin) {
        Some(builtin) => builtin,
        None => BlockWipe::command(argv.to_vec()),
    }
}

/// The built-in method doing what one of the reference provisioner's stock block scripts does.
fn stock_script(argv: &[String]) -> Option<crate::contract::BlockMethod> {
    match argv.first().map(String::as_str) {
        Some("/scripts/quick_reset.sh") => Some(crate::contract::BlockMethod::Signatures),
        Some("/scripts/blkdiscard.sh") => Some(crate::contract::BlockMethod::Discard),
        Some("/scripts/dd_zero.sh") => Some(crate::contract::BlockMethod::ZeroOut),
        Some("/scripts/shred.sh") => Some(crate::contract::BlockMethod::Overwrite),
        _ => None,
    }
}
