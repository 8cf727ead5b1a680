#!/usr/bin/env bash
# Makes docs/metrics-dashboard.png: runs the monitoring e2e test (a real Prometheus scraping a real agent and
# extender), keeps the series of every dashboard panel, and plots them. Needs what scripts/test.sh needs, plus
# Debian's python3-matplotlib.
set -euo pipefail
cd "$(dirname "$0")/.."
panels="$(mktemp --suffix=.json)"
trap 'rm -f "$panels"' EXIT
LOCALPV_METRICS_PANELS="$panels" cargo test --test e2e monitoring:: -- --test-threads=1
/usr/bin/python3 scripts/metrics-picture.py "$panels" docs/metrics-dashboard.png
echo "wrote docs/metrics-dashboard.png"
