"""Live c for real: vLLM's OpenAI-compatible server (CPU build) with a draft model, a real HTTP client, `/metrics`.

One server runs with `NSYS_CC_LIVE=1` under `nsys profile` with the NVTX plugin on (`NSYS_CC_PLUGIN=1`): the live
metrics and the trace then time the very same forwards, which keeps the comparison fair on a loaded machine (two
servers run one after the other would see different load). The in-place c of the trace is taken from the raw NVTX
rows: median `draft_model_executable()` range that follows a verify range ÷ median verify range (`model_executable()`
with payload γ + 1: one request at a time). The live gauge is the same ratio over the window (all the run's verify
steps but the last, whose period is still open when the requests end), from clocks read inside those ranges, so
the two differ only by the NVTX calls at the range edges (µs against forwards of 0.5–10 ms) and one step of ~100:
10 % is a wide margin for that, and a wrong classification of steps (a prefill forward taken for a verify, the
first draft forward of a prompt counted) or a unit slip would fall far outside it.

A second server without `NSYS_CC_LIVE` shows that nothing of nsys_cc reaches `/metrics` then.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from nsys_cc.launch.launcher import NSYS_START_FAILURE
from nsys_cc.launch.models import MODELS_DIR
from nsys_cc.trace.nsys import require_nsys

pytestmark = pytest.mark.vllm

GAMMA = 3
TARGET = str(MODELS_DIR / "tiny-llama-target")
DRAFT = str(MODELS_DIR / "tiny-llama-draft-xs")
SERVED = "tiny-llama-target"  # the served name: the model's path holds "nsys_cc", the metric names must not
REQUESTS = 4
MAX_TOKENS = 32
STATS_INTERVAL_S = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int) -> list[str]:
    spec = f'{{"method": "draft_model", "model": "{DRAFT}", "num_speculative_tokens": {GAMMA}}}'
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", TARGET, "--load-format", "dummy",
        "--served-model-name", SERVED, "--skip-tokenizer-init", "--enforce-eager", "--gpu-memory-utilization", "0.3",
        "--max-model-len", "512",
        "--host", "127.0.0.1", "--port", str(port), "--speculative-config", spec,
    ]


class Server:
    """The API server (optionally under nsys) in the background; its log in a file."""

    def __init__(self, tmp: Path, env: dict[str, str], nsys: str | None = None):
        self.port = free_port()
        self.log_path = tmp / f"server-{self.port}.log"
        self.rep = tmp / "live"
        cmd = server_command(self.port)
        if nsys:
            cmd = [nsys, "profile", "-t", "nvtx", "-s", "none", "--cpuctxsw=none", "--trace-fork-before-exec=true",
                   "-f", "true", "-o", str(self.rep), *cmd]
        full_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": str(STATS_INTERVAL_S),
                    **env}
        for name in ("NSYS_CC_LIVE", "NSYS_CC_PLUGIN"):
            if name not in env:
                full_env.pop(name, None)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=full_env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_text()[-4000:]
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(2.0)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.log_text()[-4000:]}")

    def complete(self, prompt: list[int]) -> dict:
        body = {"model": SERVED, "prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0}
        answer = requests.post(f"{self.url}/v1/completions", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def metrics(self) -> dict[str, list]:
        text = requests.get(f"{self.url}/metrics", timeout=30).text
        out: dict[str, list] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append(sample)
        return out

    def stop(self, timeout: float = 300.0) -> None:
        """SIGINT to the API server itself (under nsys: nsys's child), then wait for everything to exit."""
        server = self.proc
        if server.poll() is None:
            target = psutil.Process(server.pid)
            children = [p for p in target.children(recursive=True) if "api_server" in " ".join(p.cmdline())]
            os.kill((children[0] if children else target).pid, signal.SIGINT)
            try:
                server.wait(timeout)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        self.log.close()

    def log_text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")


def value(metrics: dict[str, list], name: str) -> float:
    (sample,) = metrics[name]
    return sample.value


def nvtx_forwards(sqlite: Path) -> list[tuple[str, int, int, int]]:
    """(name, payload, start, end) of every forward range of the trace, in start order."""
    with sqlite3.connect(sqlite) as conn:
        return conn.execute(
            "SELECT coalesce(e.text, s.value), e.int64Value, e.start, e.end FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 "
            "AND coalesce(e.text, s.value) LIKE '%model_executable()' ORDER BY e.start").fetchall()


def in_place_c(rows) -> tuple[float, int]:
    """Median draft forward of verify steps ÷ median verify forward, and the number of verify forwards."""
    verify, drafts, in_verify = [], [], False
    for name, payload, start, end in rows:
        if name == "model_executable()":
            in_verify = payload == GAMMA + 1
            if in_verify:
                verify.append(end - start)
        elif in_verify:
            drafts.append(end - start)
    return statistics.median(drafts) / statistics.median(verify), len(verify)


@pytest.mark.nsys
def test_live_c_on_metrics_agrees_with_the_in_place_c_of_a_trace_of_the_same_server(tmp_path):
    nsys = require_nsys()
    for attempt in range(3):  # nsys 2022.4 may fail to start when another session starts at the same moment
        server = Server(tmp_path, {"NSYS_CC_LIVE": "1", "NSYS_CC_PLUGIN": "1"}, nsys=nsys)
        try:
            server.wait_ready()
            break
        except AssertionError:
            server.stop()
            if attempt == 2 or NSYS_START_FAILURE not in server.log_text():
                raise
    try:
        for i in range(REQUESTS):
            answer = server.complete(list(range(10 + i, 26 + i)))
            assert answer["usage"]["completion_tokens"] == MAX_TOKENS
        time.sleep(3 * STATS_INTERVAL_S)  # vLLM's next stats log refreshes the gauges with the last records
        metrics = server.metrics()
    finally:
        server.stop()
    log = server.log_text()

    labels = {"model_name": SERVED, "engine": "0"}
    live_c = value(metrics, "nsys_cc:cost_coefficient")
    assert metrics["nsys_cc:cost_coefficient"][0].labels == labels
    verify_count = value(metrics, "nsys_cc:verify_forward_seconds_count")
    drafts_count = value(metrics, "nsys_cc:draft_forward_seconds_count")
    # Random weights accept nothing: vLLM counts one draft of γ tokens per verify step, none accepted.
    assert value(metrics, "vllm:spec_decode_num_accepted_tokens_total") == 0
    vllm_drafts = value(metrics, "vllm:spec_decode_num_drafts_total")
    assert vllm_drafts - 2 <= verify_count <= vllm_drafts
    assert drafts_count == GAMMA * verify_count
    assert value(metrics, "nsys_cc:step_outside_forward_seconds_count") >= verify_count - REQUESTS
    # At α = 0 a speculative step yields the one token a plain step gives, at more cost: no γ pays.
    assert value(metrics, "nsys_cc:best_num_speculative_tokens") == 0
    assert "nsys_cc live: c = " in log and "no num_speculative_tokens beats plain decoding" in log

    sqlite = tmp_path / "live.sqlite"
    export = [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(server.rep) + ".nsys-rep"]
    subprocess.run(export, capture_output=True, check=True, timeout=600)
    trace_c, trace_verify = in_place_c(nvtx_forwards(sqlite))
    # The trace counts the one-sequence verify forwards (payload γ + 1). Measured over four runs of this test: live
    # timing 123 verify steps each time, the trace 121 or 122 — a verify step around a request's boundary is not always
    # in the trace with that payload (or in the trace at all: nsys flushes the server's last events at its exit), at
    # most one per request; and live timing may miss a step at either end.
    assert trace_verify - 2 <= verify_count <= trace_verify + REQUESTS, (verify_count, trace_verify)
    mean_verify = value(metrics, "nsys_cc:verify_forward_seconds_sum") / verify_count
    assert 0.0005 < mean_verify < 1.0  # seconds: a 4-layer × 512 forward on a CPU
    assert live_c == pytest.approx(trace_c, rel=0.10), (live_c, trace_c)


def test_without_nsys_cc_live_nothing_of_nsys_cc_is_on_metrics(tmp_path):
    server = Server(tmp_path, {})
    try:
        server.wait_ready()
        server.complete(list(range(1, 17)))
        time.sleep(2 * STATS_INTERVAL_S)
        response = requests.get(f"{server.url}/metrics", timeout=30).text
    finally:
        server.stop()
    assert "vllm:spec_decode_num_drafts" in response
    assert "nsys_cc" not in response
    assert "nsys_cc live" not in server.log_text()
