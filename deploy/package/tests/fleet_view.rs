//! The fleet-view files in `deploy/prometheus/`, checked with Prometheus's own
//! tool (`promtool`, Debian's `prometheus` package): the scrape config, the
//! rules and their known-answer tests, and every Grafana dashboard query
//! (parsed as PromQL by promtool, with the `$node` variable as a regex).

use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../prometheus")
}

fn promtool(args: &[&str], cwd: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run promtool (install Debian's `prometheus` package; scripts/test.sh does)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn scrape_config_and_rules_pass_promtool() {
    let d = dir();
    promtool(&["check", "config", "prometheus.yml"], &d);
    let rules = promtool(&["check", "rules", "hwqos-rules.yml"], &d);
    assert!(rules.contains("SUCCESS: 13 rules found"), "{rules}");
    let tests = promtool(&["test", "rules", "hwqos-rules.test.yml"], &d);
    assert!(tests.contains("SUCCESS"), "{tests}");
}

fn queries(panels: &[serde_json::Value], out: &mut Vec<String>) {
    for p in panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push(e.to_string());
            }
        }
        if let Some(inner) = p["panels"].as_array() {
            queries(inner, out);
        }
    }
}

#[test]
fn every_dashboard_query_parses_and_panels_are_well_formed() {
    let text = std::fs::read_to_string(dir().join("grafana-hwqos.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels {
        let w = p["gridPos"]["w"].as_u64().unwrap();
        let x = p["gridPos"]["x"].as_u64().unwrap();
        assert!(
            x + w <= 24,
            "panel {} overflows the 24-column grid",
            p["title"]
        );
    }
    // The variable the queries filter on exists.
    assert!(dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "node"));

    let mut exprs = Vec::new();
    queries(panels, &mut exprs);
    assert!(exprs.len() >= 20, "only {} queries", exprs.len());
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e.replace("$node", ".*");
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("dashboard.yml"), rules).unwrap();
    let out = promtool(&["check", "rules", "dashboard.yml"], tmp.path());
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
}

#[test]
fn every_agent_has_a_row_with_its_own_metrics() {
    let text = std::fs::read_to_string(dir().join("grafana-hwqos.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dash["panels"].as_array().unwrap();
    for (agent, prefix) in [
        ("hwqos-relay", "hwqos_relay_"),
        ("hwqos-loadgen", "hwqos_loadgen_"),
        ("hwqos-sra", "hwqos_sra_"),
    ] {
        let row = panels
            .iter()
            .position(|p| p["type"] == "row" && p["title"].as_str().unwrap().starts_with(agent))
            .unwrap_or_else(|| panic!("no row for {agent}"));
        assert!(
            !panels[row]["title"]
                .as_str()
                .unwrap()
                .contains("PLACEHOLDER"),
            "{agent}"
        );
        let mut exprs = Vec::new();
        let next_row = panels[row + 1..]
            .iter()
            .position(|p| p["type"] == "row")
            .map_or(panels.len(), |i| row + 1 + i);
        queries(&panels[row + 1..next_row], &mut exprs);
        assert!(
            exprs.len() >= 3 && exprs.iter().all(|e| e.contains(prefix)),
            "{agent}: {exprs:?}"
        );
    }
}
