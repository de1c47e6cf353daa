"""The operator's files in ``deploy/``: the Prometheus rules are valid and their alerts fire
as their unit tests say (``promtool``, from Debian's prometheus package), and every metric
the rules and the Grafana dashboard query is one the live service exports or a rule
records."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from _server import ServerThread  # type: ignore[import-not-found]
from prometheus_client.parser import text_string_to_metric_families

from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "committee.json"
METRIC = re.compile(r"\bcommittee[_:][A-Za-z0-9_:]*")
RECORD = re.compile(r"^\s*- record:\s*(\S+)\s*$", re.MULTILINE)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail(
            "promtool is needed to check deploy/prometheus: apt-get install prometheus",
            pytrace=False,
        )
    return subprocess.run(
        [tool, *args], cwd=RULES.parent, capture_output=True, text=True, timeout=120
    )


def test_the_rules_are_valid_and_their_alerts_fire_as_their_unit_tests_say() -> None:
    checked = _promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert the rules define has a case that expects it to fire
    alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", RULES.read_text(), re.MULTILINE))
    firing = set(re.findall(r"alertname:\s*(\S+)\n\s*exp_alerts:\n", RULE_TESTS.read_text()))
    assert alerts and alerts <= firing


def _exported(redis_url: str) -> set[str]:
    """The sample names of the service's /metrics once a model has trials and requests
    have been answered."""
    settings = Settings(redis_url=redis_url, key_prefix=f"deploy-{uuid.uuid4().hex[:12]}")
    with ServerThread(settings) as server, httpx.Client(base_url=server.url) as c:
        body = {
            "name": "pets",
            "labels": ["cat", "dog"],
            "input": {"experts": {"expert_names": ["cnn", "svm"]}},
            "learner": {"kind": "committee"},
        }
        assert c.post("/v1/models", json=body).status_code == 201
        learn = {"instance": {"experts": {"cnn": "cat"}}, "label": "dog"}
        assert c.post("/v1/models/pets/learn", json=learn).status_code == 200
        assert c.get("/v1/models/no-such-model").status_code == 404
        text = c.get("/metrics").text
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_metric_queried_is_exported_or_recorded(redis_url: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    rules = RULES.read_text()
    recorded = set(RECORD.findall(rules))
    wanted = {m for q in [*queries, rules] for m in METRIC.findall(q)}
    assert len(queries) >= 10 and recorded and wanted
    missing = wanted - recorded - _exported(redis_url)
    assert not missing, f"queried, but neither exported by the service nor recorded: {missing}"
