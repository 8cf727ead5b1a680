//! What the tests check on each reader of the inventory: a LocalDisk's identity against blkid and statvfs, the
//! agent's `GET /disks`, `kubectl get ldisk` (plain and wide) and `localpv disks` (table, wide, JSON).

use std::collections::BTreeMap;
use std::path::Path;

use localpv::inventory::format::human_bytes;
use localpv::inventory::{LocalDisk, LocalDiskPhase};
use serde_json::json;

use super::kit::{FsDisk, cells, fs_capacity, header, localpv_disks, phase_of, row};
use crate::support::agent::Agent;
use crate::support::cluster::ControlPlane;

pub fn assert_fs_identity(d: &LocalDisk, fs: &FsDisk, class: &str) {
    let spec = &d.spec;
    let what = &fs.name;
    assert_eq!(spec.node, "node-1", "{what}");
    assert_eq!(spec.path, fs.path.display().to_string(), "{what}");
    assert_eq!(spec.storage_class, class, "{what}");
    assert_eq!(
        spec.volume_mode.map(|m| format!("{m:?}")),
        Some("Filesystem".into()),
        "{what}"
    );
    assert_eq!(spec.device.as_deref(), Some(fs.device.as_str()), "{what}");
    assert_eq!(spec.fs_type.as_ref(), fs.ids.get("TYPE"), "{what}");
    assert_eq!(spec.fs_uuid.as_deref(), Some(fs.uuid()), "{what}");
    let label = fs
        .ids
        .get("LABEL")
        .expect("the test labels its filesystems");
    assert_eq!(spec.fs_label.as_ref(), Some(label), "{what}");
    let capacity = fs_capacity(&fs.path);
    assert_eq!(spec.capacity_bytes, Some(capacity), "{what}");
    assert_eq!(
        spec.capacity_human.as_deref(),
        Some(human_bytes(capacity).as_str()),
        "{what}"
    );
    let labels = d.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("localpv.io/node").map(String::as_str),
        Some("node-1"),
        "{what}"
    );
    assert_eq!(
        labels.get("localpv.io/class").map(String::as_str),
        Some(class),
        "{what}"
    );
    assert_eq!(
        labels.get("localpv.io/fs-uuid").map(String::as_str),
        Some(fs.uuid()),
        "{what}"
    );
    let available = d.status.as_ref().and_then(|s| s.available_bytes);
    let available = available.unwrap_or_else(|| panic!("{what}: no free space recorded"));
    assert!(
        available <= capacity,
        "{what}: free space {available} of {capacity}"
    );
}

pub fn assert_block_identity(d: &LocalDisk, path: &Path, device: &str, size: u64) {
    let spec = &d.spec;
    assert_eq!(spec.node, "node-1");
    assert_eq!(spec.path, path.display().to_string());
    assert_eq!(spec.storage_class, "raw-block");
    assert_eq!(
        spec.volume_mode.map(|m| format!("{m:?}")),
        Some("Block".into())
    );
    assert_eq!(spec.device.as_deref(), Some(device), "the symlink's target");
    assert_eq!(spec.fs_type, None, "a raw device has no filesystem");
    assert_eq!(spec.capacity_bytes, Some(size));
    assert_eq!(spec.capacity_human, Some(human_bytes(size)));
    assert_eq!(phase_of(d), LocalDiskPhase::Available);
}

pub fn assert_unusable(d: &LocalDisk, reason: &str) {
    let status = d.status.clone().unwrap_or_default();
    assert_eq!(status.phase, LocalDiskPhase::Unusable, "{}", d.spec.path);
    assert_eq!(status.reason.as_deref(), Some(reason), "{}", d.spec.path);
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&d.spec.path),
        "the message names the path: {message}"
    );
    assert_eq!(d.spec.storage_class, "local-storage");
    assert_eq!(d.spec.capacity_bytes, None);
}

/// `GET /disks` on the agent: what discovery sees right now, usable or not.
pub fn agent_reports_what_it_sees(agent: &Agent, fs: &[&FsDisk], block: &Path) {
    let (status, body) = agent.get("/disks").expect("agent serves /disks");
    assert_eq!(status, 200, "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).expect("/disks is JSON");
    assert_eq!(seen["node"], "node-1", "{body}");
    let disks = seen["disks"].as_array().expect("disks array");
    let by_path = |p: &Path| {
        disks
            .iter()
            .find(|d| d["hostPath"] == json!(p.display().to_string()))
            .unwrap_or_else(|| panic!("/disks lacks {}: {body}", p.display()))
    };
    for d in fs {
        let entry = by_path(&d.path);
        assert_eq!(entry["mode"], "Filesystem", "{body}");
        assert_eq!(entry["identity"]["fsUuid"], json!(d.uuid()), "{body}");
        assert_eq!(entry["identity"]["fsType"], json!(d.ids["TYPE"]), "{body}");
        assert_eq!(entry["identity"]["device"], json!(d.device), "{body}");
    }
    assert_eq!(by_path(block)["mode"], "Block", "{body}");
    assert_eq!(disks.len(), 3, "{body}");
    let unusable: BTreeMap<String, String> = seen["unusable"]
        .as_array()
        .expect("unusable array")
        .iter()
        .map(|u| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (s(&u["entry"]), s(&u["reason"]))
        })
        .collect();
    assert_eq!(
        unusable,
        BTreeMap::from([
            ("README".to_string(), "NotADiskEntry".to_string()),
            ("scratch".to_string(), "NotAMountPoint".to_string()),
        ]),
        "{body}"
    );
}

pub fn kubectl_shows_the_columns(cp: &ControlPlane, ext4: &FsDisk, xfs: &FsDisk, raw_device: &str) {
    let table = cp.kubectl(&["get", "ldisk"]);
    assert_eq!(
        header(&table),
        [
            "NAME", "NODE", "PATH", "CLASS", "SIZE", "PHASE", "REASON", "HEALTH", "PV", "CLAIM",
            "AGE"
        ],
        "{table}"
    );
    assert_eq!(table.lines().count(), 6, "{table}");
    let line = row(&table, &ext4.name);
    for cell in ["node-1", "local-storage", "Available"] {
        assert!(line.contains(cell), "{cell} missing: {line}");
    }
    assert!(
        line.contains(&human_bytes(fs_capacity(&ext4.path))),
        "{line}"
    );
    assert!(row(&table, "scratch").contains("Unusable"), "{table}");
    assert!(row(&table, "scratch").contains("NotAMountPoint"), "{table}");
    assert!(row(&table, "blk1").contains("64.0MiB"), "{table}");

    let wide = cp.kubectl(&["get", "ldisk", "-o", "wide"]);
    let columns = header(&wide);
    assert_eq!(
        columns[11..],
        ["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL"],
        "{wide}"
    );
    for fs in [ext4, xfs] {
        let cells = cells(&wide, row(&wide, &fs.name));
        assert_eq!(cells["DEVICE"], fs.device, "{wide}");
        assert_eq!(cells["FSTYPE"], fs.ids["TYPE"], "{wide}");
        assert_eq!(cells["FSUUID"], fs.uuid(), "{wide}");
    }
    assert!(row(&wide, "blk1").contains(raw_device), "{wide}");
}

pub fn localpv_disks_lists_them(cp: &ControlPlane, fs: &[&FsDisk], block: &Path, summary: &str) {
    let home = tempfile::tempdir().expect("temp dir");
    let table = localpv_disks(cp, home.path(), &[]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        header(&table),
        [
            "NODE", "PATH", "CLASS", "SIZE", "PHASE", "REASON", "HEALTH", "PV", "CLAIM", "AGE"
        ],
        "{table}"
    );
    let paths: Vec<&str> = lines[1..6]
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    let want: Vec<String> = [
        fs[0].path.with_file_name("README"),
        fs[0].path.with_file_name("scratch"),
        fs[0].path.clone(),
        fs[1].path.clone(),
        block.to_path_buf(),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    assert_eq!(paths, want, "sorted by node and path:\n{table}");
    for d in fs {
        let line = row(&table, &d.path.display().to_string());
        assert!(line.contains(&human_bytes(fs_capacity(&d.path))), "{line}");
    }
    assert!(row(&table, "README").contains("Unusable"), "{table}");
    assert!(row(&table, "README").contains("NotADiskEntry"), "{table}");
    assert!(
        table.contains(summary),
        "want summary {summary:?} in:\n{table}"
    );

    let wide = localpv_disks(cp, home.path(), &["-o", "wide", "--class", "local-storage"]);
    assert!(
        header(&wide).ends_with(
            &["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL", "NAME"].map(String::from)
        ),
        "{wide}"
    );
    assert!(row(&wide, &fs[1].name).contains("xfs"), "{wide}");
    assert!(!wide.contains("blk1"), "--class filters: {wide}");

    let text = localpv_disks(cp, home.path(), &["-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&text).expect("-o json is JSON");
    assert_eq!(list["kind"], "List", "{text}");
    let items = list["items"].as_array().expect("items");
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(items.len(), 5, "{text}");
    for d in fs {
        assert!(names.contains(&d.name.as_str()), "{names:?}");
    }
    assert!(
        items
            .iter()
            .all(|i| i["metadata"].get("managedFields").is_none()),
        "{text}"
    );
    let unusable = localpv_disks(cp, home.path(), &["--phase", "unusable", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&unusable).expect("JSON");
    let reasons: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["status"]["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["NotADiskEntry", "NotAMountPoint"], "{unusable}");
}
