//! A memory cgroup of the test's own, to run a component at the chart's memory limit and tell whether it was
//! OOM-killed: cgroup v2 (`memory.max`, `memory.events`) where the memory controller is on the unified hierarchy,
//! else v1 (`memory.limit_in_bytes`, `memory.oom_control`). Processes are moved out and it is removed on drop.

use std::path::{Path, PathBuf};

pub struct MemCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemCgroup {
    /// A new cgroup limited to `limit` bytes; fails the test, saying what is missing, without a memory controller.
    pub fn new(limit: u64) -> MemCgroup {
        let unified = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(unified.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let root = if v2 {
            unified.to_path_buf()
        } else {
            unified.join("memory")
        };
        assert!(
            root.join("cgroup.procs").exists(),
            "no memory cgroup controller (neither cgroup v2 at {} nor v1 at {}): this test needs one",
            unified.display(),
            root.display()
        );
        if v2 {
            // NB: a child gets `memory.max` only when its parent hands the controller down; often already on.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
        }
        let dir = root.join(format!("localpv-test-{}", super::cluster::unique()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("failed to create {}: {e}", dir.display()));
        let cg = MemCgroup { dir, v2 };
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        cg.write(file, &limit.to_string());
        cg
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value).unwrap_or_else(|e| {
            panic!(
                "failed to write {value} to {}/{file}: {e}",
                self.dir.display()
            )
        });
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// Moves process `pid` into the cgroup.
    pub fn add(&self, pid: u32) {
        self.write("cgroup.procs", &pid.to_string());
    }

    /// OOM kills inside the cgroup so far.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(file)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The most memory the cgroup has used, in MiB (0 where the kernel does not say).
    pub fn max_usage_mib(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse::<u64>().unwrap_or(0) >> 20
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let parent = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for pid in self.read("cgroup.procs").lines() {
            if let Some(parent) = &parent {
                let _ = std::fs::write(parent, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
