//! The node agent's configuration: the reference provisioner's ConfigMap format, read unchanged, plus our own keys.
//!
//! ```text
//!  config dir (ConfigMap volume: one file per key)  ─┐
//!  single YAML file (the same keys at top level)     ─┼─> raw YAML values ──> parse (validate, collect warnings)
//!  a whole ConfigMap manifest (kind: ConfigMap)      ─┘        ──> Config ──> Vec<DiscoveryClass> for discovery
//!                                                                        ──> ClassConfig / globals for plan
//! ```
//!
//! Parsing is pure (`Config::from_yaml`, `Config::from_files`); `Config::load` is the one function that reads the
//! file system. Every key, its default and its origin are documented in `docs/configuration.md`.

pub mod dirs;
mod parse;
mod source;
pub mod values;

pub use parse::MAX_CLASSES;
pub use source::{LoadCache, MAX_CONFIG_BYTES, MAX_DEPTH, Source};

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeSelectorTerm;

use crate::disk::{DiscoveryClass, VolumeMode};

/// The reference provisioner's default for `minResyncPeriod`.
pub const DEFAULT_MIN_RESYNC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// One entry per `storageClassMap` key, sorted by class name.
    pub classes: Vec<ClassConfig>,
    /// `nodeLabelsForPV`: Node label keys whose values are copied onto every PV.
    pub node_labels_for_pv: Vec<String>,
    /// `labelsForPV`: fixed labels put on every PV.
    pub labels_for_pv: BTreeMap<String, String>,
    /// `useNodeNameOnly`: node affinity on the node name instead of its `kubernetes.io/hostname` label.
    pub use_node_name_only: bool,
    /// `setPVOwnerRef`: make the Node the owner of its PVs (they are garbage-collected with it).
    pub set_pv_owner_ref: bool,
    /// `minResyncPeriod`: the full resync runs at least this often.
    pub min_resync_period: Duration,
    /// `removeNodeNotReadyTaint`: remove the startup taint ([`Config::startup_taint`]) from the Node once the
    /// first pass has published every disk it can.
    pub remove_node_not_ready_taint: bool,
    /// `provisionerNotReadyNodeTaintKey`.
    pub provisioner_not_ready_node_taint_key: Option<String>,
    /// `pvNaming` (ours).
    pub pv_naming: PvNaming,
    /// `capacityRounding` (ours): round capacities down like the reference provisioner.
    pub capacity_rounding: bool,
    /// `wipeOnFirstDiscovery` (ours): the default for classes that do not set it.
    pub wipe_on_first_discovery: bool,
    /// `missingDiskGracePeriod` (ours): how long an Available PV outlives its vanished disk.
    pub missing_disk_grace_period: Duration,
    /// `wipeConcurrency` (ours): worker threads of one filesystem wipe.
    pub wipe_concurrency: usize,
    /// `wipeIdleIoPriority` (ours): wipe in the idle I/O class, so a wipe only uses the disk when nothing else does.
    pub wipe_idle_io_priority: bool,
    /// `diskHealthCheckPeriod` (ours): how often every disk's health is looked at.
    pub health_check_period: Duration,
    /// `diskFailedAfterErrors`, `diskGoneGracePeriod`, `diskHealthyAfter` (ours): `health::judge`'s thresholds.
    pub health: crate::health::Policy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            classes: Vec::new(),
            node_labels_for_pv: Vec::new(),
            labels_for_pv: BTreeMap::new(),
            use_node_name_only: false,
            set_pv_owner_ref: false,
            min_resync_period: DEFAULT_MIN_RESYNC_PERIOD,
            remove_node_not_ready_taint: false,
            provisioner_not_ready_node_taint_key: None,
            pv_naming: PvNaming::default(),
            capacity_rounding: false,
            wipe_on_first_discovery: false,
            missing_disk_grace_period: Duration::ZERO,
            wipe_concurrency: 2,
            wipe_idle_io_priority: true,
            health_check_period: Duration::from_secs(15),
            health: crate::health::Policy::default(),
        }
    }
}

/// One `storageClassMap` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassConfig {
    /// StorageClass name (the map key).
    pub name: String,
    /// `hostDir`: discovery directory as the host sees it; PV paths live beneath it.
    pub host_dir: PathBuf,
    /// `mountDir`: the same directory as this process sees it; defaults to `host_dir`.
    pub mount_dir: PathBuf,
    /// `volumeMode`.
    pub volume_mode: VolumeMode,
    /// `accessMode`, as the single-element list PVs carry.
    pub access_modes: Vec<String>,
    /// `fsType`: put on PVs of Filesystem classes.
    pub fs_type: Option<String>,
    /// `namePattern`, split at commas.
    pub name_patterns: Vec<String>,
    /// `selector`: node selector terms ORed with the node's own term in each PV's node affinity.
    pub selector: Vec<NodeSelectorTerm>,
    /// How a released volume of this class is wiped (`wipeMethod`, `blockCleanerCommand`, `fsCleanerCommand`).
    pub wipe: WipeMethod,
    /// How a raw device found in this class is wiped: a Block class's own method; in a Filesystem class (whose
    /// devices are published for the kubelet to format) `blockCleanerCommand` as a Block class reads it, else
    /// `zeroout`.
    pub device_wipe: BlockWipe,
    /// `wipeOnFirstDiscovery` for this class (falls back to the global key).
    pub wipe_on_first_discovery: bool,
}

impl ClassConfig {
    /// How a disk of this class whose medium is `medium` is wiped: a raw device always by a block method (in a
    /// Filesystem class, `device_wipe`), a mounted filesystem by the class's own method.
    pub fn wipe_for(&self, medium: VolumeMode) -> WipeMethod {
        match (medium, &self.wipe) {
            (VolumeMode::Block, WipeMethod::Filesystem(_)) => {
                WipeMethod::Block(self.device_wipe.clone())
            }
            (_, method) => method.clone(),
        }
    }

    /// This class's directories for `dirs::problems`, the mount directory resolved by `resolve`.
    pub fn dirs(&self, resolve: impl Fn(&Path) -> PathBuf) -> dirs::ClassDirs {
        dirs::ClassDirs {
            name: self.name.clone(),
            host_dir: self.host_dir.clone(),
            mount_dir: self.mount_dir.clone(),
            resolved_mount_dir: resolve(&self.mount_dir),
        }
    }

    /// What discovery needs from this class.
    pub fn discovery_class(&self) -> DiscoveryClass {
        DiscoveryClass {
            name: self.name.clone(),
            host_dir: self.host_dir.clone(),
            mount_dir: self.mount_dir.clone(),
            mode: self.volume_mode,
            name_patterns: self.name_patterns.clone(),
        }
    }
}

/// How PV names are chosen for new PVs. Adopted PVs keep their names either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PvNaming {
    /// `localpv-<node>-<entry>-<64-bit hash>`: readable and collision-resistant.
    #[default]
    Localpv,
    /// `local-pv-<32-bit FNV-1a>`, exactly as the reference provisioner names them.
    Reference,
}

/// How a released volume is wiped before its disk is published again. The variant is the class's volume mode, so a
/// Filesystem class cannot hold a block method nor a Block class `remove`: `parse` refuses such a config, naming the
/// key, instead of remapping it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WipeMethod {
    Filesystem(FsWipe),
    Block(BlockWipe),
}

impl WipeMethod {
    /// The `wipeMethod` spelling, also a bounded metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            WipeMethod::Filesystem(fs) => fs.as_str(),
            WipeMethod::Block(block) => block.method().as_str(),
        }
    }

    /// The volume mode this method is for.
    pub fn mode(&self) -> VolumeMode {
        match self {
            WipeMethod::Filesystem(_) => VolumeMode::Filesystem,
            WipeMethod::Block(_) => VolumeMode::Block,
        }
    }

    /// Every `wipeMethod` spelling of either mode, once each (`command` is both): the `method` metric label values.
    pub fn every_spelling() -> Vec<&'static str> {
        let mut all = WipeMethod::spellings(VolumeMode::Filesystem);
        for spelling in WipeMethod::spellings(VolumeMode::Block) {
            if !all.contains(&spelling) {
                all.push(spelling);
            }
        }
        all
    }

    /// Every `wipeMethod` spelling of `mode`'s classes, in documentation order.
    pub fn spellings(mode: VolumeMode) -> Vec<&'static str> {
        match mode {
            VolumeMode::Filesystem => FsWipe::SPELLINGS.to_vec(),
            VolumeMode::Block => crate::contract::BlockMethod::ALL
                .iter()
                .map(|m| m.as_str())
                .collect(),
        }
    }
}

/// How a Filesystem class's volumes are wiped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsWipe {
    /// Remove everything beneath the volume root, in-process (`remove`).
    RemoveContents,
    /// `remove`, then run this argv (`fsCleanerCommand`) with `LOCAL_PV_FSPATH` set (`command`).
    Command(Vec<String>),
}

impl FsWipe {
    /// The `wipeMethod` spellings for Filesystem classes; the only place they are written.
    pub const SPELLINGS: [&'static str; 2] = ["remove", "command"];

    pub fn as_str(&self) -> &'static str {
        match self {
            FsWipe::RemoveContents => FsWipe::SPELLINGS[0],
            FsWipe::Command(_) => FsWipe::SPELLINGS[1],
        }
    }
}

/// How a Block class's volumes are wiped: one of the wipe engine's block methods, with the argv exactly when the
/// method is `command` (the constructors keep that so). The default is the engine's default, `zeroout`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockWipe {
    method: crate::contract::BlockMethod,
    command: Option<Vec<String>>,
}

impl BlockWipe {
    /// A built-in method; `None` for `Command`, which needs its argv (`BlockWipe::command`).
    pub fn builtin(method: crate::contract::BlockMethod) -> Option<BlockWipe> {
        (method != crate::contract::BlockMethod::Command).then_some(BlockWipe {
            method,
            command: None,
        })
    }

    /// Run this argv (`blockCleanerCommand`) with `LOCAL_PV_BLKDEVICE` set.
    pub fn command(argv: Vec<String>) -> BlockWipe {
        BlockWipe {
            method: crate::contract::BlockMethod::Command,
            command: Some(argv),
        }
    }

    pub fn method(&self) -> crate::contract::BlockMethod {
        self.method
    }

    /// The argv for `command`; `None` for the built-in methods.
    pub fn argv(&self) -> Option<&[String]> {
        self.command.as_deref()
    }
}

/// A key that was accepted but has no effect, or a setting that is probably not what the operator meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// Key path, e.g. `storageClassMap.fast-disks.blockCleanerCommand`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// One reason a configuration is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Key path, e.g. `storageClassMap.fast-disks.volumeMode`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// A parsed configuration and what the caller should log about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read configuration {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse {origin} as YAML")]
    Parse {
        origin: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("invalid configuration: {}", join(problems))]
    Invalid {
        problems: Vec<Problem>,
        /// What would have been warned about had the configuration been valid (`--check-config` shows both).
        warnings: Vec<Warning>,
    },
    #[error("configuration {origin} is too large: {what}")]
    TooLarge { origin: String, what: String },
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The reference chart's default `provisionerNotReadyNodeTaintKey`, used when `removeNodeNotReadyTaint` is on and
/// the key is not given (a hand-written ConfigMap).
pub const DEFAULT_STARTUP_TAINT: &str = "sig-storage-local-static-provisioner/agent-not-ready";

impl Config {
    /// The key of the taint to remove from this node once the first pass has published every disk it can; `None`
    /// when `removeNodeNotReadyTaint` is off.
    pub fn startup_taint(&self) -> Option<&str> {
        self.remove_node_not_ready_taint.then(|| {
            self.provisioner_not_ready_node_taint_key
                .as_deref()
                .unwrap_or(DEFAULT_STARTUP_TAINT)
        })
    }

    /// Reads a configuration directory (a mounted ConfigMap: one file per key) or a single YAML file, then checks
    /// its directories again with symlinks resolved on this host.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let loaded = Source::read(path)?.parse()?;
        loaded.check_on_host()
    }

    /// Reads a single YAML file holding the keys at top level (or a whole ConfigMap manifest).
    pub fn from_file(path: &Path) -> Result<Loaded, ConfigError> {
        Source::read_file(path)?.parse()
    }

    /// Reads a mounted ConfigMap directory: every visible regular file (symlinks followed) is one key.
    /// Names starting with `.` are the kubelet's `..data` machinery and are skipped.
    pub fn from_dir(dir: &Path) -> Result<Loaded, ConfigError> {
        Source::read_dir(dir)?.parse()
    }

    /// Parses one YAML document holding the keys at top level. A ConfigMap manifest (`kind: ConfigMap` with
    /// `data`) is accepted too and read like a mounted directory. `origin` names the source in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Loaded, ConfigError> {
        source::check_text(text, origin)?;
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                origin: origin.to_string(),
                source,
            })?;
        if let Some(files) = parse::configmap_data(&value) {
            return Self::from_files(&files, origin);
        }
        parse::parse_document(&value)
    }

    /// Parses ConfigMap-style data: key -> the YAML text of its value.
    pub fn from_files(
        files: &BTreeMap<String, String>,
        origin: &str,
    ) -> Result<Loaded, ConfigError> {
        let mut document = serde_yaml_ng::Mapping::new();
        for (key, text) in files {
            source::check_text(text, &format!("{origin}/{key}"))?;
            let value: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                    origin: format!("{origin}/{key}"),
                    source,
                })?;
            document.insert(serde_yaml_ng::Value::String(key.clone()), value);
        }
        parse::parse_document(&serde_yaml_ng::Value::Mapping(document))
    }

    /// What discovery needs: one entry per class.
    pub fn discovery_classes(&self) -> Vec<DiscoveryClass> {
        self.classes
            .iter()
            .map(ClassConfig::discovery_class)
            .collect()
    }

    pub fn class(&self, name: &str) -> Option<&ClassConfig> {
        self.classes.iter().find(|class| class.name == name)
    }

    /// Refuses a configuration whose discovery directories and the agent's `state_dir` nest, with symlinks
    /// resolved on this host: each problem names the class's key and both directories.
    pub fn check_state_dir(&self, state_dir: &Path) -> Result<(), ConfigError> {
        let classes: Vec<_> = self
            .classes
            .iter()
            .map(|class| class.dirs(dirs::resolve))
            .collect();
        let problems = dirs::state_dir_problems(state_dir, &dirs::resolve(state_dir), &classes);
        match problems.is_empty() {
            true => Ok(()),
            false => Err(ConfigError::Invalid {
                problems,
                warnings: Vec::new(),
            }),
        }
    }
}

impl Loaded {
    /// Checks the directories again with every symlink resolved on this host (`dirs::resolve`): a directory
    /// spelled through a symlink is refused like the directory it leads to.
    pub fn check_on_host(self) -> Result<Loaded, ConfigError> {
        let dirs: Vec<_> = self
            .config
            .classes
            .iter()
            .map(|class| class.dirs(dirs::resolve))
            .collect();
        let problems = dirs::problems(&dirs);
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(ConfigError::Invalid {
                problems,
                warnings: self.warnings,
            })
        }
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
