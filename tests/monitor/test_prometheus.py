"""A real Prometheus (Debian's ``prometheus`` package) scrapes the monitor and evaluates the alerting
rules shipped in docs/monitoring-rules.yml. Without the binary the test skips with the reason;
``.ci/run`` installs it and sets ``RANKGATE_REQUIRE_PROMETHEUS=1``, which makes it mandatory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_monitor import DAY_AFTER, TOKEN, config, examples, request

from rankgate import evaluate
from rankgate.monitor.core import Monitor
from rankgate.monitor.server import MonitorServer

ROOT = Path(__file__).parents[2]
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def query(port: int, expression: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=5) as response:
        return list(json.load(response)["data"]["result"])


@pytest.fixture
def prometheus_binary() -> str:
    if PROMETHEUS is None or PROMTOOL is None:
        reason = "Prometheus is not installed here (apt-get install prometheus)"
        if os.environ.get("RANKGATE_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(reason + " (RANKGATE_REQUIRE_PROMETHEUS=1)")
        pytest.skip(reason)
    return PROMETHEUS


def test_rules_file_is_valid() -> None:
    if PROMTOOL is None:
        pytest.skip("promtool is not installed here (apt-get install prometheus)")
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(ROOT / "docs" / "monitoring-rules.yml")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheus_scrapes_the_monitor_and_evaluates_the_rules(
    prometheus_binary: str, tmp_path: Path
) -> None:
    monitor = Monitor(config(views=["1h", "48h"]), clock=lambda: DAY_AFTER)
    server = MonitorServer(monitor, token=TOKEN, port=0, tick_seconds=0.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    records = examples()
    # Recent events, so the 1h window holds them all.
    stamped = [{**r, "timestamp": DAY_AFTER.isoformat()} for r in records]
    body = "".join(json.dumps(r) + "\n" for r in stamped).encode()
    assert request(server, "POST", "/v1/events", body)[0] == 202
    monitor.flush()
    host, port = server.address
    web = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {ROOT / 'docs' / 'monitoring-rules.yml'}\n"
        "scrape_configs:\n  - job_name: rankgate\n"
        f"    static_configs:\n      - targets: ['{host}:{port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [prometheus_binary, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        expected = evaluate(records, ["mrr"])
        deadline = time.monotonic() + 60
        received: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                received = query(web, 'rankgate_events_total{outcome="received"}')
            except OSError:
                received = []
            if received:
                break
            time.sleep(0.5)
        assert received, "Prometheus never scraped the monitor"
        assert float(received[0]["value"][1]) == len(records)
        ratio = query(
            web,
            'sum(rankgate_query_value_sum{metric="mrr",segment="all"})'
            ' / sum(rankgate_query_value_count{metric="mrr",segment="all"})',
        )
        assert float(ratio[0]["value"][1]) == pytest.approx(
            expected.means[expected.metrics[0]], abs=1e-9
        )
        window = query(web, 'rankgate_window_mean{metric="mrr",group="overall",window="1h"}')
        assert float(window[0]["value"][1]) == pytest.approx(expected.means[expected.metrics[0]])
        # The rules file loaded and its alert is evaluated (MRR 0.77 is not below 0.6: inactive).
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/rules", timeout=5) as reply:
            groups = json.load(reply)["data"]["groups"]
        rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
        assert rules["RankgateMRRLow"]["health"] == "ok"
        assert rules["RankgateMRRLow"]["state"] == "inactive"
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        server.shutdown()
        thread.join(5)
