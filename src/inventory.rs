//! The disk inventory: one cluster-scoped `LocalDisk` per entry a node agent finds, usable or not, saying what
//! became of it (published, bound, being wiped, unusable and why, missing).
//!
//! ```text
//!  node agent pass: Discovery, Plan.unpublished, PVs, ledger, wipes ──┐
//!  this node's LocalDisks (+ others' fetched by names_to_look_up)   ──┴─> build::build (pure) ─> Changes
//!                                                                         (Create / Apply / MarkMissing / Delete)
//!  localpv disks: list LocalDisks (cli, kubeconfig) ─> format::select + format::render (pure) ─> stdout
//! ```
//!
//! - `crd`: the resource types and the generated CRD (`localpv crd`).
//! - `naming`: object names from stable identity (`fs-<uuid>`, else node + path).
//! - `build`, `status`: the agent's pure decision; `status` holds the phase rules and the no-op comparison;
//!   `inputs`: what both read (one pass's findings, settings, wipe samples), so neither imports the other.
//! - `format`: tables, summary, JSON/YAML; `cli`: `localpv disks` (the only part that talks to the API server).

pub mod build;
pub mod crd;
pub mod format;
pub mod incremental;
pub mod inputs;
pub mod naming;
pub mod notices;
pub mod reason;
pub mod relation;
pub mod status;

pub use build::{Change, Changes, build, names_to_look_up};
pub use crd::{LocalDisk, LocalDiskPhase, LocalDiskSpec, LocalDiskStatus, crd, crd_yaml};
pub use inputs::{Inputs, Settings, WipeFailures, WipeSample};
