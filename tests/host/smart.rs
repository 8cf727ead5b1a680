//! The device health log readers on a real loop device (issue 37, point 1): this machine has no NVMe or ATA device,
//! so what is checked is that a disk that is neither gives no hardware signal, no error or sign of failing, and that
//! the kernel refuses every kind of command cleanly (NVMe, ATA PASS-THROUGH 16 and 12 of SMART and of the Device
//! Statistics read, SCSI LOG SENSE).

use std::fs::File;
use std::path::PathBuf;

use localpv::discover::discover;
use localpv::host::Host;
use localpv::host::health::HealthProbe;
use localpv::host::linux::LinuxHost;
use localpv::host::smart::{HardwareBook, drive, hardware, nvme_namespace};
use localpv::sys::AtaSmart;

use crate::fixtures::Scene;

#[test]
fn a_loop_device_has_no_hardware_health_log_and_no_sign() {
    let mut scene = Scene::new();
    let device = scene.formatted("ext4", "smart", &scene.disks().join("vol1"));
    let class = scene.fs_class();
    let found = discover(&LinuxHost::default(), std::slice::from_ref(&class));
    let disk = found
        .disks
        .iter()
        .find(|d| d.entry == "vol1")
        .unwrap_or_else(|| panic!("vol1 not published: {found:#?}"));
    let dev = disk
        .identity
        .dev_id
        .expect("a loop mount has a device number");
    assert_eq!(nvme_namespace("/sys".as_ref(), dev), None);
    let book = HardwareBook::default();
    assert_eq!(hardware("/sys".as_ref(), "/dev".as_ref(), &book, dev), None);

    let probe = HealthProbe {
        path: class.mount_dir.join(&disk.entry),
        mode: disk.mode,
        dev: Some(dev),
        device: disk.identity.device.as_ref().map(PathBuf::from),
        fs_type: disk.identity.fs_type.clone(),
        super_options: None,
        round: 1,
    };
    let signals = LinuxHost::default().health(&probe);
    assert_eq!(
        signals,
        localpv::health::Signals {
            fs_errors: Some(0),
            ..Default::default()
        }
    );

    // The admin command itself, sent to a device that is not NVMe, is refused by the kernel: an error, no page.
    let file = File::open(&device).expect("open the loop device read-only");
    let refused = localpv::sys::nvme_smart_log(&file);
    assert!(
        refused.is_err(),
        "a loop device answered an NVMe command: {refused:?}"
    );

    // Nor is it an ATA drive: no drive to read, and ATA PASS-THROUGH sent anyway is refused (no SCSI generic
    // interface), an error and no sector or verdict.
    assert_eq!(drive("/sys".as_ref(), dev), None);
    for what in [AtaSmart::ReadData, AtaSmart::ReadThresholds] {
        let refused = localpv::sys::ata_smart_read(&file, what);
        assert!(refused.is_err(), "a loop device answered {what:?}");
    }
    let refused = localpv::sys::ata_smart_return_status(&file);
    assert!(
        refused.is_err(),
        "a loop device answered SMART RETURN STATUS: {refused:?}"
    );
    // The 12-byte form and SCSI LOG SENSE alike.
    let twelve = localpv::sys::PassThrough::Twelve;
    let refused = localpv::sys::ata_smart_read_via(&file, AtaSmart::ReadData, twelve);
    assert!(
        refused.is_err(),
        "a loop device answered ATA PASS-THROUGH (12)"
    );
    let refused = localpv::sys::ata_smart_return_status_via(&file, twelve);
    assert!(
        refused.is_err(),
        "a loop device answered ATA PASS-THROUGH (12): {refused:?}"
    );
    // The Device Statistics page alike, READ LOG EXT (16) and SMART READ LOG (12).
    for form in [localpv::sys::PassThrough::Sixteen, twelve] {
        let refused = localpv::sys::ata_device_statistics_via(&file, 0x07, form);
        assert!(
            refused.is_err(),
            "a loop device answered the Device Statistics read ({form:?})"
        );
    }
    for page in [0x2F, 0x03, 0x02] {
        let refused = localpv::sys::scsi_log_sense(&file, page);
        assert!(
            refused.is_err(),
            "a loop device answered LOG SENSE {page:#x}: {refused:?}"
        );
    }
}
