//! The reference chart's values files in groups, with what the reference provisioner publishes for each group's
//! disks: the data `reference_examples` runs (see there for where it comes from).

pub(super) const DEV_DIR: &str = "/dev/disk/kubernetes";

/// What the reference provisioner publishes for one entry of a class's `hostDir`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Publishes {
    /// A Filesystem PV, with this `local.fsType`.
    Filesystem(Option<&'static str>),
    Block,
    /// No PV: the reference's discovery error says why; localpv's LocalDisk gives the reason after it.
    Nothing(&'static str, &'static str),
}

/// What the test puts at an entry on the node.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// A tmpfs mounted there.
    Tmpfs,
    /// A symlink to a raw loop device.
    Device,
    /// A plain directory, no mount.
    Dir,
}

pub(super) struct Disk {
    pub(super) node: &'static str,
    pub(super) class: &'static str,
    pub(super) entry: &'static str,
    pub(super) kind: Kind,
    pub(super) publishes: Publishes,
}

pub(super) struct Class {
    pub(super) name: &'static str,
    pub(super) host_dir: &'static str,
    pub(super) reclaim: &'static str,
}

pub(super) struct Group {
    pub(super) name: &'static str,
    /// The files (under the tarball's `helm/`), merged in this order, later ones winning.
    pub(super) files: &'static [&'static str],
    /// The StorageClasses to delete before the upgrade: a field the API server will not update (provisioner,
    /// reclaimPolicy) differs from the group before.
    pub(super) recreate: &'static [&'static str],
    /// The group's classes, as its files render them.
    pub(super) classes: &'static [Class],
    /// `None`: the previous group's disks and PVs stay (same classes, same disks).
    pub(super) disks: Option<&'static [Disk]>,
}

pub(super) const fn disk(
    node: &'static str,
    class: &'static str,
    entry: &'static str,
    kind: Kind,
    publishes: Publishes,
) -> Disk {
    Disk {
        node,
        class,
        entry,
        kind,
        publishes,
    }
}

pub(super) const NOT_MOUNTED: Publishes =
    Publishes::Nothing("is not a valid mount point", "NotAMountPoint");
pub(super) const FS_IN_BLOCK: Publishes = Publishes::Nothing(
    "of filesystem mode cannot be used to create block volume",
    "WrongVolumeMode",
);
pub(super) const FS: Publishes = Publishes::Filesystem(None);

/// Disks come in list order: those that publish nothing first, so the pass that publishes the last PV has seen them.
pub(super) const BAREMETAL_DISKS: &[Disk] = &[
    disk("node-2", "local-storage", "a-fs", Kind::Tmpfs, FS_IN_BLOCK),
    disk(
        "node-1",
        "local-storage",
        "a-1",
        Kind::Device,
        Publishes::Block,
    ),
    disk(
        "node-1",
        "local-storage",
        "a-2",
        Kind::Device,
        Publishes::Block,
    ),
    disk(
        "node-2",
        "local-storage",
        "a-1",
        Kind::Device,
        Publishes::Block,
    ),
];

pub(super) const LOCAL_STORAGE: &[Class] = &[Class {
    name: "local-storage",
    host_dir: "/mnt/disks",
    reclaim: "Delete",
}];
pub(super) const LOCAL_SCSI: &[Class] = &[Class {
    name: "local-scsi",
    host_dir: "/mnt/disks",
    reclaim: "Delete",
}];

pub(super) const GROUPS: &[Group] = &[
    // A Block class over /mnt/disks, cleaned by shred; the files differ only in pod settings, applied together
    // (priorityClassName: the last file's wins).
    Group {
        name: "baremetal, shred",
        files: &[
            "examples/baremetal.yaml",
            "examples/baremetal-affinity.yaml",
            "examples/baremetal-nodeselector.yaml",
            "examples/baremetal-tolerations.yaml",
            "examples/baremetal-with-resource-limits.yaml",
            "examples/baremetal-prometheus.yaml",
            "examples/baremetal-priority-critical.yaml",
            "examples/baremetal-priority-noncritical.yaml",
        ],
        recreate: &[],
        classes: LOCAL_STORAGE,
        disks: Some(BAREMETAL_DISKS),
    },
    // The same class cleaned by quick_reset.sh; one file names another provisioner in the StorageClass, one
    // creates no RBAC (the test applies what an operator would), one cleans by Jobs, one resyncs hourly.
    Group {
        name: "baremetal, quick_reset",
        files: &[
            "examples/baremetal-cleanbyjobs.yaml",
            "examples/baremetal-resyncperiod.yaml",
            "examples/baremetal-without-rbac.yaml",
            "examples/baremetal-provisioner.yaml",
        ],
        recreate: &["local-storage"],
        classes: LOCAL_STORAGE,
        disks: None,
    },
    Group {
        name: "baremetal-default-storage",
        files: &["examples/baremetal-default-storage.yaml"],
        recreate: &["local-storage"],
        classes: LOCAL_STORAGE,
        disks: Some(&[
            disk("node-2", "local-storage", "c-plain", Kind::Dir, NOT_MOUNTED),
            disk("node-1", "local-storage", "c-1", Kind::Tmpfs, FS),
            disk("node-1", "local-storage", "c-2", Kind::Tmpfs, FS),
            disk("node-2", "local-storage", "c-1", Kind::Tmpfs, FS),
        ]),
    },
    // `fsType: ""` and no fsType are the same class; a raw device there is a Filesystem PV for the kubelet to format.
    Group {
        name: "development, gke",
        files: &[
            "examples/development-gce.yaml",
            "examples/development-gke.yaml",
            "examples/gke.yaml",
        ],
        recreate: &[],
        classes: LOCAL_SCSI,
        disks: Some(&[
            disk("node-1", "local-scsi", "d-1", Kind::Tmpfs, FS),
            disk("node-2", "local-scsi", "d-1", Kind::Tmpfs, FS),
            disk("node-2", "local-scsi", "d-dev", Kind::Device, FS),
        ]),
    },
    Group {
        name: "gce",
        files: &["examples/gce.yaml"],
        recreate: &[],
        classes: &[
            Class {
                name: "local-scsi",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-scsi-fs",
                reclaim: "Delete",
            },
            Class {
                name: "local-nvme",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-nvme-fs",
                reclaim: "Delete",
            },
        ],
        disks: Some(&[
            disk("node-1", "local-scsi", "e-ssd0", Kind::Tmpfs, FS),
            disk("node-1", "local-nvme", "e-nvme0", Kind::Tmpfs, FS),
            disk("node-2", "local-nvme", "e-nvme0", Kind::Tmpfs, FS),
        ]),
    },
    Group {
        name: "gce-retain",
        files: &["examples/gce-retain.yaml"],
        recreate: &["local-scsi", "local-nvme"],
        classes: &[
            Class {
                name: "local-scsi",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-scsi-fs",
                reclaim: "Retain",
            },
            Class {
                name: "local-nvme",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-nvme-fs",
                reclaim: "Retain",
            },
        ],
        disks: Some(&[
            disk("node-1", "local-scsi", "r-ssd0", Kind::Tmpfs, FS),
            disk("node-2", "local-nvme", "r-nvme0", Kind::Tmpfs, FS),
        ]),
    },
    // The RAID the GKE example's DaemonSet builds is mounted at /mnt/disks/raid/0.
    Group {
        name: "gke-nvme-ssd-block-raid",
        files: &["examples/gke-nvme-ssd-block-raid.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "nvme-ssd-block",
            host_dir: "/mnt/disks/raid",
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-1", "nvme-ssd-block", "0", Kind::Tmpfs, FS),
            disk("node-2", "nvme-ssd-block", "0", Kind::Tmpfs, FS),
        ]),
    },
    Group {
        name: "eks-nvme-ssd",
        files: &["examples/eks-nvme-ssd.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "nvme-ssd",
            host_dir: DEV_DIR,
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-1", "nvme-ssd", "nvme-1", Kind::Device, FS),
            disk("node-1", "nvme-ssd", "nvme-2", Kind::Device, FS),
            disk("node-2", "nvme-ssd", "nvme-1", Kind::Device, FS),
        ]),
    },
    // The chart's defaults: `fsType: ext4` goes on every PV of the class, a mount point's too.
    Group {
        name: "values.yaml",
        files: &["provisioner/values.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "fast-disks",
            host_dir: "/mnt/fast-disks",
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-2", "fast-disks", "h-plain", Kind::Dir, NOT_MOUNTED),
            disk(
                "node-1",
                "fast-disks",
                "h-1",
                Kind::Tmpfs,
                Publishes::Filesystem(Some("ext4")),
            ),
            disk(
                "node-2",
                "fast-disks",
                "h-1",
                Kind::Tmpfs,
                Publishes::Filesystem(Some("ext4")),
            ),
            disk(
                "node-2",
                "fast-disks",
                "h-dev",
                Kind::Device,
                Publishes::Filesystem(Some("ext4")),
            ),
        ]),
    },
];

/// Examples no group installs on real nodes, and why (docs/migration.md's table says which group proves them).
pub(super) const NOT_INSTALLED: &[&str] = &[
    // Its init container runs /etc/init/run.sh from a ConfigMap volume without `defaultMode`, so mode 0644: it can
    // never execute, under either chart. Its classes are the chart's defaults, as in "baremetal-default-storage".
    "examples/additional-volumes.yaml",
];
