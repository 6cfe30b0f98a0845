"""The Grafana dashboard for the live metrics: vLLM's conventions, and only metrics that exist."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO

pytestmark = pytest.mark.vllm  # the metric names come from the stat logger, a vLLM StatLoggerBase

DASHBOARD = REPO / "docs" / "grafana" / "nsys_cc_live.json"
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def test_dashboard_queries_only_metrics_the_live_logger_exports():
    from nsys_cc.live.stat_logger import _collectors

    m = _collectors()
    exported = {c._name for c in (m.draft, m.verify, m.outside, m.steps, m.c, m.best_gamma, m.window_steps)}
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    used = set()
    for name in re.findall(r"nsys_cc:[a-z_]+", " ".join(exprs)):
        for suffix in SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in exported:
                name = name[: -len(suffix)]
        used.add(name)
    assert used == exported, (used, exported)
    # vLLM's dashboards: a Prometheus datasource variable, and every query filtered by its label variables.
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels)
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job", "model_name", "instance", "engine"} <= variables
    for expr in exprs:
        for selector in re.findall(r"(?:nsys_cc|vllm):[a-z_]+\{([^}]*)\}", expr):
            assert 'model_name=~"$model_name"' in selector and 'engine=~"$engine"' in selector, expr
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
