#!/usr/bin/env bash
# The one test command: installs what is missing on a fresh machine, builds the pinned control planes, then runs
# every tier (format, lints, unit, host tests on real mounts, end-to-end tests on a real control plane, and the
# chart on real kubelet nodes) on the newest supported Kubernetes, then an end-to-end subset on the oldest.
# Fails loudly when a prerequisite cannot be had; nothing is skipped.
set -euo pipefail

# The end-to-end subset run again on the oldest supported Kubernetes (K8S_OLDEST_VERSION): the agent (publish, a
# claim's lifetime with a wipe, under the chart's admission policy as that API server evaluates it, and the
# narrow PV watch it allows, widened when the policy goes; one HTTP/2 connection per process and a restart of one
# streaming watch per kind, which needs that version's WatchList), the extender
# called by that version's kube-scheduler (node names and whole nodes), delayed binding by that scheduler and PV
# controller, and the chart (every rendering accepted by that API server; the documented helm install and the
# scheduler configuration its NOTES print). About 2 minutes; the whole end-to-end tier took 8 (docs/testing.md).
oldest_tests=(
  admission::a_narrow_agent_checks_the_policy_before_a_wipe_and_widens_once_it_is_gone
  admission::a_narrow_agents_restart_costs_one_request_per_watch_and_its_first_wipe_checks_the_policy
  admission::the_agent_runs_a_claim_lifetime_under_the_policy_with_its_pod_bound_token
  admission::the_policy_refuses_foreign_pvs_and_admits_the_agents_own
  api_cost::the_agent_and_the_extender_each_hold_one_connection_to_the_api_server
  chart_scheduler::kube_scheduler_with_the_configuration_the_notes_print_calls_the_extender_over_tls
  extender::extender_places_pods_explains_pending_ones_and_holds_pods_while_down::case_1_node_names
  extender::extender_places_pods_explains_pending_ones_and_holds_pods_while_down::case_2_whole_nodes
  node_agent::agents_publish_bind_follow_mounts_adopt_and_restart_quietly
  packaging::every_rendered_object_is_accepted_by_the_api_server
  walkthrough::classic_walkthrough_binds_the_claim_on_the_node_the_pod_must_run_on
)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
step() { printf '\n==> %s\n' "$*"; }

# shellcheck source=prereqs.sh
. scripts/prereqs.sh

# shellcheck source=versions.env
. scripts/versions.env
step "building the pinned control planes (cached): Kubernetes $K8S_VERSION, and $K8S_OLDEST_VERSION for the subset"
LOCALPV_K8S_BIN_DIR=$(scripts/k8s-bins.sh newest | tail -n 1)
# NB: not into the newest's dir when the caller set LOCALPV_K8S_BIN_DIR; LOCALPV_K8S_OLDEST_BIN_DIR moves this one.
oldest_bin_dir=$(LOCALPV_K8S_BIN_DIR=${LOCALPV_K8S_OLDEST_BIN_DIR:-} scripts/k8s-bins.sh oldest | tail -n 1)
export LOCALPV_K8S_BIN_DIR

# Cargo's target dir lives outside the work tree so a fresh clone (CI) reuses earlier builds on this machine.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/localpv/target}
export CARGO_TERM_COLOR=never

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --quiet --workspace --all-targets -- -D warnings
# The real-node tier puts a host-built binary into the image's runtime stage. CI gives it the debug build that
# `cargo test` makes anyway: a cold release build costs ~22 minutes on 2 cores, which CI's 90 cannot spare, and the
# full release build inside the Dockerfile stays tested by the packaging tier.
export LOCALPV_REALNODE_BINARY=${LOCALPV_REALNODE_BINARY:-$CARGO_TARGET_DIR/debug/localpv}
step "CLI-only build without libblkid/libudev (scripts/cli-build-check.sh)"
scripts/cli-build-check.sh
step "cargo test (unit, host, end-to-end, real nodes)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --no-fail-fast -- --test-threads=2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
step "end-to-end subset on the oldest supported Kubernetes, $K8S_OLDEST_VERSION ($oldest_bin_dir)"
oldest_log=$(mktemp)
trap 'rm -f "$log" "$oldest_log"' EXIT
set +e
LOCALPV_K8S_BIN_DIR=$oldest_bin_dir cargo test --test e2e -- --exact --test-threads=2 "${oldest_tests[@]}" 2>&1 \
  | tee "$oldest_log"
oldest_status=${PIPESTATUS[0]}
set -e
# A renamed test would leave its name matching nothing: the subset must run every test it names.
if ! grep -qx "running ${#oldest_tests[@]} tests" "$oldest_log"; then
  printf 'error: the subset names %d tests; cargo ran: %s\n' "${#oldest_tests[@]}" \
    "$(grep -m1 -E '^running [0-9]+ tests?$' "$oldest_log")" >&2
  oldest_status=1
fi
cat "$oldest_log" >>"$log"
[ "$status" = 0 ] && status=$oldest_status
# One closing line over every test binary, so the total is not read off the last binary alone.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
