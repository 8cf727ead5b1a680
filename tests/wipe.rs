//! The wipe engine on real mounts and loop devices. Runs as root: it mounts tmpfs and ext4, attaches loop devices
//! and sets immutable flags, each undone by a Drop guard (`localpv_test_support::disks`, `wipe/fixtures.rs`).

#[path = "wipe/block.rs"]
mod block;
use localpv_test_support::disks;
#[path = "wipe/filesystem.rs"]
mod filesystem;
#[path = "wipe/fixtures.rs"]
mod fixtures;
#[path = "wipe/identity.rs"]
mod identity;
