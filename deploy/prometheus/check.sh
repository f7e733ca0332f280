#!/usr/bin/env bash
# Checks the fleet-view files with Prometheus's own tool (promtool, from
# Debian's `prometheus` package): the scrape config, the rules, the rules'
# unit tests (known answers), and that every query of the Grafana dashboard
# parses as PromQL (Grafana's $node variable replaced by a regex).
set -euo pipefail
cd "$(dirname "$0")"
command -v promtool >/dev/null || { echo "check.sh: promtool missing (apt-get install prometheus)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "check.sh: python3 missing" >&2; exit 1; }

promtool check config prometheus.yml
promtool check rules hwqos-rules.yml
promtool test rules hwqos-rules.test.yml

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every dashboard query as a recording rule: promtool parses each one.
python3 - grafana-hwqos.json >"$tmp/dashboard-rules.yml" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exprs = []
def walk(panels):
    for p in panels:
        exprs.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
        walk(p.get("panels", []))
walk(d["panels"])
if not exprs:
    sys.exit("no queries in the dashboard")
print("groups:\n  - name: dashboard\n    rules:")
for i, e in enumerate(exprs):
    e = e.replace("$node", ".*")
    print(f"      - record: dashboard_query_{i}\n        expr: {json.dumps(e)}")
PY
promtool check rules "$tmp/dashboard-rules.yml" | sed 's/rules found/dashboard queries parse/'
