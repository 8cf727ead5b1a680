//! Parser for `/proc/self/mountinfo` (see proc(5)): the mount table as this process's mount namespace sees it.
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! |  |  |    |     |     |          |        | |    |         super options
//! |  |  |    |     |     |          |        | |    source
//! |  |  |    |     |     |          |        | filesystem type
//! |  |  |    |     |     |          |        separator
//! |  |  |    |     |     |          optional fields (zero or more)
//! |  |  |    |     |     per-mount options
//! |  |  |    |     mount point (relative to this process's root)
//! |  |  |    root of the mount inside its filesystem ("/" unless a sub-directory was bind-mounted)
//! |  |  major:minor of the filesystem's device (major 0: no block device, e.g. tmpfs)
//! |  parent mount id
//! mount id
//! ```
//!
//! Pure: bytes in, [`MountTable`] out. The kernel escapes space, tab, newline and backslash in paths as `\ooo`
//! octal; other bytes (including non-UTF-8 ones) appear as they are, so paths are decoded from bytes.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::contract::DevId;

/// One line of mountinfo.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MountEntry {
    /// mountinfo's id: the kernel hands a freed one to the next mount, so an unmount and a mount between two reads
    /// can show a different filesystem under the same id, device and path.
    pub mount_id: u32,
    /// The mount's 64-bit id (Linux 6.8+), never reused while the system runs; `None` when the table was read from
    /// mountinfo, which does not show it. What tells a filesystem mounted again apart from the one it replaced.
    pub unique_id: Option<u64>,
    pub parent_id: u32,
    pub dev: DevId,
    /// Directory of the filesystem that is visible at the mount point (`/` for a whole filesystem).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub mount_options: String,
    /// Tagged fields such as `shared:1` or `master:2`.
    pub optional_fields: Vec<String>,
    pub fs_type: String,
    /// Filesystem-specific source, e.g. `/dev/loop0`, `tmpfs`, `server:/export`.
    pub source: String,
    pub super_options: String,
}

/// The whole table, in the kernel's order (parents before children, later mounts after earlier ones). Entries are
/// shared: what discovery keeps of a mount points at the parsed line instead of copying it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountTable {
    pub entries: Vec<Arc<MountEntry>>,
}

#[derive(Debug, thiserror::Error)]
pub enum MountInfoError {
    #[error("failed to parse mountinfo line {line}: {problem}")]
    ParseLine { line: usize, problem: &'static str },
}

impl MountTable {
    /// Whether every entry carries the kernel's unique mount id (read with the mount API, not from mountinfo).
    pub fn ids_unique(&self) -> bool {
        !self.entries.is_empty() && self.entries.iter().all(|e| e.unique_id.is_some())
    }

    /// Parse the full text of a mountinfo file. One malformed line fails the whole table: silently skipping it
    /// could hide a mount, and a hidden mount looks exactly like a disk that went away.
    pub fn parse(text: &[u8]) -> Result<Self, MountInfoError> {
        let entries = text
            .split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
            .map(|(index, line)| {
                parse_line(line)
                    .map(Arc::new)
                    .map_err(|problem| MountInfoError::ParseLine {
                        line: index + 1,
                        problem,
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(MountTable { entries })
    }

    /// The mount visible at exactly `path`, if any. When several mounts are stacked on one path, the one listed
    /// last is on top and is the one a lookup of the path reaches.
    pub fn mount_at(&self, path: &Path) -> Option<&MountEntry> {
        self.entries
            .iter()
            .rev()
            .find(|entry| entry.mount_point == path)
            .map(|entry| &**entry)
    }

    /// Mount points strictly beneath `path` (spelled as the table spells mount points: resolve symlinks first),
    /// sorted. A mount placed inside a volume hides whatever is under it from a wipe.
    pub fn mounts_below(&self, path: &Path) -> Vec<PathBuf> {
        let mut below: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|entry| entry.mount_point != path && entry.mount_point.starts_with(path))
            .map(|entry| entry.mount_point.clone())
            .collect();
        below.sort();
        below.dedup();
        below
    }
}

fn parse_line(line: &[u8]) -> Result<MountEntry, &'static str> {
    let mut fields = line.split(|&b| b == b' ');
    let mut next = |what: &'static str| fields.next().filter(|f| !f.is_empty()).ok_or(what);
    let mount_id = number(next("missing mount id")?).ok_or("mount id is not a number")?;
    let parent_id = number(next("missing parent id")?).ok_or("parent id is not a number")?;
    let dev = std::str::from_utf8(next("missing major:minor")?)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("major:minor is malformed")?;
    let root = unescape_path(next("missing root")?);
    let mount_point = unescape_path(next("missing mount point")?);
    let mount_options = text(next("missing mount options")?);
    let mut optional_fields = Vec::new();
    loop {
        let field = next("missing '-' separator")?;
        if field == b"-" {
            break;
        }
        optional_fields.push(text(field));
    }
    let fs_type = text(next("missing filesystem type")?);
    // NB: the source may legitimately be empty on some filesystems, which shows up as two adjacent spaces.
    let (source, super_options) = match (fields.next(), fields.next(), fields.next()) {
        (Some(source), Some(super_options), None) => (source, super_options),
        _ => return Err("expected source and super options after the filesystem type"),
    };
    Ok(MountEntry {
        mount_id,
        unique_id: None,
        parent_id,
        dev,
        root,
        mount_point,
        mount_options,
        optional_fields,
        fs_type,
        source: text(&unescape(source)),
        super_options: text(super_options),
    })
}

fn number(field: &[u8]) -> Option<u32> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(field).into_owned()
}

fn unescape_path(field: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&unescape(field)))
}

/// Decode `\ooo` octal escapes; a backslash not followed by three octal digits is kept as it is. Borrowed when
/// there is no backslash (nearly always).
fn unescape(field: &[u8]) -> Cow<'_, [u8]> {
    if !field.contains(&b'\\') {
        return Cow::Borrowed(field);
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if let Some(byte) = octal_escape(&field[i..]) {
            out.push(byte);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    Cow::Owned(out)
}

fn octal_escape(bytes: &[u8]) -> Option<u8> {
    match bytes {
        [b'\\', digits @ ..] if digits.len() >= 3 => {
            let digits = &digits[..3];
            if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                return None;
            }
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            u8::try_from(value).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const SAMPLE: &str = "\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 0:27 / /mnt/disks/vol1 rw,relatime shared:12 - tmpfs tmpfs rw,size=1024k
31 22 7:0 / /mnt/disks/with\\040space rw shared:13 - ext4 /dev/loop0 rw
32 22 7:0 /data/sub /mnt/disks/bound rw shared:13 - ext4 /dev/loop0 rw
33 22 0:28 / /mnt/disks/stacked rw - tmpfs first rw
34 33 0:29 / /mnt/disks/stacked rw - tmpfs second rw
35 22 0:30 / /mnt/no-optional rw - proc proc rw
";

    fn sample() -> MountTable {
        MountTable::parse(SAMPLE.as_bytes()).expect("sample parses")
    }

    #[rstest]
    #[case::a_volume_without_mounts_inside("/mnt/disks/vol1", vec![])]
    #[case::the_discovery_directory("/mnt/disks", vec!["/mnt/disks/bound", "/mnt/disks/stacked", "/mnt/disks/vol1", "/mnt/disks/with space"])]
    #[case::a_sibling_with_a_common_prefix_is_not_inside("/mnt/disks/vol", vec![])]
    fn mounts_below_lists_only_mount_points_strictly_inside(
        #[case] path: &str,
        #[case] expected: Vec<&str>,
    ) {
        let expected: Vec<PathBuf> = expected.into_iter().map(PathBuf::from).collect();
        assert_eq!(sample().mounts_below(Path::new(path)), expected);
    }

    #[test]
    fn every_line_of_a_well_formed_table_becomes_an_entry() {
        let table = sample();
        assert_eq!(table.entries.len(), 7);
        let first = &table.entries[0];
        assert_eq!(first.mount_id, 22);
        assert_eq!(first.parent_id, 1);
        assert_eq!(first.dev, DevId::new(253, 1));
        assert_eq!(first.root, Path::new("/"));
        assert_eq!(first.mount_point, Path::new("/"));
        assert_eq!(first.mount_options, "rw,relatime");
        assert_eq!(first.optional_fields, vec!["shared:1".to_string()]);
        assert_eq!(first.fs_type, "ext4");
        assert_eq!(first.source, "/dev/vda1");
        assert_eq!(first.super_options, "rw");
    }

    #[rstest]
    #[case::whole_filesystem("/mnt/disks/vol1", Some((30, "/", "tmpfs")))]
    #[case::escaped_space_in_mount_point("/mnt/disks/with space", Some((31, "/", "ext4")))]
    #[case::bind_mount_of_a_sub_directory("/mnt/disks/bound", Some((32, "/data/sub", "ext4")))]
    #[case::stacked_mounts_the_last_one_wins("/mnt/disks/stacked", Some((34, "/", "tmpfs")))]
    #[case::no_optional_fields("/mnt/no-optional", Some((35, "/", "proc")))]
    #[case::plain_directory("/mnt/disks", None)]
    #[case::escape_is_not_literal("/mnt/disks/with\\040space", None)]
    fn mount_at_finds_the_mount_visible_at_a_path(
        #[case] path: &str,
        #[case] expected: Option<(u32, &str, &str)>,
    ) {
        let table = sample();
        let found = table.mount_at(Path::new(path));
        let found = found.map(|m| {
            (
                m.mount_id,
                m.root.to_str().expect("utf-8"),
                m.fs_type.as_str(),
            )
        });
        assert_eq!(found, expected);
    }

    #[rstest]
    #[case::space(b"a\\040b", b"a b")]
    #[case::tab(b"a\\011b", b"a\tb")]
    #[case::newline(b"a\\012b", b"a\nb")]
    #[case::backslash(b"a\\134b", b"a\\b")]
    #[case::not_octal(b"a\\09b", b"a\\09b")]
    #[case::too_short(b"a\\04", b"a\\04")]
    #[case::trailing_backslash(b"a\\", b"a\\")]
    #[case::raw_non_utf8_byte(b"a\xffb", b"a\xffb")]
    fn octal_escapes_are_decoded(#[case] raw: &[u8], #[case] decoded: &[u8]) {
        assert_eq!(unescape(raw), decoded);
    }

    #[test]
    fn an_empty_source_is_accepted() {
        let table =
            MountTable::parse(b"40 22 0:40 / /mnt/x rw - fuse.thing  rw\n").expect("parses");
        assert_eq!(table.entries[0].source, "");
        assert_eq!(table.entries[0].fs_type, "fuse.thing");
        assert_eq!(table.entries[0].super_options, "rw");
    }

    #[rstest]
    #[case::missing_separator(
        "22 1 253:1 / / rw shared:1 ext4 /dev/vda1 rw",
        "missing '-' separator"
    )]
    #[case::bad_dev("22 1 2531 / / rw - ext4 /dev/vda1 rw", "major:minor is malformed")]
    #[case::bad_id("x 1 253:1 / / rw - ext4 /dev/vda1 rw", "mount id is not a number")]
    #[case::truncated("22 1 253:1 / /", "missing mount options")]
    #[case::missing_super_options(
        "22 1 253:1 / / rw - ext4 /dev/vda1",
        "expected source and super options"
    )]
    fn a_malformed_line_fails_the_table_naming_the_line(#[case] bad: &str, #[case] problem: &str) {
        let text = format!(
            "{}\n{bad}\n",
            SAMPLE.lines().next().expect("sample has lines")
        );
        let err = MountTable::parse(text.as_bytes()).expect_err("malformed line");
        let message = err.to_string();
        assert!(message.contains("line 2"), "{message}");
        assert!(message.contains(problem), "{message}");
    }

    #[test]
    fn a_non_utf8_mount_point_is_kept_byte_for_byte() {
        let table =
            MountTable::parse(b"40 22 0:40 / /mnt/\xff rw - tmpfs tmpfs rw\n").expect("parses");
        assert_eq!(
            table.entries[0].mount_point.as_os_str().as_bytes(),
            b"/mnt/\xff"
        );
    }

    #[rstest]
    #[case("8:1", Some(DevId::new(8, 1)))]
    #[case("0:27", Some(DevId::new(0, 27)))]
    #[case("8", None)]
    #[case("a:1", None)]
    fn dev_ids_round_trip_through_text(#[case] text: &str, #[case] parsed: Option<DevId>) {
        assert_eq!(text.parse::<DevId>().ok(), parsed);
        if let Some(dev) = parsed {
            assert_eq!(dev.to_string(), text);
        }
    }
}
