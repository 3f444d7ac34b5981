"""deploy/components/monitoring: it renders inside an overlay and validates, its monitors point at
what the base deploys, every metric an alert or panel uses is one the code exports (the real
registries), every alert has a runbook, and promtool checks the rules and runs their unit tests
(tests/fixtures/monitoring/alerts-test.yaml).

promtool comes from Debian's `prometheus` package, which .ci/run installs. Elsewhere the promtool
tests skip and say why; with CI=true a missing promtool fails them instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.deploy_manifests import DEPLOY, container, find, needs_kubectl, of_kind, pod_spec, render_consumer
from tests.deploy.test_deploy import CRD_GROUPS, K8S_VERSION, api_group

REPO = Path(__file__).resolve().parents[2]
COMPONENT = DEPLOY / "components" / "monitoring"
DASHBOARD = COMPONENT / "dashboard.json"
RULES = COMPONENT / "prometheusrule.yaml"
ALERT_TESTS = REPO / "tests" / "fixtures" / "monitoring" / "alerts-test.yaml"
RUNBOOKS = REPO / "docs" / "monitoring.md"
RUNBOOK_URL = "https://github.com/gpupair/gpupair/blob/main/docs/monitoring.md#"
MONITORING_GROUP = "monitoring.coreos.com"
METRIC = re.compile(r"\bgpupair_[a-z0-9_]+\b")


# ---- what the code exports


def exported_metric_names() -> set[str]:
    """Every sample name the gpupair services can expose, read from their real registries."""
    from gpupair.extender.metrics import ExtenderMetrics
    from gpupair.reporter.metrics import ReporterMetrics
    from gpupair.reporter.verification import VerifyService
    from gpupair.webhook.admission import InjectOptions
    from gpupair.webhook.app import create_app
    from gpupair.webhook.cert_expiry import CertificateExpiry
    from gpupair.webhook.sidecar import SidecarOptions

    reporter = ReporterMetrics()
    # The verification counter lives on the reporter's registry (reporter/main.py passes it).
    VerifyService(None, None, lambda: None, "node", registry=reporter.registry)
    webhook = CollectorRegistry()
    webhook.register(CertificateExpiry("tls.crt"))  # as webhook/main.py registers it
    create_app(InjectOptions(sidecar=SidecarOptions(image="gpupair")), webhook)
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",)}
    names = set()
    for registry in (ExtenderMetrics().registry, reporter.registry, webhook):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
    return names


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["spec"]["groups"]


def alerts() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for target in panel["targets"]]


def test_the_registries_are_read():
    names = exported_metric_names()
    # one from each registry, so an import that silently registers nothing cannot pass the checks below
    assert {"gpupair_extender_requests_total", "gpupair_reporter_last_write_timestamp_seconds",
            "gpupair_reporter_verifications_total", "gpupair_webhook_reviews_total",
            "gpupair_webhook_certificate_expiry_timestamp_seconds"} <= names


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_metric_used_is_exported(source):
    exprs = [rule["expr"] for rule in alerts()] if source == "alerts" else dashboard_exprs()
    exported = exported_metric_names()
    assert exprs
    for expr in exprs:
        used = set(METRIC.findall(expr))
        assert used, f"no gpupair metric in {expr!r}"
        assert used <= exported, f"{sorted(used - exported)} in {expr!r} is not exported by any gpupair registry"


# ---- alerts and runbooks


def test_every_alert_has_a_severity_and_a_runbook_section():
    headings = {line[4:].strip().lower() for line in RUNBOOKS.read_text().splitlines() if line.startswith("### ")}
    names = [alert["alert"] for alert in alerts()]
    assert len(names) == len(set(names)) and len(names) >= 6
    for alert in alerts():
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        url = alert["annotations"]["runbook_url"]
        assert url == RUNBOOK_URL + alert["alert"].lower(), url
        assert alert["alert"].lower() in headings, f"docs/monitoring.md has no runbook for {alert['alert']}"


def test_every_alert_has_a_promtool_unit_test():
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case["exp_alerts"]}
    assert {alert["alert"] for alert in alerts()} <= tested
    # every alert but the 'stays quiet on healthy series' ones also has a case where it fires
    assert {alert["alert"] for alert in alerts()} - fired <= {"GpupairReportsInvalid"}


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and promtool is missing: .ci/run installs it (apt-get install prometheus, as root)")
        pytest.skip("promtool not found (Debian package `prometheus`): the alert rules are not checked by "
                    "Prometheus here; CI installs it and runs these")
    return found


def run_promtool(promtool: str, *args: str, cwd: Path) -> None:
    result = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}\n{result.stderr}"


def test_promtool_checks_the_rules(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)


def test_promtool_runs_the_alert_unit_tests(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts-test.yaml")
    run_promtool(promtool, "test", "rules", "alerts-test.yaml", cwd=tmp_path)


def test_promtool_catches_a_broken_rule(promtool, tmp_path):
    # the check is real: a rule promtool rejects fails it
    groups = rule_groups()
    groups[0]["rules"][0]["expr"] = "max(gpupair_extender_nodes{state=\"stale\"} > "
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([promtool, "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "parse error" in (result.stdout + result.stderr)


# ---- the dashboard


def test_dashboard_panels_ask_for_a_prometheus_data_source():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "gpupair" and board["templating"]["list"][0]["type"] == "datasource"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(panel["title"] for panel in board["panels"]).lower()
    for subject in ("fragmentation", "pass rate by node", "latency", "reservation outcomes", "freshness"):
        assert subject in titles, subject
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"])


# ---- rendered inside an overlay


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    if needs_kubectl.args[0]:
        pytest.skip(needs_kubectl.kwargs["reason"])
    tmp = tmp_path_factory.mktemp("consumer")
    return render_consumer(tmp, {"resources": ["{deploy}/overlays/self-managed"],
                                 "components": ["{deploy}/components/monitoring"]})


def test_component_renders_in_an_overlay_and_validates(rendered):
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered if o["metadata"].get("labels", {}).get(
        "app.kubernetes.io/component") == "monitoring"}
    assert kinds == {("ServiceMonitor", "gpupair-extender"), ("ServiceMonitor", "gpupair-webhook"),
                     ("PodMonitor", "gpupair-reporter"), ("PodMonitor", "gpupair-defrag"), ("PrometheusRule", "gpupair"),
                     ("ConfigMap", "gpupair-grafana-dashboard")}
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpupair"
        if api_group(obj) in CRD_GROUPS | {MONITORING_GROUP}:
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    board = find(rendered, "ConfigMap", "gpupair-grafana-dashboard", "gpupair-system")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["gpupair.json"]) == json.loads(DASHBOARD.read_text())
    rule = find(rendered, "PrometheusRule", "gpupair", "gpupair-system")
    assert rule["spec"]["groups"] == rule_groups()


def test_monitors_select_what_the_base_deploys(rendered):
    for name in ("gpupair-extender", "gpupair-webhook"):
        monitor = find(rendered, "ServiceMonitor", name, "gpupair-system")
        services = [s for s in of_kind(rendered, "Service") if s["metadata"]["namespace"] in
                    monitor["spec"]["namespaceSelector"]["matchNames"]
                    and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert [s["metadata"]["name"] for s in services] == [name]
        ports = {p["name"] for p in services[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    webhook_tls = find(rendered, "ServiceMonitor", "gpupair-webhook")["spec"]["endpoints"][0]["tlsConfig"]
    volumes = pod_spec(find(rendered, "Deployment", "gpupair-webhook"))["volumes"]
    assert webhook_tls["ca"]["secret"]["name"] in {v.get("secret", {}).get("secretName") for v in volumes}
    pods = find(rendered, "PodMonitor", "gpupair-reporter", "gpupair-system")
    reporter = find(rendered, "DaemonSet", "gpupair-reporter")
    assert pods["spec"]["selector"]["matchLabels"].items() <= reporter["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for p in container(rendered, "DaemonSet", "gpupair-reporter", "reporter")["ports"]}
    assert {e["port"] for e in pods["spec"]["podMetricsEndpoints"]} <= ports
    relabel = pods["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} in relabel
