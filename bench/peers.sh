#!/usr/bin/env bash
# Asks the Go module proxy for the peers issue 8 compares against and prints one JSON line per peer:
#   {"peer": "...", "module": "...", "status": "available" | "unavailable", "version": "...", "error": "..."}
# Nothing is built here: bench/report.py turns "unavailable" into the table's "not measured" rows, quoting the
# proxy's own words, so the benchmarks page says exactly why a comparison is missing.
set -euo pipefail

peers=(
  "reference provisioner|sigs.k8s.io/sig-storage-local-static-provisioner"
  "TopoLVM scheduler extender|github.com/topolvm/topolvm"
)

work=$(mktemp -d /tmp/localpv-peers.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init localpv.io/peers >/dev/null 2>&1

json_string() { python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().strip()))'; }

for entry in "${peers[@]}"; do
  peer=${entry%%|*} module=${entry#*|}
  if out=$(GOFLAGS=-mod=mod timeout 120 go mod download -json "$module@latest" 2>&1); then
    version=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("Version", ""))' <<<"$out")
    printf '{"peer": %s, "module": "%s", "status": "available", "version": "%s", "error": ""}\n' \
      "$(json_string <<<"$peer")" "$module" "$version"
  else
    # `go mod download -json` reports the failure inside its JSON; fall back to the raw text otherwise.
    err=$(python3 -c 'import json, sys
try: print(json.load(sys.stdin).get("Error", ""))
except Exception: pass' <<<"$out")
    [ -n "$err" ] || err=$out
    printf '{"peer": %s, "module": "%s", "status": "unavailable", "version": "", "error": %s}\n' \
      "$(json_string <<<"$peer")" "$module" "$(json_string <<<"$err")"
  fi
done
