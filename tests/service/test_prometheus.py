"""A real Prometheus (Debian's package) scraping ``voxcache serve``, and what ships in docs/.

- Prometheus, started on a free port with its own config and data folder, scrapes the
  service with an ``[admin]`` key as a bearer token and answers a query for the hit
  counter with what ``/v1/stats`` says; a job without the key is refused (401).
- ``promtool check rules`` passes on docs/operating/prometheus-rules.yml, Prometheus loads the
  rules and evaluates every one without error, and ``promtool test rules`` shows each
  alert firing on its condition and quiet beside it.
- Every expression of docs/operating/grafana-dashboard.json runs on that Prometheus, and every
  metric it or the rules name is one the service exports; docs/operating/metrics.md documents
  exactly the families the service exports.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from voxcache.testing import waiting
from voxcache.testing.servers import PrometheusServer

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "operating" / "prometheus-rules.yml"
RULE_TESTS = Path(__file__).with_name("prometheus-rules.test.yml")
GRAFANA = ROOT / "docs" / "operating" / "grafana-dashboard.json"
METRICS_DOC = ROOT / "docs" / "operating" / "metrics.md"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(not (PROMETHEUS and PROMTOOL),
                                      reason="needs Debian's prometheus package")
TENANT, ADMIN = "acme-key-1234", "admin-key-1234"
CONFIG = f"""
disk_max_entries = 100000
[tenants.acme]
api_keys = ["{TENANT}"]
[admin]
api_keys = ["{ADMIN}"]
[dashboard]
interval = 1
"""
NAME = re.compile(r"\bvoxcache_[a-z0-9_]+")


@pytest.fixture(scope="module")
def service(serve_proc, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    """``voxcache serve`` with keys, after a mix of hits, misses and refusals."""
    folder = tmp_path_factory.mktemp("served")
    config = folder / "voxcache.toml"
    config.write_text(CONFIG)
    with serve_proc(folder / "cache", config=config) as (url, _proc):
        tenant = {"Authorization": f"Bearer {TENANT}"}
        for text in ("Hello.", "Hello.", "Hello.", "Goodbye.", "Goodbye."):
            answer = httpx.post(f"{url}/v1/audio/speech", headers=tenant,
                                json={"input": text, "response_format": "wav"}, timeout=60)
            assert answer.status_code == 200
        stream = httpx.post(f"{url}/v1/audio/speech", headers=tenant,
                            json={"input": "Streamed.", "response_format": "pcm"}, timeout=60)
        assert stream.status_code == 200
        assert httpx.post(f"{url}/v1/audio/speech", headers=tenant,
                          json={"input": "x", "voice": "nobody"}, timeout=60).status_code == 400
        admin = {"Authorization": f"Bearer {ADMIN}"}
        scrape = httpx.get(f"{url}/metrics", headers=admin)
        assert scrape.status_code == 200
        yield {"url": url, "port": int(url.rsplit(":", 1)[1]), "admin": admin,
               "exposition": scrape.text, "folder": folder}


@pytest.fixture(scope="module")
def prometheus(service: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[str]:
    """Prometheus on a free port scraping the service every second, the rules loaded."""
    target = f"127.0.0.1:{service['port']}"
    with PrometheusServer(tmp_path_factory.mktemp("prometheus"), [
            {"job_name": "voxcache", "authorization": {"credentials": ADMIN},
             "static_configs": [{"targets": [target]}]},
            {"job_name": "voxcache-nokey", "static_configs": [{"targets": [target]}]},
    ], rule_files=(RULES,)) as server:
        yield server.url


def query(prometheus: str, expr: str) -> dict[str, Any]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    body = answer.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]  # type: ignore[no-any-return]


until = partial(waiting.until, bound=30.0, what="Prometheus's answer")


@needs_prometheus
def test_a_real_prometheus_scrapes_the_hit_counter(service, prometheus) -> None:
    counters = httpx.get(f"{service['url']}/v1/stats", headers=service["admin"]).json()[
        "counters"]
    assert counters["hits_memory"] == 3  # Hello. ×3 and Goodbye. ×2: two misses

    def hits() -> float | None:
        result = query(prometheus, 'voxcache_cache_events_total{job="voxcache",'
                                   'event="hits_memory"}')["result"]
        return float(result[0]["value"][1]) if result else None

    assert until(lambda: hits() == counters["hits_memory"]), hits()
    served = query(prometheus, 'sum(voxcache_requests_total{job="voxcache",code="200"})')
    assert float(served["result"][0]["value"][1]) == 6.0
    refused = until(lambda: query(prometheus, 'up{job="voxcache-nokey"}')["result"])
    assert float(refused[0]["value"][1]) == 0.0
    targets = httpx.get(f"{prometheus}/api/v1/targets").json()["data"]["activeTargets"]
    keyless = next(t for t in targets if t["labels"]["job"] == "voxcache-nokey")
    assert "401" in keyless["lastError"]


@needs_prometheus
def test_prometheus_loads_the_shipped_rules_and_evaluates_every_one(service, prometheus) -> None:
    def evaluated() -> list[dict[str, Any]] | None:
        groups = httpx.get(f"{prometheus}/api/v1/rules").json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2")
                                      and not r["lastEvaluation"].startswith("0001")
                                      for r in rules) else None

    rules = until(evaluated)
    assert rules, "the rules were never evaluated"
    assert len(rules) == 12
    assert all(rule["health"] == "ok" for rule in rules), [
        (r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]


@needs_prometheus
def test_every_grafana_expression_runs_on_prometheus(service, prometheus) -> None:
    until(lambda: query(prometheus, 'voxcache_workers{job="voxcache"}')["result"])
    for expr in _grafana_expressions():
        concrete = (expr.replace("$__rate_interval", "1m").replace("$instance", ".*"))
        query(prometheus, concrete)  # asserts Prometheus accepted and evaluated it


@needs_prometheus
def test_the_dashboards_latency_is_prometheus_histogram_quantile(service, prometheus) -> None:
    """The page's p50/p95 are computed the way Prometheus computes them (same buckets,
    same interpolation): over the same observations the two agree."""
    doc = httpx.get(f"{service['url']}/v1/dashboard", headers=service["admin"]).json()
    expected = {("hit", "HIT|STALE"): doc["latency"], ("miss", "MISS|PARTIAL|JOINED"): doc[
        "latency"]}
    scraped_after_traffic = until(lambda: query(
        prometheus, 'sum(voxcache_request_seconds_count{job="voxcache"})')["result"])
    assert float(scraped_after_traffic[0]["value"][1]) == 6.0
    for (group, caches), latency in expected.items():
        for q in (0.5, 0.95):
            result = query(prometheus, f'histogram_quantile({q}, sum by (le) ('
                                       f'voxcache_request_seconds_bucket{{job="voxcache",'
                                       f'cache=~"{caches}"}}))')["result"]
            theirs = float(result[0]["value"][1])
            ours = latency[f"{group}_p{round(q * 100)}"]
            assert ours == pytest.approx(theirs, rel=1e-5), (group, q)


@needs_prometheus
def test_promtool_passes_the_shipped_rules() -> None:
    checked = subprocess.run([str(PROMTOOL), "check", "rules", str(RULES)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout


@needs_prometheus
def test_each_alert_fires_on_its_condition_and_stays_quiet_beside_it() -> None:
    tested = subprocess.run([str(PROMTOOL), "test", "rules", str(RULE_TESTS)],
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    covered = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert alerts == covered, alerts ^ covered


def test_grafana_and_the_rules_name_only_metrics_the_service_exports(service) -> None:
    exported = _exported(service["exposition"])
    named = {name for expr in _grafana_expressions() for name in NAME.findall(expr)}
    named |= set(NAME.findall(RULES.read_text()))
    assert named, "no metric named at all"
    # a family may have no series on this (embedded) service: voxcache_upstream_up
    assert named <= exported["samples"] | exported["families"], sorted(
        named - exported["samples"] - exported["families"])
    panels = json.loads(GRAFANA.read_text())["panels"]
    assert all(target["expr"] for panel in panels for target in panel.get("targets", []))
    assert all(panel.get("targets") for panel in panels if panel["type"] != "row")


def test_metrics_md_documents_exactly_what_is_exported(service) -> None:
    exported = _exported(service["exposition"])["families"]
    documented = set(re.findall(r"^\| `(voxcache_[a-z0-9_]+)`", METRICS_DOC.read_text(),
                                re.MULTILINE))
    assert documented == exported, (sorted(exported - documented), sorted(documented - exported))


def _exported(exposition: str) -> dict[str, set[str]]:
    families, samples = set(), set()
    for family in text_string_to_metric_families(exposition):
        name = family.name + ("_total" if family.type == "counter" else "")
        families.add(name)
        samples.update(sample.name for sample in family.samples)
    return {"families": families, "samples": samples}


def _grafana_expressions() -> list[str]:
    board = json.loads(GRAFANA.read_text())
    exprs = [target["expr"] for panel in board["panels"]
             for target in panel.get("targets", [])]  # a row has none
    for variable in board["templating"]["list"]:  # label_values(<metric>, <label>)
        metric = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
        assert metric, variable["definition"]
        exprs.append(f"group by ({metric.group(2)}) ({metric.group(1)})")
    return exprs
