//! Which unusable entries deserve a log line: one warning when an entry first becomes unusable, or its reason or
//! message changes, not one per pass. Pure: the agent keeps a [`Notices`] for its lifetime and logs what
//! [`Notices::changed`] returns (a restarted agent logs every current problem once again, so the newest pod's log
//! always lists them).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::disk::Unusable;

/// What was last reported per host path.
#[derive(Clone, Debug, Default)]
pub struct Notices {
    reported: BTreeMap<PathBuf, (String, String)>,
}

impl Notices {
    /// The entries of this pass that were not unusable for the same reason and message in the previous one.
    /// Entries no longer unusable are forgotten, so a problem that comes back is reported again.
    pub fn changed<'a>(&mut self, unusable: &'a [Unusable]) -> Vec<&'a Unusable> {
        let mut now = BTreeMap::new();
        let mut out = Vec::new();
        for entry in unusable {
            let said = (entry.reason.as_str().to_string(), entry.message.clone());
            if self.reported.get(&entry.host_path) != Some(&said) {
                out.push(entry);
            }
            now.insert(entry.host_path.clone(), said);
        }
        self.reported = now;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::UnusableReason;

    fn entry(path: &str, reason: UnusableReason) -> Unusable {
        Unusable {
            class: "local".into(),
            entry: path.rsplit('/').next().unwrap_or(path).into(),
            host_path: path.into(),
            reason,
            message: format!("{path}: {}", reason.as_str()),
        }
    }

    #[test]
    fn an_unusable_entry_is_reported_once_then_again_when_its_reason_changes_or_it_returns() {
        let mut notices = Notices::default();
        let stray = entry("/mnt/disks/stray", UnusableReason::NotAMountPoint);
        let file = entry("/mnt/disks/file", UnusableReason::NotADiskEntry);
        let first = [stray.clone(), file.clone()];
        assert_eq!(notices.changed(&first).len(), 2);
        assert!(
            notices.changed(&first).is_empty(),
            "a second pass repeats nothing"
        );
        let probe = entry("/mnt/disks/stray", UnusableReason::ProbeFailed);
        let changed = [probe.clone(), file.clone()];
        assert_eq!(notices.changed(&changed), vec![&probe]);
        assert!(notices.changed(std::slice::from_ref(&file)).is_empty());
        assert_eq!(
            notices.changed(&changed),
            vec![&probe],
            "a problem that returns is reported again"
        );
    }
}
