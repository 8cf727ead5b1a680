//! End-to-end tests against a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
//! built by `scripts/k8s-bins.sh`. One test binary so the crate links once; one module per scenario.

use localpv_test_support as support;

mod admission;
mod api_cost;
mod attack_clone;
mod attack_config;
mod attack_decode;
mod attack_flood;
mod attack_identity;
mod attack_inventory;
mod attack_overlap;
mod attack_ownership;
mod attack_rawdev;
mod attack_retry;
mod attack_state;
mod bench_page;
mod chart_docs;
mod chart_node_values;
mod chart_pod_security;
mod chart_privileges;
mod chart_reference_values;
mod chart_scheduler;
mod chart_uninstall;
mod chart_upgrade;
mod cleanup;
mod config_reload;
mod extender;
mod failure;
mod false_alarm;
mod inventory;
mod monitoring;
mod node_agent;
mod packaging;
mod reclaim;
mod recovery;
mod recovery_replaced;
mod walkthrough;
