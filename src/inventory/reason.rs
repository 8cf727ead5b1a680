//! Every `status.reason` a LocalDisk can carry, besides discovery's [`UnusableReason`]s. Each has a runbook entry
//! in docs/troubleshooting.md ("Every LocalDisk reason"); a test reads this enum's source and that page, so a new
//! reason without an entry fails.
//!
//! [`UnusableReason`]: crate::disk::UnusableReason

/// Why a LocalDisk is in its phase (stable CamelCase words: operators grep and alert on them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskReason {
    /// `Failing`: the last wipes in a row failed.
    WipeFailing,
    /// `IdentityChanged`: the PV at the path was made for another disk.
    DiskIdentityChanged,
    /// `Wiping`: a wipe runs now.
    Wiping,
    /// `Wiping`: the PV records a running wipe.
    Reclaiming,
    /// `Released`: wiped; the PV is deleted next.
    Wiped,
    /// `Released`: reclaim policy Retain keeps the data.
    Retained,
    /// `Released`/`Wiping`: the disk held a claim's data and is wiped before it is published again.
    AwaitingWipe,
    /// `Released`: the PV is `Failed`.
    PvFailed,
    /// `Available`: the PV is being deleted (its replacement comes next).
    AwaitingDeletion,
    /// `Unusable`: another PV holds the path.
    HeldByAnotherPv,
    /// `Unusable`: the class has no StorageClass.
    NoStorageClass,
    /// `Unusable`: the PV name the entry would get is taken.
    NameTaken,
    /// `Unusable`: the host path is not UTF-8 (a PV path must be).
    PathNotUtf8,
    /// `Available`: waiting for the agent's volume id on the filesystem's root; published next pass.
    AwaitingVolumeId,
    /// `Unusable`: no identity that could ever authorise a wipe; never published or wiped automatically.
    NoStableIdentity,
    /// `Unusable`: its storage nests with a PV's or another entry's (a bind mount of a sub-directory, a parent or
    /// the same root); never published or wiped while so.
    OverlappingStorage,
    /// `Unusable`: another disk answers to one of its strong ids (a copy); never published or wiped while so.
    DuplicateIdentity,
    /// `Unusable`: the disk shows signs of failing (I/O errors, a hardware warning); not handed to a new claim.
    DiskDegraded,
    /// `Unusable`: the disk failed; never handed to a new claim, never wiped.
    DiskFailed,
    /// `Unusable`: an operator cordoned it (`localpv disks cordon`); not published until uncordoned.
    Cordoned,
    /// `Unusable`: a raw device of a Filesystem class is held by another user (mounted in some mount namespace).
    DeviceInUse,
    /// `Unusable`: a PV holding a claim's data is at the path, but nothing is mounted there.
    DiskNotMounted,
    /// `Missing`: the entry is gone from its node.
    DiskNotFound,
}

impl DiskReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskReason::WipeFailing => "WipeFailing",
            DiskReason::DiskIdentityChanged => "DiskIdentityChanged",
            DiskReason::Wiping => "Wiping",
            DiskReason::Reclaiming => "Reclaiming",
            DiskReason::Wiped => "Wiped",
            DiskReason::Retained => "Retained",
            DiskReason::AwaitingWipe => "AwaitingWipe",
            DiskReason::PvFailed => "PvFailed",
            DiskReason::AwaitingDeletion => "AwaitingDeletion",
            DiskReason::HeldByAnotherPv => "HeldByAnotherPv",
            DiskReason::NoStorageClass => "NoStorageClass",
            DiskReason::NameTaken => "NameTaken",
            DiskReason::PathNotUtf8 => "PathNotUtf8",
            DiskReason::AwaitingVolumeId => "AwaitingVolumeId",
            DiskReason::NoStableIdentity => "NoStableIdentity",
            DiskReason::OverlappingStorage => "OverlappingStorage",
            DiskReason::DuplicateIdentity => "DuplicateIdentity",
            DiskReason::DiskDegraded => "DiskDegraded",
            DiskReason::DiskFailed => "DiskFailed",
            DiskReason::Cordoned => "Cordoned",
            DiskReason::DeviceInUse => "DeviceInUse",
            DiskReason::DiskNotMounted => "DiskNotMounted",
            DiskReason::DiskNotFound => "DiskNotFound",
        }
    }
}

#[cfg(test)]
mod tests {
    /// The variant names of `pub enum NAME { .. }` in `source`.
    fn variants(source: &str, name: &str) -> Vec<String> {
        let start = source
            .find(&format!("pub enum {name} {{"))
            .unwrap_or_else(|| panic!("enum {name} not found"));
        let body = &source[start..];
        let body = &body[body.find('{').expect("{") + 1..body.find("\n}").expect("}")];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.is_empty())
            .map(|l| l.trim_end_matches(',').to_string())
            .collect()
    }

    #[test]
    fn every_reason_a_local_disk_can_carry_has_a_runbook_entry() {
        let root = env!("CARGO_MANIFEST_DIR");
        let read = |p: &str| {
            std::fs::read_to_string(format!("{root}/{p}")).unwrap_or_else(|e| panic!("{p}: {e}"))
        };
        let runbook = read("docs/troubleshooting.md");
        let runbook = &runbook[runbook
            .find("## Every LocalDisk reason")
            .expect("docs/troubleshooting.md has the section \"Every LocalDisk reason\"")..];
        let mut reasons = variants(&read("src/inventory/reason.rs"), "DiskReason");
        reasons.extend(variants(&read("src/disk.rs"), "UnusableReason"));
        assert!(reasons.len() > 15, "{reasons:?}");
        let missing: Vec<&String> = reasons
            .iter()
            .filter(|r| !runbook.contains(&format!("| `{r}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "no runbook row in docs/troubleshooting.md for {missing:?}"
        );
    }

    #[test]
    fn the_source_scan_finds_every_variant_in_order() {
        use super::DiskReason;
        let names = variants(include_str!("reason.rs"), "DiskReason");
        assert_eq!(
            names.first().map(String::as_str),
            Some(DiskReason::WipeFailing.as_str())
        );
        assert_eq!(
            names.last().map(String::as_str),
            Some(DiskReason::DiskNotFound.as_str())
        );
        assert_eq!(names.len(), 23);
    }
}
