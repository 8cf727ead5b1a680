use std::path::PathBuf;

use rstest::rstest;

use super::*;

fn disk(mode: VolumeMode, set: impl FnOnce(&mut DiskIdentity)) -> Disk {
    let mut identity = DiskIdentity::default();
    set(&mut identity);
    Disk {
        class: "c".into(),
        entry: "vol1".into(),
        host_path: PathBuf::from("/mnt/disks/vol1"),
        mode,
        capacity_bytes: 1 << 30,
        available_bytes: None,
        mount_root: None,
        held: false,
        identity,
    }
}

fn fs(uuid: &str) -> Disk {
    disk(VolumeMode::Filesystem, |id| id.fs_uuid = Some(uuid.into()))
}

fn tmpfs(volume_id: &str, dev: &str) -> Disk {
    disk(VolumeMode::Filesystem, |id| {
        id.volume_id = Some(volume_id.into());
        id.dev_id = dev.parse().ok();
    })
}

fn recorded_from(disk: &Disk) -> Option<Recorded> {
    recorded(&annotations(disk))
}

/// A device number edited into something else is still a record, and still refutes as a differing one did.
#[test]
fn an_unreadable_device_number_annotation_refutes_like_a_differing_one() {
    let edited = BTreeMap::from([(ANN_DEV_ID.to_string(), "sdb".to_string())]);
    let rec = recorded(&edited).expect("still a record");
    let disk = disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok());
    assert_eq!(
        check(VolumeMode::Filesystem, Some(&rec), &disk),
        IdentityCheck::Changed("device number sdb became 0:55".into())
    );
    assert!(!may_be_same(VolumeMode::Filesystem, Some(&rec), &disk));
}

#[rstest]
#[case::same_uuid(fs("u1"), fs("u1"), IdentityCheck::Same)]
#[case::other_uuid(fs("u1"), fs("u2"), IdentityCheck::Changed("filesystem UUID u1 became u2".into()))]
#[case::uuid_gone(
    fs("u1"),
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()),
    IdentityCheck::Changed("filesystem UUID u1 is gone".into())
)]
// NB: the kernel hands a remounted tmpfs the number the previous one freed: an equal number proves nothing.
#[case::tmpfs_same_number_only(
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()),
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()),
    IdentityCheck::Unverifiable
)]
#[case::tmpfs_same_volume_id(tmpfs("v1", "0:55"), tmpfs("v1", "0:55"), IdentityCheck::Same)]
#[case::tmpfs_swapped_on_the_same_number(
    tmpfs("v1", "0:55"),
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()),
    IdentityCheck::Changed("volume id v1 is gone".into())
)]
#[case::tmpfs_other_volume_id(
    tmpfs("v1", "0:55"),
    tmpfs("v2", "0:55"),
    IdentityCheck::Changed("volume id v1 became v2".into())
)]
#[case::volume_id_recorded_but_unsupported_now(
    tmpfs("v1", "0:55"),
    disk(VolumeMode::Filesystem, |id| { id.dev_id = "0:55".parse().ok(); id.volume_id_unsupported = true }),
    IdentityCheck::Changed("volume id v1 is gone".into())
)]
#[case::renumbered_loop_device_same_uuid(
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.dev_id = "7:3".parse().ok() }),
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.dev_id = "7:6".parse().ok() }),
    IdentityCheck::Same
)]
#[case::renumbered_tmpfs_same_volume_id(
    tmpfs("v1", "0:55"),
    tmpfs("v1", "0:61"),
    IdentityCheck::Same
)]
#[case::same_uuid_other_volume_id(
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.volume_id = Some("v1".into()) }),
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.volume_id = Some("v2".into()) }),
    IdentityCheck::Changed("volume id v1 became v2".into())
)]
#[case::uuid_recorded_before_volume_ids_existed(
    fs("u1"),
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.volume_id = Some("v1".into()) }),
    IdentityCheck::Same
)]
#[case::tmpfs_remounted(
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()),
    disk(VolumeMode::Filesystem, |id| id.dev_id = "0:61".parse().ok()),
    IdentityCheck::Changed("device number 0:55 became 0:61".into())
)]
#[case::cloned_filesystem_on_other_hardware(
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.wwn = Some("w1".into()) }),
    disk(VolumeMode::Filesystem, |id| { id.fs_uuid = Some("u1".into()); id.wwn = Some("w2".into()) }),
    IdentityCheck::Changed("WWN w1 became w2".into())
)]
#[case::block_by_wwn_despite_rename(
    disk(VolumeMode::Block, |id| { id.wwn = Some("w1".into()); id.device = Some("/dev/sdb".into()) }),
    disk(VolumeMode::Block, |id| { id.wwn = Some("w1".into()); id.device = Some("/dev/sdc".into()) }),
    IdentityCheck::Same
)]
#[case::block_reformatted_by_tenant(
    disk(VolumeMode::Block, |id| { id.serial = Some("s1".into()); id.fs_uuid = Some("u1".into()) }),
    disk(VolumeMode::Block, |id| { id.serial = Some("s1".into()); id.fs_uuid = Some("u9".into()) }),
    IdentityCheck::Same
)]
#[case::block_swapped(
    disk(VolumeMode::Block, |id| id.serial = Some("s1".into())),
    disk(VolumeMode::Block, |id| id.serial = Some("s2".into())),
    IdentityCheck::Changed("serial s1 became s2".into())
)]
#[case::block_without_hardware_ids_by_device(
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop4".into())),
    IdentityCheck::Changed("device /dev/loop3 became /dev/loop4".into())
)]
#[case::block_without_hardware_ids_same_device_proves_nothing(
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    IdentityCheck::Unverifiable
)]
#[case::block_renumbered_same_wwn(
    disk(VolumeMode::Block, |id| { id.wwn = Some("w1".into()); id.dev_id = "8:16".parse().ok() }),
    disk(VolumeMode::Block, |id| { id.wwn = Some("w1".into()); id.dev_id = "8:32".parse().ok() }),
    IdentityCheck::Same
)]
#[case::nothing_comparable(
    disk(VolumeMode::Block, |id| id.wwn = Some("w1".into())),
    disk(VolumeMode::Block, |id| id.serial = Some("s1".into())),
    IdentityCheck::Unverifiable
)]
fn identity_is_compared_by_the_ids_that_fit_the_volume_mode(
    #[case] was: Disk,
    #[case] now: Disk,
    #[case] expected: IdentityCheck,
) {
    assert_eq!(
        check(was.mode, recorded_from(&was).as_ref(), &now),
        expected
    );
}

#[rstest]
#[case::strong_match(fs("u1"), fs("u1"), true)]
#[case::raw_device_on_the_same_node(
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    true
)]
#[case::raw_device_elsewhere(
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())),
    disk(VolumeMode::Block, |id| id.device = Some("/dev/loop4".into())),
    false
)]
#[case::other_uuid(fs("u1"), fs("u2"), false)]
fn a_weak_match_holds_a_disk_back_but_never_counts_as_the_same(
    #[case] was: Disk,
    #[case] now: Disk,
    #[case] expected: bool,
) {
    let recorded = recorded_from(&was);
    assert_eq!(may_be_same(was.mode, recorded.as_ref(), &now), expected);
    if expected && was.mode == VolumeMode::Block {
        assert_eq!(
            check(was.mode, recorded.as_ref(), &now),
            IdentityCheck::Unverifiable
        );
    }
}

#[test]
fn a_pv_without_identity_annotations_records_nothing() {
    assert_eq!(recorded(&BTreeMap::new()), None);
    assert_eq!(
        check(VolumeMode::Filesystem, None, &fs("u1")),
        IdentityCheck::NotRecorded
    );
}

#[test]
fn another_subdirectory_of_the_same_filesystem_is_another_disk() {
    let mut was = fs("u1");
    was.mount_root = Some("/a".into());
    let mut now = fs("u1");
    now.mount_root = Some("/b".into());
    let expected = IdentityCheck::Changed("mount root /a became /b".into());
    assert_eq!(
        check(VolumeMode::Filesystem, recorded_from(&was).as_ref(), &now),
        expected
    );
    assert_ne!(disk_key(&was), disk_key(&now));
}

#[test]
fn two_directories_bind_mounted_from_one_filesystem_and_swapped_are_other_disks() {
    let bind = |root: &str, volume_id: &str| {
        let mut d = disk(VolumeMode::Filesystem, |id| {
            id.fs_uuid = Some("u1".into());
            id.volume_id = Some(volume_id.into());
            id.dev_id = "7:3".parse().ok();
        });
        d.mount_root = Some(root.into());
        d
    };
    let was = bind("/a", "va");
    let now = bind("/b", "vb");
    let expected = IdentityCheck::Changed("volume id va became vb".into());
    assert_eq!(
        check(VolumeMode::Filesystem, recorded_from(&was).as_ref(), &now),
        expected
    );
}

#[rstest]
#[case::tmpfs_without_id(VolumeMode::Filesystem, DiskIdentity { dev_id: "0:55".parse().ok(), ..DiskIdentity::default() }, false)]
#[case::tmpfs_with_id(VolumeMode::Filesystem, DiskIdentity { volume_id: Some("v".into()), ..DiskIdentity::default() }, true)]
#[case::ext4(VolumeMode::Filesystem, DiskIdentity { fs_uuid: Some("u".into()), ..DiskIdentity::default() }, true)]
#[case::raw_loop_device(VolumeMode::Block, DiskIdentity { device: Some("/dev/loop3".into()), fs_uuid: Some("u".into()), ..DiskIdentity::default() }, false)]
#[case::disk_with_serial(VolumeMode::Block, DiskIdentity { serial: Some("s".into()), ..DiskIdentity::default() }, true)]
fn only_strong_ids_can_authorise_a_wipe(
    #[case] mode: VolumeMode,
    #[case] identity: DiskIdentity,
    #[case] strong: bool,
) {
    assert_eq!(is_strong(mode, &identity), strong);
}

#[test]
fn annotations_round_trip_every_recorded_field() {
    let mut d = disk(VolumeMode::Block, |id| {
        *id = DiskIdentity {
            device: Some("/dev/sdb".into()),
            dev_id: "8:16".parse().ok(),
            fs_type: Some("ext4".into()),
            fs_uuid: Some("u1".into()),
            fs_label: Some("data".into()),
            wwn: Some("0x5000c500a1b2c3d4".into()),
            serial: Some("S1".into()),
            model: Some("M".into()),
            vendor: Some("V".into()),
            rotational: Some(false),
            volume_id: Some("v1".into()),
            volume_id_unsupported: false,
        }
    });
    d.mount_root = Some("/sub".into());
    let back = recorded_from(&d).expect("recorded");
    assert_eq!(
        (back.identity, back.mount_root),
        (d.identity.clone(), d.mount_root.clone())
    );
}

#[rstest]
#[case::fs_uuid(fs("u1"), "fs-uuid:u1")]
#[case::tmpfs(tmpfs("v1", "0:55"), "volume-id:v1")]
#[case::tmpfs_without_volume_id(disk(VolumeMode::Filesystem, |id| id.dev_id = "0:55".parse().ok()), "path:/mnt/disks/vol1")]
#[case::block_wwn(disk(VolumeMode::Block, |id| { id.wwn = Some("w1".into()); id.fs_uuid = Some("u".into()) }), "wwn:w1")]
#[case::block_serial(disk(VolumeMode::Block, |id| id.serial = Some("s1".into())), "serial:s1")]
#[case::block_bare(disk(VolumeMode::Block, |id| id.device = Some("/dev/loop3".into())), "path:/mnt/disks/vol1")]
fn ledger_keys_use_the_most_stable_id(#[case] disk: Disk, #[case] expected: &str) {
    assert_eq!(disk_key(&disk), expected);
}

#[test]
fn only_two_keys_of_one_kind_with_different_values_prove_two_disks() {
    for (a, b, may) in [
        ("fs-uuid:1", "fs-uuid:1", true),
        ("fs-uuid:1", "fs-uuid:2", false),
        ("fs-uuid:1:/a", "fs-uuid:1:/b", false),
        ("wwn:x", "wwn:y", false),
        ("serial:x", "wwn:x", true),
        ("volume-id:v", "fs-uuid:1", true),
        ("path:/mnt/disks/a", "fs-uuid:1", true),
        ("path:/mnt/disks/a", "path:/mnt/disks/b", true),
    ] {
        assert_eq!(keys_may_match(a, b), may, "{a} ~ {b}");
        assert_eq!(keys_may_match(b, a), may, "{b} ~ {a}");
    }
}
