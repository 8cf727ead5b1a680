//! The kernel's mount API read into plain data: what `statmount(2)` answers, as the [`MountEntry`] the mountinfo
//! parser would have made of the same mount, and which mounts a fanotify mount-event buffer names.
//!
//! ```text
//!  struct statmount (include/uapi/linux/mount.h)             MountEntry
//!   mnt_id ─────────────────────────────────────────────────> unique_id (never reused; mountinfo has none)
//!   mnt_id_old, mnt_parent_id_old ──────────────────────────> mount_id, parent_id (mountinfo's numbers)
//!   sb_dev_major:minor ─────────────────────────────────────> dev
//!   str[mnt_root], str[mnt_point] (raw bytes, unescaped) ───> root, mount_point
//!   mnt_attr (MOUNT_ATTR_*) ────────────────────────────────> mount_options  "rw,nosuid,relatime"
//!   mnt_propagation, peer group, master, propagate_from ────> optional_fields "shared:1 master:2"
//!   str[fs_type] [. str[fs_subtype]] ───────────────────────> fs_type
//!   str[sb_source] ─────────────────────────────────────────> source
//!   sb_flags + str[mnt_opts] ───────────────────────────────> super_options   "rw,size=1024k"
//! ```
//!
//! Pure: bytes in, entry or ids out. The agent reads the mount table this way one changed mount at a time (`listmount`
//! says which), instead of the whole of `/proc/self/mountinfo` after every mount event. Spelling the options as
//! mountinfo does keeps an entry equal to mountinfo's but for the unique id, which only this way of reading has.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::MountEntry;
use crate::contract::DevId;

pub const SB_BASIC: u64 = 0x1;
pub const MNT_BASIC: u64 = 0x2;
pub const PROPAGATE_FROM: u64 = 0x4;
pub const MNT_ROOT: u64 = 0x8;
pub const MNT_POINT: u64 = 0x10;
pub const FS_TYPE: u64 = 0x20;
pub const MNT_OPTS: u64 = 0x80;
pub const FS_SUBTYPE: u64 = 0x100;
pub const SB_SOURCE: u64 = 0x200;

/// Every field a [`MountEntry`] needs.
pub const MASK: u64 = SB_BASIC
    | MNT_BASIC
    | PROPAGATE_FROM
    | MNT_ROOT
    | MNT_POINT
    | FS_TYPE
    | MNT_OPTS
    | FS_SUBTYPE
    | SB_SOURCE;
/// What an entry cannot do without. The other strings are reported only when not empty (no options, no subtype, no
/// source: the bit stays clear), so their absence reads as empty.
pub const REQUIRED: u64 = SB_BASIC | MNT_BASIC | MNT_ROOT | MNT_POINT | FS_TYPE;

/// Where the strings start: the fixed part of `struct statmount` is 512 bytes.
const STRINGS: usize = 512;

// MOUNT_ATTR_* (include/uapi/linux/mount.h)
const ATTR_RDONLY: u64 = 0x1;
const ATTR_NOSUID: u64 = 0x2;
const ATTR_NODEV: u64 = 0x4;
const ATTR_NOEXEC: u64 = 0x8;
const ATTR_ATIME: u64 = 0x70;
const ATTR_NOATIME: u64 = 0x10;
const ATTR_RELATIME: u64 = 0x0;
const ATTR_NODIRATIME: u64 = 0x80;
const ATTR_IDMAP: u64 = 0x0010_0000;
const ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;

// SB_* (include/linux/fs.h), as statmount reports them.
const SB_RDONLY: u32 = 0x1;
const SB_SYNCHRONOUS: u32 = 0x10;
const SB_DIRSYNC: u32 = 0x80;
const SB_LAZYTIME: u32 = 0x0200_0000;

// MS_* propagation types (include/uapi/linux/mount.h)
const MS_UNBINDABLE: u64 = 1 << 17;
const MS_SLAVE: u64 = 1 << 19;
const MS_SHARED: u64 = 1 << 20;

/// Reads the kernel's answer. Fails when a field the entry needs is missing or a string offset points outside the
/// buffer: a mount described wrong is worse than one read again the slow way. The entry carries the mount's
/// unique id (never reused while the system runs, what `listmount` lists); the rest is what mountinfo shows.
pub fn parse(buf: &[u8]) -> Result<MountEntry, &'static str> {
    let mask = u64_at(buf, 8)?;
    if mask & REQUIRED != REQUIRED {
        return Err("the kernel did not report every field asked for");
    }
    let string = |offset_at: usize| -> Result<&[u8], &'static str> {
        let offset = u32_at(buf, offset_at)? as usize;
        let start = STRINGS
            .checked_add(offset)
            .ok_or("string offset overflows")?;
        let rest = buf.get(start..).ok_or("string offset past the end")?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or("string without its terminating NUL")?;
        Ok(&rest[..len])
    };
    let optional = |flag: u64, offset_at: usize| -> Result<&[u8], &'static str> {
        match mask & flag {
            0 => Ok(&[]),
            _ => string(offset_at),
        }
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let path = |bytes: &[u8]| PathBuf::from(OsStr::from_bytes(bytes));
    let attr = u64_at(buf, 64)?;
    let mut fs_type = text(string(36)?);
    let subtype = optional(FS_SUBTYPE, 120)?;
    if !subtype.is_empty() {
        fs_type.push('.');
        fs_type.push_str(&String::from_utf8_lossy(subtype));
    }
    // NB: no source at all reads "none", as mountinfo spells a mount without one.
    let source = optional(SB_SOURCE, 124)?;
    let entry = MountEntry {
        mount_id: u32_at(buf, 56)?,
        unique_id: Some(u64_at(buf, 40)?),
        parent_id: u32_at(buf, 60)?,
        dev: DevId {
            major: u32_at(buf, 16)?,
            minor: u32_at(buf, 20)?,
        },
        root: path(string(104)?),
        mount_point: path(string(108)?),
        mount_options: mount_options(attr),
        optional_fields: optional_fields(
            u64_at(buf, 72)?,
            u64_at(buf, 80)?,
            u64_at(buf, 88)?,
            (mask & PROPAGATE_FROM != 0)
                .then(|| u64_at(buf, 96))
                .transpose()?,
        ),
        fs_type,
        source: if source.is_empty() {
            "none".into()
        } else {
            text(source)
        },
        super_options: super_options(u32_at(buf, 32)?, optional(MNT_OPTS, 4)?),
    };
    Ok(entry)
}

/// Per-mount options as mountinfo spells them (`show_mnt_opts`): `rw`/`ro`, then the flags in the kernel's order.
fn mount_options(attr: u64) -> String {
    let mut options = String::from(if attr & ATTR_RDONLY != 0 { "ro" } else { "rw" });
    let atime = attr & ATTR_ATIME;
    let flags = [
        (attr & ATTR_NOSUID != 0, ",nosuid"),
        (attr & ATTR_NODEV != 0, ",nodev"),
        (attr & ATTR_NOEXEC != 0, ",noexec"),
        (atime == ATTR_NOATIME, ",noatime"),
        (attr & ATTR_NODIRATIME != 0, ",nodiratime"),
        (atime == ATTR_RELATIME, ",relatime"),
        (attr & ATTR_NOSYMFOLLOW != 0, ",nosymfollow"),
        (attr & ATTR_IDMAP != 0, ",idmapped"),
    ];
    for (set, name) in flags {
        if set {
            options.push_str(name);
        }
    }
    options
}

/// mountinfo's optional fields: `shared:N`, `master:N`, `propagate_from:N` (only when it differs from the master),
/// `unbindable`.
fn optional_fields(
    propagation: u64,
    peer_group: u64,
    master: u64,
    from: Option<u64>,
) -> Vec<String> {
    let mut fields = Vec::new();
    if propagation & MS_SHARED != 0 {
        fields.push(format!("shared:{peer_group}"));
    }
    if propagation & MS_SLAVE != 0 {
        fields.push(format!("master:{master}"));
        if let Some(from) = from.filter(|&f| f != 0 && f != master) {
            fields.push(format!("propagate_from:{from}"));
        }
    }
    if propagation & MS_UNBINDABLE != 0 {
        fields.push("unbindable".into());
    }
    fields
}

/// Super options as mountinfo spells them: `rw`/`ro`, the superblock flags, then the filesystem's own options.
fn super_options(sb_flags: u32, fs_options: &[u8]) -> String {
    let mut options = String::from(if sb_flags & SB_RDONLY != 0 {
        "ro"
    } else {
        "rw"
    });
    for (flag, name) in [
        (SB_SYNCHRONOUS, ",sync"),
        (SB_DIRSYNC, ",dirsync"),
        (SB_LAZYTIME, ",lazytime"),
    ] {
        if sb_flags & flag != 0 {
            options.push_str(name);
        }
    }
    if !fs_options.is_empty() {
        options.push(',');
        options.push_str(&String::from_utf8_lossy(fs_options));
    }
    options
}

/// What one read of a fanotify group with `FAN_REPORT_MNT` says: the unique ids of mounts attached, detached or
/// moved (a move is one event with both bits), and whether the kernel dropped events.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MountEvents {
    pub ids: Vec<u64>,
    /// `FAN_Q_OVERFLOW`: events were lost, only reading every mount again is right.
    pub overflow: bool,
}

const FAN_Q_OVERFLOW: u64 = 0x4000;
const FAN_EVENT_INFO_TYPE_MNT: u8 = 7;
const FANOTIFY_METADATA_VERSION: u8 = 3;

/// Reads the events in `buf` (whole events, as `read(2)` returns them) into `events`. A malformed buffer is an
/// error: the caller reads every mount again.
pub fn mount_events(buf: &[u8], events: &mut MountEvents) -> Result<(), &'static str> {
    let mut at = 0;
    while at < buf.len() {
        // struct fanotify_event_metadata: event_len u32, vers u8, reserved u8, metadata_len u16, mask u64, fd, pid.
        let event_len = u32_at(buf, at)? as usize;
        let version = *buf.get(at + 4).ok_or("event cut short")?;
        let metadata_len = u16_at(buf, at + 6)? as usize;
        let mask = u64_at(buf, at + 8)?;
        if version != FANOTIFY_METADATA_VERSION {
            return Err("unknown fanotify metadata version");
        }
        if event_len < metadata_len || metadata_len < 24 || at + event_len > buf.len() {
            return Err("event length out of bounds");
        }
        if mask & FAN_Q_OVERFLOW != 0 {
            events.overflow = true;
        }
        // Info records: header (info_type u8, pad u8, len u16), then for a mount the u64 id ending the record.
        let end = at + event_len;
        let mut record = at + metadata_len;
        while record < end {
            let kind = buf[record];
            let len = u16_at(buf, record + 2)? as usize;
            if len < 4 || record + len > end {
                return Err("record length out of bounds");
            }
            if kind == FAN_EVENT_INFO_TYPE_MNT {
                if len < 12 {
                    return Err("mount record too short");
                }
                events.ids.push(u64_at(buf, record + len - 8)?);
            }
            record += len;
        }
        at = end;
    }
    Ok(())
}

fn u16_at(buf: &[u8], at: usize) -> Result<u16, &'static str> {
    let bytes = buf.get(at..at + 2).ok_or("buffer cut short")?;
    Ok(u16::from_ne_bytes(bytes.try_into().expect("two bytes")))
}

fn u32_at(buf: &[u8], at: usize) -> Result<u32, &'static str> {
    let bytes = buf
        .get(at..at + 4)
        .ok_or("answer shorter than struct statmount")?;
    Ok(u32::from_ne_bytes(bytes.try_into().expect("four bytes")))
}

fn u64_at(buf: &[u8], at: usize) -> Result<u64, &'static str> {
    let bytes = buf
        .get(at..at + 8)
        .ok_or("answer shorter than struct statmount")?;
    Ok(u64::from_ne_bytes(bytes.try_into().expect("eight bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `struct statmount` with `strings` laid out after the fixed part; `fields` are (offset, value) of u32 string
    /// offsets, which the builder fills in.
    struct Answer {
        buf: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Answer {
        fn new(mask: u64) -> Answer {
            let mut answer = Answer {
                buf: vec![0; STRINGS],
                strings: Vec::new(),
            };
            answer.put64(8, mask);
            answer
        }
        fn put32(&mut self, at: usize, value: u32) -> &mut Self {
            self.buf[at..at + 4].copy_from_slice(&value.to_ne_bytes());
            self
        }
        fn put64(&mut self, at: usize, value: u64) -> &mut Self {
            self.buf[at..at + 8].copy_from_slice(&value.to_ne_bytes());
            self
        }
        fn string(&mut self, at: usize, value: &[u8]) -> &mut Self {
            let offset = self.strings.len() as u32;
            self.strings.extend_from_slice(value);
            self.strings.push(0);
            self.put32(at, offset)
        }
        fn bytes(&self) -> Vec<u8> {
            let mut all = self.buf.clone();
            all.extend_from_slice(&self.strings);
            all
        }
    }

    fn tmpfs_answer() -> Answer {
        let mut a = Answer::new(MASK);
        a.put32(16, 0)
            .put32(20, 52)
            .put64(40, 0x1_0000_0042)
            .put32(56, 812)
            .put32(60, 30)
            .put64(64, ATTR_NOSUID | ATTR_NODEV)
            .put64(72, MS_SHARED)
            .put64(80, 7)
            .string(4, b"size=1024k,inode64")
            .string(36, b"tmpfs")
            .string(120, b"")
            .string(104, b"/")
            .string(108, b"/mnt/disks/with space")
            .string(124, b"vol1");
        a
    }

    #[test]
    fn an_answer_reads_as_the_mountinfo_line_of_the_same_mount() {
        let entry = parse(&tmpfs_answer().bytes()).unwrap();
        let line = b"812 30 0:52 / /mnt/disks/with\\040space rw,nosuid,nodev,relatime shared:7 - tmpfs vol1 rw,size=1024k,inode64\n";
        let table = super::super::MountTable::parse(line).unwrap();
        assert_eq!(entry.unique_id, Some(0x1_0000_0042));
        let spelled = MountEntry {
            unique_id: None,
            ..entry
        };
        assert_eq!(
            spelled, *table.entries[0],
            "as mountinfo spells it, the unique id aside"
        );
    }

    #[test]
    fn flags_and_propagation_are_spelled_in_the_kernels_order() {
        let attr = ATTR_RDONLY | ATTR_NOEXEC | ATTR_NOATIME | ATTR_NODIRATIME | ATTR_NOSYMFOLLOW;
        assert_eq!(
            mount_options(attr),
            "ro,noexec,noatime,nodiratime,nosymfollow"
        );
        assert_eq!(mount_options(0x20), "rw", "strictatime is not shown");
        assert_eq!(
            optional_fields(MS_SHARED | MS_SLAVE | MS_UNBINDABLE, 3, 4, Some(5)),
            ["shared:3", "master:4", "propagate_from:5", "unbindable"]
        );
        assert_eq!(optional_fields(MS_SLAVE, 0, 4, Some(4)), ["master:4"]);
        assert_eq!(super_options(SB_RDONLY | SB_LAZYTIME, b""), "ro,lazytime");
    }

    #[test]
    fn a_subtype_joins_the_type_and_strings_not_reported_read_empty() {
        let mut a = tmpfs_answer();
        a.string(36, b"fuse").string(120, b"sshfs");
        let entry = parse(&a.bytes()).unwrap();
        assert_eq!(entry.fs_type, "fuse.sshfs");
        let mut a = tmpfs_answer();
        a.put64(8, MASK & !(SB_SOURCE | MNT_OPTS | FS_SUBTYPE));
        let entry = parse(&a.bytes()).unwrap();
        assert_eq!(
            (
                entry.fs_type.as_str(),
                entry.source.as_str(),
                entry.super_options.as_str()
            ),
            ("tmpfs", "none", "rw")
        );
    }

    /// One event as the kernel lays it out: metadata, then one mount record.
    fn event(mask: u64, id: u64) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&40u32.to_ne_bytes());
        e.extend_from_slice(&[FANOTIFY_METADATA_VERSION, 0]);
        e.extend_from_slice(&24u16.to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&0i32.to_ne_bytes());
        e.extend_from_slice(&[FAN_EVENT_INFO_TYPE_MNT, 0]);
        e.extend_from_slice(&16u16.to_ne_bytes());
        e.extend_from_slice(&[0; 4]);
        e.extend_from_slice(&id.to_ne_bytes());
        e
    }

    #[test]
    fn mount_events_name_each_mount_and_an_overflow() {
        let mut buf = event(0x0100_0000, 11);
        buf.extend(event(0x0300_0000, 12));
        let mut overflow = event(FAN_Q_OVERFLOW, 0);
        overflow.truncate(24);
        overflow[0..4].copy_from_slice(&24u32.to_ne_bytes());
        buf.extend(overflow);
        let mut events = MountEvents::default();
        mount_events(&buf, &mut events).unwrap();
        assert_eq!(events.ids, [11, 12]);
        assert!(events.overflow);
    }

    #[test]
    fn a_malformed_event_buffer_is_refused() {
        let good = event(0x0100_0000, 11);
        let mut events = MountEvents::default();
        assert!(
            mount_events(&good[..30], &mut events).is_err(),
            "cut inside the event"
        );
        let mut bad = good.clone();
        bad[26..28].copy_from_slice(&40u16.to_ne_bytes());
        assert!(
            mount_events(&bad, &mut events).is_err(),
            "record past the event"
        );
        let mut bad = good.clone();
        bad[4] = 2;
        assert!(mount_events(&bad, &mut events).is_err(), "unknown version");
    }

    #[test]
    fn a_short_or_incomplete_answer_is_refused() {
        let full = tmpfs_answer().bytes();
        assert!(parse(&full[..100]).is_err(), "cut inside the fixed part");
        assert!(
            parse(&full[..STRINGS + 3]).is_err(),
            "cut inside the strings"
        );
        let mut a = tmpfs_answer();
        a.put64(8, MASK & !MNT_POINT);
        assert!(parse(&a.bytes()).is_err(), "no mount point reported");
        let mut a = tmpfs_answer();
        a.put32(108, 1 << 30);
        assert!(parse(&a.bytes()).is_err(), "offset past the end");
    }
}
