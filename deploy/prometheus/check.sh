#!/usr/bin/env bash
# Checks the fleet-view files with Prometheus's own tool (promtool, from
# Debian's `prometheus` package). The same checks, plus every Grafana
# dashboard query parsed as PromQL, run in `cargo test -p hwqos-dist`
# (deploy/package/tests/fleet_view.rs).
set -euo pipefail
cd "$(dirname "$0")"
command -v promtool >/dev/null || { echo "check.sh: promtool missing (apt-get install prometheus)" >&2; exit 1; }
promtool check config prometheus.yml
promtool check rules hwqos-rules.yml
promtool test rules hwqos-rules.test.yml
