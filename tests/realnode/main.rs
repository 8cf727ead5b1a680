//! The real-node tier: two real nodes (containerd, runc, kubelet) on this machine, the chart installed with helm so
//! the node agent runs only as the DaemonSet's pods, and real pods that mount, write and read the volumes it
//! publishes. See `support::realnode` for the harness and docs/testing.md for what it needs and costs.

use localpv_test_support as support;

mod common;
mod demo;
mod eks;
mod extender;
mod harness;
mod lifecycle;
mod migrate;
mod migrate_doc;
mod migrate_lsp;
mod publish;
mod recovery;
mod reference_examples;
mod release;
mod restart;
mod startup_taint;
mod statefulset;
mod walkthrough;
