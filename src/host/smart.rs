//! The device's own health log, read on the host (issue 37, point 1): which drive a volume lives on (sysfs), then
//! - an NVMe namespace: one Get Log Page 02h (`sys::nvme_smart_log`);
//! - an ATA drive behind the kernel's SCSI translation (vendor "ATA"), or any disk behind a USB bridge: SMART READ
//!   DATA, READ THRESHOLDS and RETURN STATUS, and page 07h of the Device Statistics log (an SSD's endurance used),
//!   through ATA PASS-THROUGH (`sys::ata_smart_read_via`, `sys::ata_smart_return_status_via`,
//!   `sys::ata_device_statistics_via`), the 16-byte form first and the 12-byte one when the bridge answers
//!   nothing to it (SAT bridges that know only the older form);
//! - another SCSI disk (SAS, a RAID controller's or a virtual disk): LOG SENSE of the informational exceptions, the
//!   read and write error counter and the solid state media pages (`sys::scsi_log_sense`);
//!
//! parsed by the pure `health::smart` and `health::scsi`.
//!
//! ```text
//!  DevId M:m ──> /sys/dev/block/M:m ──> partition? its disk ──> dm/md with one slave? that slave (again)
//!            ──> Drive: Nvme (nvme0n1) | Ata (sda, vendor "ATA") | Usb (an sd disk under a USB port) | Scsi (sd)
//!            ──> HardwareBook: read it if its last reading is older than SMART_LOG_PERIOD ──> Option<Hardware>
//! ```
//!
//! Bounded: one read per drive per `SMART_LOG_PERIOD` (10 minutes), however many disks live on it and however
//! often the agent looks; between reads every look gets the last reading. Anything that prevents a reading
//! (`ENOTTY`, `EINVAL`, no permission, a page the disk does not keep, a controller error) is "no hardware signal",
//! never an error state. Every command sent is read-only. A disk behind a USB bridge is sent ATA commands only, never
//! LOG SENSE: a USB bridge that is not SAT answers neither, and some wedge on SCSI commands they do not expect.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::debug;

use crate::contract::DevId;
use crate::health::Hardware;

/// How often one device's health log is read: SMART logs change slowly, and some controllers stall I/O briefly
/// while they answer.
pub const SMART_LOG_PERIOD: Duration = Duration::from_secs(600);

/// How many stacked devices (dm on md on a partition...) are followed down to the disk.
const MAX_DEPTH: usize = 4;

/// The drive whose health log tells about a block device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drive {
    /// An NVMe namespace (`nvme0n1`, as sysfs names it).
    Nvme(String),
    /// An ATA drive the kernel presents as a SCSI disk (`sda`; libata says vendor "ATA").
    Ata(String),
    /// A disk behind a USB bridge (usb-storage, uas) whose vendor is not "ATA": asked in ATA (SAT), if it speaks it.
    Usb(String),
    /// Another SCSI disk (a SAS drive, a RAID controller's volume, a virtual disk): asked for its log pages.
    Scsi(String),
}

impl Drive {
    pub fn name(&self) -> &str {
        match self {
            Drive::Nvme(name) | Drive::Ata(name) | Drive::Usb(name) | Drive::Scsi(name) => name,
        }
    }
}

/// The drive holding block device `dev`: the device itself, the disk of a partition, or the one device under a dm
/// or md device (a linear LV, a crypt mapping). `None` when it is neither NVMe nor ATA, is spread over several
/// devices, or sysfs does not say.
pub fn drive(sys: &Path, dev: DevId) -> Option<Drive> {
    let mut node = fs::canonicalize(sys.join("dev/block").join(dev.to_string())).ok()?;
    for _ in 0..MAX_DEPTH {
        if node.join("partition").exists() {
            node = node.parent()?.to_path_buf();
        }
        let slaves: Vec<PathBuf> = fs::read_dir(node.join("slaves"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        match slaves.as_slice() {
            [] if is_nvme_namespace(&node) => return name_of(&node).map(Drive::Nvme),
            [] => return scsi_drive(&node),
            [one] => node = fs::canonicalize(one).ok()?,
            _ => return None,
        }
    }
    None
}

/// The NVMe namespace holding block device `dev` (see [`drive`]).
pub fn nvme_namespace(sys: &Path, dev: DevId) -> Option<String> {
    match drive(sys, dev)? {
        Drive::Nvme(name) => Some(name),
        _ => None,
    }
}

/// An `sd` disk by what its SCSI device says: vendor "ATA" is what libata (and the translators that follow it)
/// shows for an ATA drive, so ATA PASS-THROUGH reaches a drive that speaks ATA; a disk under a USB port (a
/// `usbN` bus in its sysfs path) is a bridge's; any other with a vendor is a SCSI disk. `None` for what is not an
/// `sd` disk or shows no vendor.
fn scsi_drive(node: &Path) -> Option<Drive> {
    let name = name_of(node).filter(|n| n.starts_with("sd"))?;
    let vendor = fs::read_to_string(node.join("device/vendor")).ok()?;
    let on_usb = node.components().any(|c| {
        let c = c.as_os_str().to_string_lossy();
        c.strip_prefix("usb")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    Some(match vendor.trim() {
        "ATA" => Drive::Ata(name),
        _ if on_usb => Drive::Usb(name),
        _ => Drive::Scsi(name),
    })
}

fn name_of(node: &Path) -> Option<String> {
    node.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// A namespace's sysfs directory sits under its controller (`.../nvme/nvme0/nvme0n1`) or, with native multipath,
/// under its subsystem (`.../nvme-subsystem/nvme-subsys0/nvme0n1`).
fn is_nvme_namespace(node: &Path) -> bool {
    let named = name_of(node).is_some_and(|n| n.starts_with("nvme"));
    named
        && node
            .components()
            .any(|c| c.as_os_str() == "nvme" || c.as_os_str() == "nvme-subsystem")
}

/// The last reading of each namespace, and when it was taken.
#[derive(Debug, Default)]
pub struct HardwareBook {
    readings: Mutex<HashMap<String, (Instant, Option<Hardware>)>>,
}

impl HardwareBook {
    /// The reading of `namespace`: the last one when younger than `period`, else `read()` (and remembered).
    pub fn reading(
        &self,
        namespace: &str,
        now: Instant,
        period: Duration,
        read: impl FnOnce() -> Option<Hardware>,
    ) -> Option<Hardware> {
        let mut readings = self.readings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, last)) = readings.get(namespace)
            && now.saturating_duration_since(*at) < period
        {
            return last.clone();
        }
        let fresh = read();
        readings.insert(namespace.to_string(), (now, fresh.clone()));
        fresh
    }
}

/// The health log of the drive holding `dev`, at most once per [`SMART_LOG_PERIOD`] per drive.
pub fn hardware(sys: &Path, dev_dir: &Path, book: &HardwareBook, dev: DevId) -> Option<Hardware> {
    let drive = drive(sys, dev)?;
    let node = dev_dir.join(drive.name());
    book.reading(
        drive.name(),
        Instant::now(),
        SMART_LOG_PERIOD,
        || match drive {
            Drive::Nvme(_) => read_nvme(&node),
            Drive::Ata(_) | Drive::Usb(_) => read_ata(&node),
            Drive::Scsi(_) => read_scsi(&node),
        },
    )
}

fn open_read_only(node: &Path) -> nix::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{OFlag, open};
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    open(node, flags, nix::sys::stat::Mode::empty())
}

/// One Get Log Page 02h on `node`, opened read-only.
fn read_nvme(node: &Path) -> Option<Hardware> {
    let page = open_read_only(node)
        .and_then(crate::sys::nvme_smart_log)
        .map_err(|error| debug!(path = %node.display(), %error, "no NVMe health log"))
        .ok()?;
    crate::health::smart::parse_nvme(&page)
        .map(|h| h.hardware())
        .ok()
}

/// SMART READ DATA, READ THRESHOLDS and RETURN STATUS and the Device Statistics' solid state page of the ATA drive
/// at `node`, opened read-only, through ATA PASS-THROUGH (16), else (12). A drive that answers only some of them
/// gives what it answered (a hard disk keeps no solid state page); none: no reading.
fn read_ata(node: &Path) -> Option<Hardware> {
    use crate::sys::PassThrough;
    let fd = open_read_only(node)
        .map_err(|error| debug!(path = %node.display(), %error, "no ATA SMART data"))
        .ok()?;
    read_ata_via(&fd, node, PassThrough::Sixteen)
        .or_else(|| read_ata_via(&fd, node, PassThrough::Twelve))
}

fn read_ata_via(
    fd: &std::os::fd::OwnedFd,
    node: &Path,
    form: crate::sys::PassThrough,
) -> Option<Hardware> {
    use crate::health::smart::{self, AtaRegisters};
    use crate::sys::{
        AtaSmart, ata_device_statistics_via, ata_smart_read_via, ata_smart_return_status_via,
    };
    let sector = |what: AtaSmart| {
        ata_smart_read_via(fd, what, form)
            .map_err(
                |error| debug!(path = %node.display(), ?what, ?form, %error, "no ATA SMART sector"),
            )
            .ok()
    };
    let attributes = sector(AtaSmart::ReadData).and_then(|s| smart::parse_ata_attributes(&s).ok());
    let thresholds = sector(AtaSmart::ReadThresholds)
        .and_then(|s| smart::parse_ata_thresholds(&s).ok())
        .unwrap_or_default();
    let failing = ata_smart_return_status_via(fd, form)
        .ok()
        .and_then(|sense| smart::ata_registers(&sense))
        .and_then(
            |AtaRegisters {
                 lba_mid, lba_high, ..
             }| smart::ata_return_status(lba_mid, lba_high),
        );
    let endurance_used = ata_device_statistics_via(fd, smart::SOLID_STATE_STATISTICS, form)
        .map_err(|error| debug!(path = %node.display(), ?form, %error, "no ATA device statistics"))
        .ok()
        .and_then(|page| smart::ata_endurance_used(&page));
    if attributes.is_none() && failing.is_none() && endurance_used.is_none() {
        return None;
    }
    Some(smart::ata_hardware(
        &attributes.unwrap_or_default(),
        &thresholds,
        failing,
        endurance_used,
    ))
}

/// The informational exceptions, the read and write error counter and the solid state media log pages of the SCSI
/// disk at `node`, opened read-only. A page the disk does not keep (a spinning disk has no solid state media page)
/// is left out; none: no reading.
fn read_scsi(node: &Path) -> Option<Hardware> {
    use crate::health::scsi::{
        self, INFORMATIONAL_EXCEPTIONS, READ_ERRORS, SOLID_STATE_MEDIA, WRITE_ERRORS,
    };
    let fd = open_read_only(node)
        .map_err(|error| debug!(path = %node.display(), %error, "no SCSI log pages"))
        .ok()?;
    let page = |code: u8| {
        crate::sys::scsi_log_sense(&fd, code)
            .map_err(
                |error| debug!(path = %node.display(), page = code, %error, "no SCSI log page"),
            )
            .ok()
    };
    let exception = page(INFORMATIONAL_EXCEPTIONS).and_then(|d| {
        let parsed = scsi::parse_log_page(&d, INFORMATIONAL_EXCEPTIONS).ok()?;
        scsi::informational_exception(&parsed)
    });
    let uncorrected = |code: u8| {
        page(code).and_then(|d| scsi::uncorrected_errors(&scsi::parse_log_page(&d, code).ok()?))
    };
    let endurance_used = page(SOLID_STATE_MEDIA)
        .and_then(|d| scsi::endurance_used(&scsi::parse_log_page(&d, SOLID_STATE_MEDIA).ok()?));
    scsi::scsi_hardware(scsi::ScsiPages {
        exception,
        read_uncorrected: uncorrected(READ_ERRORS),
        write_uncorrected: uncorrected(WRITE_ERRORS),
        endurance_used,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A fake sysfs with an NVMe namespace and its partition, a multipath namespace, a loop device, an LV on the
    /// NVMe partition, a striped dm device over two devices; a SATA disk (vendor "ATA", padded as the kernel pads
    /// it), its partition and an LV on that, a SAS disk, a disk that shows no vendor, and two disks behind USB
    /// bridges (one whose bridge reports the drive's "ATA", one its own vendor).
    fn fake_sys() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("a temporary directory");
        let sys = root.path();
        let pci = sys.join("devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1");
        let multipath = sys.join("devices/virtual/nvme-subsystem/nvme-subsys1/nvme1n1");
        let virt = sys.join("devices/virtual/block");
        let ata = "devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0";
        let sas =
            "devices/pci0000:00/0000:02:00.0/host1/port-1:0/end_device-1:0/target1:0:0/1:0:0:0";
        let (sda, sdb) = (
            sys.join(ata).join("block/sda"),
            sys.join(sas).join("block/sdb"),
        );
        let usb = "devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0";
        let usb_ata = "devices/pci0000:00/0000:00:14.0/usb2/2-2/2-2:1.0/host7/target7:0:0/7:0:0:0";
        let (sde, sdf) = (
            sys.join(usb).join("block/sde"),
            sys.join(usb_ata).join("block/sdf"),
        );
        for dir in [
            pci.join("nvme0n1p2"),
            multipath.clone(),
            virt.join("loop3"),
            virt.join("dm-0/slaves"),
            virt.join("dm-1/slaves"),
            virt.join("dm-2/slaves"),
            virt.join("sdc"),
            sda.join("sda1"),
            sdb.clone(),
            sde.clone(),
            sdf.clone(),
            sys.join("dev/block"),
        ] {
            fs::create_dir_all(dir).expect("a directory");
        }
        for (file, text) in [
            (pci.join("nvme0n1p2/partition"), "2\n"),
            (sda.join("sda1/partition"), "1\n"),
            (sys.join(ata).join("vendor"), "ATA     \n"),
            (sys.join(sas).join("vendor"), "SEAGATE \n"),
            (sys.join(usb).join("vendor"), "WD      \n"),
            (sys.join(usb_ata).join("vendor"), "ATA     \n"),
        ] {
            fs::write(file, text).expect("a file");
        }
        let links = [
            (pci.clone(), "dev/block/259:0"),
            (pci.join("nvme0n1p2"), "dev/block/259:2"),
            (multipath.clone(), "dev/block/259:5"),
            (virt.join("loop3"), "dev/block/7:3"),
            (virt.join("dm-0"), "dev/block/253:0"),
            (virt.join("dm-1"), "dev/block/253:1"),
            (
                pci.join("nvme0n1p2"),
                "devices/virtual/block/dm-0/slaves/nvme0n1p2",
            ),
            (
                pci.join("nvme0n1p2"),
                "devices/virtual/block/dm-1/slaves/nvme0n1p2",
            ),
            (
                virt.join("loop3"),
                "devices/virtual/block/dm-1/slaves/loop3",
            ),
            (sda.clone(), "dev/block/8:0"),
            (sda.join("sda1"), "dev/block/8:1"),
            (sdb.clone(), "dev/block/8:16"),
            (virt.join("sdc"), "dev/block/8:32"),
            (virt.join("dm-2"), "dev/block/253:2"),
            (sda.join("sda1"), "devices/virtual/block/dm-2/slaves/sda1"),
            (sys.join(ata), &format!("{ata}/block/sda/device")),
            (sys.join(sas), &format!("{sas}/block/sdb/device")),
            (sde.clone(), "dev/block/8:64"),
            (sdf.clone(), "dev/block/8:80"),
            (sys.join(usb), &format!("{usb}/block/sde/device")),
            (sys.join(usb_ata), &format!("{usb_ata}/block/sdf/device")),
        ];
        for (target, link) in links {
            symlink(target, sys.join(link)).expect("a symlink");
        }
        root
    }

    #[test]
    fn a_namespace_its_partition_and_an_lv_on_it_resolve_to_the_namespace() {
        let sys = fake_sys();
        for dev in [DevId::new(259, 0), DevId::new(259, 2), DevId::new(253, 0)] {
            assert_eq!(
                nvme_namespace(sys.path(), dev).as_deref(),
                Some("nvme0n1"),
                "{dev}"
            );
        }
    }

    #[test]
    fn a_multipath_namespace_is_nvme_too() {
        let sys = fake_sys();
        assert_eq!(
            nvme_namespace(sys.path(), DevId::new(259, 5)).as_deref(),
            Some("nvme1n1")
        );
    }

    #[test]
    fn a_loop_device_a_device_over_two_and_an_unknown_number_have_no_namespace() {
        let sys = fake_sys();
        for dev in [DevId::new(7, 3), DevId::new(253, 1), DevId::new(8, 48)] {
            assert_eq!(nvme_namespace(sys.path(), dev), None, "{dev}");
        }
    }

    #[test]
    fn the_log_is_read_once_per_period_and_per_namespace() {
        let book = HardwareBook::default();
        let t0 = Instant::now();
        let mut reads = 0;
        let mut read = |n: u64| {
            reads += 1;
            Some(Hardware {
                media_errors: n,
                ..Hardware::default()
            })
        };
        let first = book.reading("nvme0n1", t0, SMART_LOG_PERIOD, || read(1));
        let cached = book.reading(
            "nvme0n1",
            t0 + Duration::from_secs(599),
            SMART_LOG_PERIOD,
            || read(2),
        );
        let other = book.reading("nvme1n1", t0, SMART_LOG_PERIOD, || read(7));
        let fresh = book.reading("nvme0n1", t0 + SMART_LOG_PERIOD, SMART_LOG_PERIOD, || {
            read(3)
        });
        let errors = |h: Option<Hardware>| h.map(|h| h.media_errors);
        assert_eq!(
            (errors(first), errors(cached), errors(other), errors(fresh)),
            (Some(1), Some(1), Some(7), Some(3))
        );
        assert_eq!(reads, 3);
    }

    #[test]
    fn a_failed_read_is_remembered_too() {
        let book = HardwareBook::default();
        let t0 = Instant::now();
        assert_eq!(book.reading("nvme0n1", t0, SMART_LOG_PERIOD, || None), None);
        let again = book.reading(
            "nvme0n1",
            t0 + Duration::from_secs(60),
            SMART_LOG_PERIOD,
            || panic!("read again within the period"),
        );
        assert_eq!(again, None);
    }

    #[test]
    fn an_ata_disk_its_partition_and_an_lv_on_it_resolve_to_the_drive() {
        let sys = fake_sys();
        for dev in [DevId::new(8, 0), DevId::new(8, 1), DevId::new(253, 2)] {
            assert_eq!(
                drive(sys.path(), dev),
                Some(Drive::Ata("sda".into())),
                "{dev}"
            );
            assert_eq!(nvme_namespace(sys.path(), dev), None, "{dev}");
        }
    }

    /// What each `sd` disk is asked in: a SAS disk its log pages, a disk behind a USB bridge ATA (SAT) whatever
    /// vendor the bridge reports, a disk that shows no vendor nothing at all.
    #[rstest::rstest]
    #[case::sas(DevId::new(8, 16), Some(Drive::Scsi("sdb".into())))]
    #[case::no_vendor(DevId::new(8, 32), None)]
    #[case::usb_bridge(DevId::new(8, 64), Some(Drive::Usb("sde".into())))]
    #[case::usb_bridge_saying_ata(DevId::new(8, 80), Some(Drive::Ata("sdf".into())))]
    fn each_scsi_disk_is_asked_in_its_own_language(
        #[case] dev: DevId,
        #[case] want: Option<Drive>,
    ) {
        let sys = fake_sys();
        assert_eq!(drive(sys.path(), dev), want, "{dev}");
        assert_eq!(nvme_namespace(sys.path(), dev), None, "{dev}");
    }

    #[test]
    fn a_drive_that_cannot_be_opened_gives_no_reading() {
        let sys = fake_sys();
        for dev in [DevId::new(8, 16), DevId::new(8, 32), DevId::new(8, 64)] {
            assert_eq!(
                hardware(sys.path(), sys.path(), &HardwareBook::default(), dev),
                None,
                "{dev}"
            );
        }
    }
}
