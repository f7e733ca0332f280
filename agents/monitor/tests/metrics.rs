//! The OpenMetrics endpoint: content type, format, and `promtool check metrics`.

mod common;

use common::{Running, SW_SETS};
use hwqos_testsupport::{http_get, promtool_check_metrics, wait_for};
use std::time::Duration;

#[test]
fn metrics_endpoint_serves_valid_openmetrics() {
    let me = std::process::id();
    let m = Running::start(
        &format!("rate_hz = 20\n{SW_SETS}\n[[target]]\nselect = \"pid:{me}\"\n"),
        "",
    );
    let mut c = m.client();
    wait_for("3 frames", Duration::from_secs(30), || {
        c.status().unwrap().frames_sampled >= 3
    });
    let addr = c.status().unwrap().metrics_listen.expect("metrics address");
    let r = http_get(&addr, "/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("content-type")
            .map(|v| v.to_ascii_lowercase())
            .as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{r:?}"
    );
    let body = r.body;
    assert!(body.ends_with("# EOF\n"), "no EOF terminator");
    assert!(
        body.contains("# TYPE hwqos_sw_task_clock_seconds_per_second gauge"),
        "{body}"
    );
    assert!(
        body.contains("hwqos_sw_task_clock_seconds_per_second{scope=\"cpu\",cpu=\"0\"}"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "hwqos_sw_task_clock_seconds_per_second{{scope=\"process\",pid=\"{me}\",comm=\""
        )),
        "process series with comm label missing: {body}"
    );
    assert!(body.contains("# UNIT hwqos_monitor_tick_lateness_seconds seconds"));
    assert!(body.contains("hwqos_monitor_frames_sampled "));
    assert!(body.contains("hwqos_monitor_build_info{version=\""));

    let r = http_get(&addr, "/other").expect("GET /other");
    assert_eq!(r.status, 404, "{r:?}");

    promtool_check_metrics(&body);
}
