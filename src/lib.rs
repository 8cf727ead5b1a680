//! localpv: local persistent volumes for Kubernetes.
//!
//! ```text
//!  host (mounts, block devices)          kube-apiserver                      kube-scheduler
//!        |  host::Host (trait)              ^    |  watch (own node only)           | POST /filter, /prioritize
//!        v                                  |    v                                  v
//!  discover ──> disk::Discovery ──> plan (pure) ──> Actions ──> agent executor
//!                                                  watch store ──> extender::snapshot ──> extender::decide (pure)
//! ```
//!
//! Pure decision modules (`contract`, `disk`, `config`, `pvname`, `quantity`, `selector`, `plan`, `health`,
//! `recovery`, `lease`, `cleanup`, `extender::decide`, `extender::wire`, `host::mountinfo`) import no tokio, kube
//! client, axum or nix; the shells around them gather inputs, call them and apply what they return.
//! docs/architecture.md has the whole data flow and a table of the modules.

// NB: `forbid` cannot be relaxed for the one module that issues ioctls (`sys`), so the crate denies unsafe code
// and `sys` alone allows it, with every block commented.
#![deny(unsafe_code)]

pub mod agent;
pub mod apiclient;
pub mod cleanup;
pub mod config;
pub mod contract;
pub mod controller;
pub mod discover;
pub mod disk;
pub mod disks_cli;
pub mod effects;
pub mod explain;
pub mod extender;
pub mod fasthash;
pub mod health;
pub mod host;
pub mod inventory;
pub mod lease;
pub mod logging;
pub mod plan;
pub mod pvname;
pub mod quantity;
pub mod recovery;
pub mod selector;
pub mod serve;
#[cfg(feature = "node")]
pub mod sys;
pub mod telemetry;
pub mod watch;
#[cfg(feature = "node")]
pub mod wipe;
