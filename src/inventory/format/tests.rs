//! `localpv disks` output for a fixed set of LocalDisks, in every format.

use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use k8s_openapi::jiff::Timestamp;
use rstest::rstest;

use super::*;
use crate::inventory::crd::{DiskVolumeMode, LocalDiskSpec, LocalDiskStatus};

const GIB: u64 = 1 << 30;
const CREATED: i64 = 1_700_000_000;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(CREATED as u64 + 3 * 3600 + 25 * 60)
}

struct Fixture {
    name: &'static str,
    node: &'static str,
    path: &'static str,
    class: &'static str,
    bytes: Option<u64>,
    phase: LocalDiskPhase,
    pv: Option<&'static str>,
    claim: Option<&'static str>,
    uuid: Option<&'static str>,
    reason: Option<&'static str>,
}

fn disk(f: Fixture) -> LocalDisk {
    let spec = LocalDiskSpec {
        node: f.node.into(),
        path: f.path.into(),
        entry: f.path.rsplit('/').next().unwrap_or_default().into(),
        storage_class: f.class.into(),
        volume_mode: f.bytes.map(|_| DiskVolumeMode::Filesystem),
        device: f.bytes.map(|_| "/dev/sdb".into()),
        fs_type: f.uuid.map(|_| "ext4".into()),
        fs_uuid: f.uuid.map(str::to_string),
        model: f.bytes.map(|_| "QEMU HARDDISK".into()),
        serial: f.bytes.map(|_| "QM0001".into()),
        capacity_bytes: f.bytes,
        capacity_human: f.bytes.map(human_bytes),
        ..LocalDiskSpec::default()
    };
    let mut disk = LocalDisk::new(f.name, spec);
    disk.metadata.creation_timestamp = Some(Time(
        Timestamp::from_second(CREATED).expect("valid timestamp"),
    ));
    disk.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    disk.status = Some(LocalDiskStatus {
        phase: f.phase,
        pv: f.pv.map(str::to_string),
        claim: f.claim.map(str::to_string),
        reason: f.reason.map(str::to_string),
        ..LocalDiskStatus::default()
    });
    disk
}

/// Deliberately out of order; two nodes report the same filesystem UUID.
fn disks() -> Vec<LocalDisk> {
    let base = |name, node, path| Fixture {
        name,
        node,
        path,
        class: "local-storage",
        bytes: Some(10 * GIB),
        phase: LocalDiskPhase::Available,
        pv: None,
        claim: None,
        uuid: None,
        reason: None,
    };
    vec![
        disk(Fixture {
            class: "fast",
            bytes: Some(1536 * GIB),
            uuid: Some("aaaa-1111"),
            ..base("fs-aaaa-1111-n2-0badf00d", "n2", "/mnt/fast/nvme0")
        }),
        disk(Fixture {
            phase: LocalDiskPhase::Bound,
            pv: Some("localpv-n1-vol2-1"),
            claim: Some("shop/data-db-0"),
            uuid: Some("bbbb-2222"),
            ..base("fs-bbbb-2222", "n1", "/mnt/disks/vol2")
        }),
        disk(Fixture {
            pv: Some("localpv-n1-vol1-2"),
            bytes: Some(5 * GIB),
            uuid: Some("aaaa-1111"),
            ..base("fs-aaaa-1111", "n1", "/mnt/disks/vol1")
        }),
        disk(Fixture {
            bytes: None,
            phase: LocalDiskPhase::Unusable,
            reason: Some("NotAMountPoint"),
            ..base("n1-stray-00112233aabbccdd", "n1", "/mnt/disks/stray")
        }),
    ]
}

const TABLE: &str = "\
NODE   PATH               CLASS           SIZE      PHASE       REASON           HEALTH    PV                  CLAIM            AGE
n1     /mnt/disks/stray   local-storage   -         Unusable    NotAMountPoint   -         -                   -                3h25m
n1     /mnt/disks/vol1    local-storage   5.0GiB    Available   -                Healthy   localpv-n1-vol1-2   -                3h25m
n1     /mnt/disks/vol2    local-storage   10.0GiB   Bound       -                Healthy   localpv-n1-vol2-1   shop/data-db-0   3h25m
n2     /mnt/fast/nvme0    fast            1.5TiB    Available   -                Healthy   -                   -                3h25m

4 disks, 1.5TiB in total; fast: 1 free (1.5TiB), 0 bound; local-storage: 1 free (5.0GiB), 1 bound, 1 other
warning: filesystem UUID aaaa-1111 is on nodes n1, n2: cloned disks are listed apart, never merged
";

const WIDE_FIRST_LINES: &str = "\
NODE   PATH               CLASS           SIZE      PHASE       REASON           HEALTH    PV                  CLAIM            AGE     DEVICE     FSTYPE   FSUUID      MODEL           SERIAL   NAME
n1     /mnt/disks/stray   local-storage   -         Unusable    NotAMountPoint   -         -                   -                3h25m   -          -        -           -               -        n1-stray-00112233aabbccdd
n1     /mnt/disks/vol1    local-storage   5.0GiB    Available   -                Healthy   localpv-n1-vol1-2   -                3h25m   /dev/sdb   ext4     aaaa-1111   QEMU HARDDISK   QM0001   fs-aaaa-1111
";

fn all() -> Vec<LocalDisk> {
    select(disks(), &Filter::default())
}

#[test]
fn the_table_is_sorted_by_node_and_path_with_human_sizes_and_a_summary() {
    let out = render(&all(), Output::Table, now()).expect("renders");
    assert_eq!(out, TABLE, "got:\n{out}");
}

#[test]
fn the_wide_table_adds_device_filesystem_hardware_and_name_columns() {
    let out = render(&all(), Output::Wide, now()).expect("renders");
    assert!(out.starts_with(WIDE_FIRST_LINES), "got:\n{out}");
    assert!(
        out.lines().all(|l| l == l.trim_end()),
        "trailing spaces in:\n{out}"
    );
}

#[rstest]
#[case::json(Output::Json)]
#[case::yaml(Output::Yaml)]
fn machine_formats_are_a_sorted_list_without_managed_fields(#[case] output: Output) {
    let out = render(&all(), output, now()).expect("renders");
    let value: serde_json::Value = match output {
        Output::Json => serde_json::from_str(&out).expect("valid JSON"),
        _ => serde_yaml_ng::from_str(&out).expect("valid YAML"),
    };
    assert_eq!(value["kind"], "List");
    let items = value["items"].as_array().expect("items");
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "n1-stray-00112233aabbccdd",
            "fs-aaaa-1111",
            "fs-bbbb-2222",
            "fs-aaaa-1111-n2-0badf00d"
        ]
    );
    assert!(
        items
            .iter()
            .all(|i| i["metadata"].get("managedFields").is_none())
    );
    assert_eq!(items[2]["status"]["claim"], "shop/data-db-0");
    assert_eq!(items[2]["spec"]["capacityBytes"], 10 * GIB);
    let back: Vec<LocalDisk> = serde_json::from_value(value["items"].clone()).expect("round trip");
    assert_eq!(back.len(), 4);
}

#[test]
fn no_disks_says_so() {
    let out = render(&[], Output::Table, now()).expect("renders");
    assert_eq!(out, "No disks found.\n");
}

#[rstest]
#[case::by_node(Filter { node: Some("n2".into()), ..Filter::default() }, &["fs-aaaa-1111-n2-0badf00d"][..])]
#[case::by_class(Filter { class: Some("fast".into()), ..Filter::default() }, &["fs-aaaa-1111-n2-0badf00d"][..])]
#[case::by_phase(Filter { phase: Some(LocalDiskPhase::Bound), ..Filter::default() }, &["fs-bbbb-2222"][..])]
#[case::by_node_and_phase(
    Filter { node: Some("n1".into()), phase: Some(LocalDiskPhase::Available), ..Filter::default() },
    &["fs-aaaa-1111"][..]
)]
#[case::nothing_matches(Filter { node: Some("n9".into()), ..Filter::default() }, &[][..])]
fn filters_narrow_the_list(#[case] filter: Filter, #[case] expected: &[&str]) {
    let names: Vec<String> = select(disks(), &filter)
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    assert_eq!(names, expected);
}

#[rstest]
#[case(0, "0B")]
#[case(1023, "1023B")]
#[case(1024, "1.0KiB")]
#[case(1536, "1.5KiB")]
#[case(1_048_801_280, "1000.2MiB")]
#[case((1 << 20) - 1, "1.0MiB")]
#[case(10 * GIB, "10.0GiB")]
#[case(3 * (1 << 40) / 2, "1.5TiB")]
fn sizes_read_in_binary_units_with_one_decimal(#[case] bytes: u64, #[case] expected: &str) {
    assert_eq!(human_bytes(bytes), expected);
}

#[rstest]
#[case(45, "45s")]
#[case(119, "119s")]
#[case(5 * 60 + 30, "5m30s")]
#[case(6 * 60, "6m")]
#[case(95 * 60, "95m")]
#[case(5 * 3600 + 3 * 60, "5h3m")]
#[case(27 * 3600, "27h")]
#[case(3 * 86400 + 4 * 3600, "3d4h")]
#[case(45 * 86400, "45d")]
#[case(3 * 365 * 86400 + 30 * 86400, "3y30d")]
#[case(9 * 365 * 86400, "9y")]
fn ages_read_like_kubectl(#[case] seconds: u64, #[case] expected: &str) {
    assert_eq!(human_age(Duration::from_secs(seconds)), expected);
}
