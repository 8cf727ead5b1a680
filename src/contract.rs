//! The contract with the cluster: every `localpv.io/*` key localpv writes or reads on Kubernetes objects, the
//! field managers it applies with, and the identity types several modules share (a PV's phase, a wipe's phase, a
//! device number).
//!
//! ```text
//!  agent ──── writes PV labels and annotations, LocalDisk labels ───┐
//!  extender ─ reads the wipe phase and the score strategy ──────────┤
//!  cleanup ── finds a deleted node's objects by NODE_LABEL ─────────┼──> contract (this leaf)
//!  config ─── refuses NODE_LABEL in labelsForPV ────────────────────┘
//! ```
//!
//! A leaf: it imports nothing from the crate, so any module may depend on it without a cycle. A test
//! (`tests/layout.rs`) fails on a `localpv.io/` string literal anywhere else under `src/`, so a key is spelled once;
//! the tests below pin every spelling, because a renamed key strands the objects already in a cluster.

use std::fmt;
use std::str::FromStr;

/// API group of the `LocalDisk` custom resource. NB: `#[kube(group = ..)]` takes only a literal, so
/// `inventory::crd` spells it again and its test checks it against this constant.
pub const GROUP: &str = "localpv.io";

/// Every label and annotation key of ours starts with this.
pub const KEY_PREFIX: &str = "localpv.io/";

/// Label on every PV and LocalDisk of ours: the node it lives on. Agents watch their own objects by it, the
/// clean-up controller finds a deleted node's objects by it, and `labelsForPV` may not override it.
pub const NODE_LABEL: &str = "localpv.io/node";
/// LocalDisk label: the storage class whose discovery directory holds the entry.
pub const CLASS_LABEL: &str = "localpv.io/class";
/// PV annotation recording the filesystem UUID of the disk the PV was made for.
pub const ANN_FS_UUID: &str = "localpv.io/fs-uuid";
/// LocalDisk label with the filesystem UUID, when it is a valid label value: finds every node's copy of a cloned
/// disk. The same key as [`ANN_FS_UUID`], as a label on another kind.
pub const FS_UUID_LABEL: &str = ANN_FS_UUID;

/// PV annotations recording the rest of a disk's identity (see `plan::identity`).
pub const ANN_FS_TYPE: &str = "localpv.io/fs-type";
pub const ANN_FS_LABEL: &str = "localpv.io/fs-label";
pub const ANN_DEVICE: &str = "localpv.io/device";
pub const ANN_DEV_ID: &str = "localpv.io/dev-id";
pub const ANN_WWN: &str = "localpv.io/wwn";
pub const ANN_SERIAL: &str = "localpv.io/serial";
pub const ANN_MODEL: &str = "localpv.io/model";
pub const ANN_VENDOR: &str = "localpv.io/vendor";
pub const ANN_ROTATIONAL: &str = "localpv.io/rotational";
pub const ANN_MOUNT_ROOT: &str = "localpv.io/mount-root";
pub const ANN_VOLUME_ID: &str = "localpv.io/volume-id";
/// PV annotation on a Filesystem PV that publishes a raw block device (for the kubelet to format), value
/// [`MEDIUM_DEVICE`]: the PV's `volumeMode` no longer says what the disk is, and its identity, wipe and checks are
/// those of a block device.
pub const ANN_MEDIUM: &str = "localpv.io/medium";
pub const MEDIUM_DEVICE: &str = "device";

/// PV annotation: [`WipePhase`] of the volume's current lifetime. The extender reads any non-empty value as "the
/// agent is wiping it, it comes back as Available".
pub const ANN_WIPE_PHASE: &str = "localpv.io/wipe-phase";
/// PV annotation `<PV UID>/<claim UID or ->`: the lifetime a wipe phase belongs to. A phase recorded for any other
/// PV object or any other claim is stale and ignored.
pub const ANN_WIPE_LIFETIME: &str = "localpv.io/wipe-lifetime";
/// PV annotation: the UID of the Node object whose agent made the PV or last found its disk at its path. Written
/// at creation and again by the agent each time it finds the PV's own disk (same identity) under a Node of another
/// UID; never for a disk that is missing or another disk. A Node of the PV's name whose UID is not this one is a
/// new machine that has not found the disk (recovery's replaced-node signal, `crate::recovery`).
pub const ANN_NODE_UID: &str = "localpv.io/node-uid";
/// LocalDisk annotation set by `localpv disks cordon` (any value but `false`): the agent stops publishing the disk
/// and withdraws its Available PV, until `localpv disks uncordon` removes it. Kept on the object, so it survives
/// agent restarts.
pub const ANN_CORDONED: &str = "localpv.io/cordoned";
/// LocalDisk annotation set by `localpv disks clear-health` (the time it was set): the operator says the disk's
/// `Degraded` or `Failed` state is over (a cable reseated, a false alarm). Each new value is one clear: the agent
/// judges the disk `Healthy` once, keeping its counters' baselines, and remembers the value it honoured.
pub const ANN_HEALTH_CLEARED: &str = "localpv.io/health-cleared";
/// Node annotation set by `localpv disks` (the time) after it changed one of the node's LocalDisks: the node's
/// agent, which watches its Node but lists its LocalDisks only every `minResyncPeriod`, lists them at once.
pub const ANN_DISKS_CHANGED: &str = "localpv.io/disks-changed";
/// Annotation on a claim, a StatefulSet or a StorageClass: `on`, `dry-run` or `off`, whether a StatefulSet replica
/// whose local volume is lost (its disk Failed, its node lost, its disk drained) is recovered by deleting its claim
/// and pod (`crate::recovery`). The claim's wins over the set's, the set's over the class's; off when none says.
pub const ANN_RECOVERY: &str = "localpv.io/recovery";
/// LocalDisk annotation set by `localpv disks drain` (with the cordon): the claim on the disk is moved away the
/// guarded way of `crate::recovery`, when its claim, set or class opted in, or always with the value [`DRAIN_FORCE`].
pub const ANN_DRAIN: &str = "localpv.io/drain";
/// The value of [`ANN_DRAIN`] that stands for an explicit `--force`: the drain needs no opt-in (guards still hold).
pub const DRAIN_FORCE: &str = "force";
/// Annotation on the chart's ValidatingAdmissionPolicy: the version of its rules (`plan::narrow::RULES_VERSION`),
/// which an agent checks before it narrows its PV watch to its own PVs.
pub const ANN_POLICY_RULES: &str = "localpv.io/policy-rules";
/// Kubernetes' well-known node label that local PVs pin themselves to; the extender's cache indexes PVs by it.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// PV annotation naming its provisioner. NB: the PV controller leaves a Released PV with it to its (external)
/// provisioner; without it a Delete-policy local PV would be marked Failed for lack of a deleter plugin.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Class annotation that wins over `spec.storageClassName`, on PVs and PVCs alike.
pub const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of static local classes: the only classes whose unbound claims the extender decides for.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// Kubernetes' non-graceful node shutdown taint: the node is known to be down.
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// StorageClass annotation overriding the extender's global score strategy for claims of that class.
pub const ANN_SCORE_STRATEGY: &str = "localpv.io/score-strategy";

/// Field manager of the node agent's PV creates and patches, and the reporting controller of its Events.
pub const NODE_MANAGER: &str = "localpv-node";

/// Field manager of one node agent's LocalDisk applies: per node, so two agents never take each other's fields.
/// Cut to the API server's 128-character limit.
pub fn inventory_manager(node: &str) -> String {
    format!("{NODE_MANAGER}-{node}").chars().take(128).collect()
}

/// `status.phase` of a PersistentVolume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Pending,
    Available,
    Bound,
    Released,
    Failed,
    /// No phase yet, or one this version does not know; the node agent's planner treats it like `Pending`.
    Unknown,
}

impl Phase {
    pub fn parse(phase: Option<&str>) -> Phase {
        match phase {
            Some("Pending") => Phase::Pending,
            Some("Available") => Phase::Available,
            Some("Bound") => Phase::Bound,
            Some("Released") => Phase::Released,
            Some("Failed") => Phase::Failed,
            _ => Phase::Unknown,
        }
    }
}

/// The value of [`ANN_WIPE_PHASE`] for the PV's current lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WipePhase {
    /// No phase recorded, a stale one, or a value this version does not know.
    None,
    Wiping,
    Wiped,
}

impl WipePhase {
    /// The annotation value; `None` for [`WipePhase::None`], which is written as no annotation at all.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            WipePhase::None => None,
            WipePhase::Wiping => Some("Wiping"),
            WipePhase::Wiped => Some("Wiped"),
        }
    }

    pub fn parse(value: Option<&str>) -> WipePhase {
        match value {
            Some("Wiping") => WipePhase::Wiping,
            Some("Wiped") => WipePhase::Wiped,
            _ => WipePhase::None,
        }
    }
}

/// A device number split as the kernel prints it (`major:minor`, as in mountinfo, `/sys/dev/block` and the
/// [`ANN_DEV_ID`] annotation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevId {
    pub major: u32,
    pub minor: u32,
}

impl DevId {
    pub fn new(major: u32, minor: u32) -> Self {
        DevId { major, minor }
    }

    /// Split a `dev_t` (`st_dev`, `st_rdev`) as glibc's `major()`/`minor()` do: 12+20 bits of major and 8+24 of
    /// minor, interleaved. Pure arithmetic, so this leaf needs no libc.
    pub fn from_dev(dev: u64) -> Self {
        let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff);
        let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff);
        // NB: both masks leave at most 32 bits, so the casts cannot truncate.
        DevId {
            major: major as u32,
            minor: minor as u32,
        }
    }

    /// Parse `"8:16"` (surrounding white space allowed, as in sysfs `dev` files); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }

    /// Major 0 is the kernel's "unnamed" block major: tmpfs, proc, overlay, btrfs subvolumes... have no device
    /// node behind this number.
    pub fn is_anonymous(self) -> bool {
        self.major == 0
    }
}

impl fmt::Display for DevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl FromStr for DevId {
    type Err = ();

    /// Exactly `major:minor`, no white space.
    fn from_str(s: &str) -> Result<Self, ()> {
        let (major, minor) = s.split_once(':').ok_or(())?;
        Ok(DevId {
            major: major.parse().map_err(drop)?,
            minor: minor.parse().map_err(drop)?,
        })
    }
}

/// Written as its text (`"8:16"`) wherever a device number is serialised (`/disks`, `LocalDisk.spec.devId`), as
/// when it was a string.
impl serde::Serialize for DevId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for DevId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|()| {
            serde::de::Error::custom(format!("not a device number (major:minor): {text:?}"))
        })
    }
}

impl schemars::JsonSchema for DevId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DevId".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

impl DevId {
    /// Reads an optional device number an operator may have edited: text that is not `major:minor` reads as none,
    /// so one edited object does not fail a whole list (`#[serde(deserialize_with)]`).
    pub fn deserialize_or_none<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DevId>, D::Error> {
        let text = <Option<String> as serde::Deserialize>::deserialize(d)?;
        Ok(text.as_deref().and_then(DevId::parse))
    }
}

/// How a block volume is erased; the config names it per storage class.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BlockMethod {
    /// `BLKZEROOUT`: reads back as zeros; offloaded by devices that can. Falls back to `Overwrite` when rejected.
    #[default]
    #[serde(rename = "zeroout", alias = "zero-out")]
    ZeroOut,
    /// `BLKDISCARD`: fast on SSDs and thin devices; contents afterwards are up to the device.
    Discard,
    /// `BLKSECDISCARD`: discard that also erases copies the device kept; few devices support it.
    SecureDiscard,
    /// Erase filesystem, RAID and partition-table signatures only (libblkid wipe, then the first and last MiB).
    Signatures,
    /// Write zeros over the whole device (`O_DIRECT`, flushed); hours per terabyte.
    Overwrite,
    /// Run the operator's argv with `LOCAL_PV_BLKDEVICE` set.
    Command,
}

impl BlockMethod {
    /// Every method, in documentation order; with `as_str` the one list of Block `wipeMethod` spellings.
    pub const ALL: [BlockMethod; 6] = [
        BlockMethod::ZeroOut,
        BlockMethod::Discard,
        BlockMethod::SecureDiscard,
        BlockMethod::Signatures,
        BlockMethod::Overwrite,
        BlockMethod::Command,
    ];

    /// The config spelling, also usable as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockMethod::ZeroOut => "zeroout",
            BlockMethod::Discard => "discard",
            BlockMethod::SecureDiscard => "secure-discard",
            BlockMethod::Signatures => "signatures",
            BlockMethod::Overwrite => "overwrite",
            BlockMethod::Command => "command",
        }
    }
}

impl std::fmt::Display for BlockMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[test]
    fn a_device_number_is_serialised_as_its_text_and_read_back_only_from_it() {
        let dev = DevId::new(8, 16);
        assert_eq!(serde_json::to_value(dev).unwrap(), "8:16");
        assert_eq!(serde_json::from_value::<DevId>("8:16".into()).unwrap(), dev);
        assert!(serde_json::from_value::<DevId>("sdb".into()).is_err());
        assert!(serde_json::from_value::<DevId>(816.into()).is_err());
    }

    /// The wire: objects already in clusters carry these spellings, so changing one is a migration, not a rename.
    #[test]
    fn every_key_keeps_its_spelling() {
        let keys = [
            (GROUP, "localpv.io"),
            (KEY_PREFIX, "localpv.io/"),
            (NODE_LABEL, "localpv.io/node"),
            (CLASS_LABEL, "localpv.io/class"),
            (FS_UUID_LABEL, "localpv.io/fs-uuid"),
            (ANN_FS_UUID, "localpv.io/fs-uuid"),
            (ANN_FS_TYPE, "localpv.io/fs-type"),
            (ANN_FS_LABEL, "localpv.io/fs-label"),
            (ANN_DEVICE, "localpv.io/device"),
            (ANN_DEV_ID, "localpv.io/dev-id"),
            (ANN_WWN, "localpv.io/wwn"),
            (ANN_SERIAL, "localpv.io/serial"),
            (ANN_MODEL, "localpv.io/model"),
            (ANN_VENDOR, "localpv.io/vendor"),
            (ANN_ROTATIONAL, "localpv.io/rotational"),
            (ANN_MOUNT_ROOT, "localpv.io/mount-root"),
            (ANN_VOLUME_ID, "localpv.io/volume-id"),
            (ANN_MEDIUM, "localpv.io/medium"),
            (ANN_WIPE_PHASE, "localpv.io/wipe-phase"),
            (ANN_WIPE_LIFETIME, "localpv.io/wipe-lifetime"),
            (ANN_SCORE_STRATEGY, "localpv.io/score-strategy"),
            (NODE_MANAGER, "localpv-node"),
        ];
        for (key, spelled) in keys {
            assert_eq!(key, spelled);
        }
        for (key, _) in &keys[2..keys.len() - 1] {
            assert!(key.starts_with(KEY_PREFIX), "{key}");
        }
        assert_eq!(inventory_manager("n1"), "localpv-node-n1");
        assert_eq!(inventory_manager(&"x".repeat(300)).len(), 128);
    }

    #[rstest]
    #[case(None, Phase::Unknown)]
    #[case(Some("Pending"), Phase::Pending)]
    #[case(Some("Available"), Phase::Available)]
    #[case(Some("Bound"), Phase::Bound)]
    #[case(Some("Released"), Phase::Released)]
    #[case(Some("Failed"), Phase::Failed)]
    #[case(Some("Lost"), Phase::Unknown)]
    fn pv_phase_reads_the_status_text(#[case] text: Option<&str>, #[case] want: Phase) {
        assert_eq!(Phase::parse(text), want);
    }

    #[rstest]
    #[case(WipePhase::None, None)]
    #[case(WipePhase::Wiping, Some("Wiping"))]
    #[case(WipePhase::Wiped, Some("Wiped"))]
    fn wipe_phase_round_trips_through_its_annotation(
        #[case] phase: WipePhase,
        #[case] text: Option<&str>,
    ) {
        assert_eq!(phase.as_str(), text);
        assert_eq!(WipePhase::parse(text), phase);
    }

    #[test]
    fn an_unknown_wipe_phase_reads_as_none() {
        assert_eq!(WipePhase::parse(Some("wiped")), WipePhase::None);
    }

    #[rstest]
    #[case("8:16", Some(DevId::new(8, 16)))]
    #[case(" 259:0\n", Some(DevId::new(259, 0)))]
    #[case("0:27", Some(DevId::new(0, 27)))]
    #[case("8", None)]
    #[case("8:", None)]
    #[case("a:1", None)]
    #[case("a:b", None)]
    #[case("-1:1", None)]
    #[case("8:16:1", None)]
    fn dev_id_parses_major_colon_minor(#[case] text: &str, #[case] want: Option<DevId>) {
        assert_eq!(DevId::parse(text), want);
    }

    #[test]
    fn dev_id_from_str_refuses_white_space() {
        assert_eq!(" 8:1".parse::<DevId>(), Err(()));
    }

    /// glibc's `makedev`: the same interleaving `from_dev` undoes.
    fn makedev(major: u64, minor: u64) -> u64 {
        ((major & 0xffff_f000) << 32)
            | ((major & 0x0000_0fff) << 8)
            | ((minor & 0xffff_ff00) << 12)
            | (minor & 0x0000_00ff)
    }

    #[rstest]
    #[case(8, 16)]
    #[case(259, 7)]
    #[case(0, 55)]
    #[case(4095, 255)]
    #[case(4096, 256)]
    #[case(0xffff_ffff, 0xffff_ffff)]
    fn dev_id_from_dev_splits_what_makedev_joins(#[case] major: u32, #[case] minor: u32) {
        let dev = makedev(major.into(), minor.into());
        assert_eq!(DevId::from_dev(dev), DevId::new(major, minor));
        assert_eq!(DevId::from_dev(dev).to_string(), format!("{major}:{minor}"));
    }

    #[test]
    fn major_zero_is_anonymous() {
        assert!(DevId::new(0, 55).is_anonymous());
        assert!(!DevId::new(7, 0).is_anonymous());
    }
}
