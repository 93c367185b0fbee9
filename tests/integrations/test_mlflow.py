"""``--mlflow`` and ``rankgate.integrations.mlflow`` against a real MLflow with a SQLite tracking
store: what a run holds is read back through ``MlflowClient`` and held to hand-computed means and
to the JSON report, names included (docs/mlflow.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import rankgate
from ab_data import AB_METRICS, ab_traces
from rankgate.cli import main
from rankgate.errors import UsageError
from rankgate.integrations import mlflow as tracking

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'rankgate[mlflow]')")

import mlflow
from mlflow import MlflowClient

pytestmark = [
    # SQLAlchemy 2.1 deprecates a loader strategy MLflow's store configures: theirs, not ours.
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning"),
]

# What MLflow accepts in a key on every platform, within its length limit, and no path tricks.
VALID_NAME = re.compile(r"[A-Za-z0-9_.-]{1,250}")
MLFLOW_ENV = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID",
)


@dataclass(frozen=True)
class Store:
    uri: str
    root: Path
    client: MlflowClient


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """One SQLite store for the module: creating its tables takes seconds. Made from inside its
    folder, so the Default experiment keeps its artifacts there."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with contextlib.chdir(root):
        client = MlflowClient(uri)
        client.get_experiment("0")
    return Store(uri, root, client)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No MLflow settings from the environment, and ./mlruns or ./mlflow.db, if anything writes
    them, in the test's own folder."""
    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def one_line_error(self, *fragments: str) -> str:
        assert self.code == 2, f"exit {self.code}, stderr:\n{self.err}"
        assert "Traceback" not in self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.err}"
        assert lines[0].startswith("rankgate: error: "), lines[0]
        for fragment in fragments:
            assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
        assert self.out == ""  # logging comes before the report: no verdict was shown
        return lines[0]


def _run(capsys: pytest.CaptureFixture[str], *args: Any) -> Result:
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def _experiment(store: Store, tmp_path: Path) -> tuple[str, str]:
    """A new experiment whose artifacts live in the test's folder: (name, id)."""
    name = f"rankgate-{uuid.uuid4().hex[:12]}"
    artifacts = tmp_path / "artifacts"
    return name, store.client.create_experiment(name, artifact_location=artifacts.as_uri())


def _only_run(store: Store, experiment_id: str) -> Any:
    runs = store.client.search_runs([experiment_id])
    assert len(runs) == 1
    return runs[0]


def _artifact(store: Store, run_id: str, path: str, tmp_path: Path) -> str:
    local = store.client.download_artifacts(run_id, path, str(tmp_path / "download"))
    return Path(local).read_text(encoding="utf-8")


def _artifact_names(store: Store, run_id: str, folder: str = "rankgate") -> set[str]:
    return {item.path for item in store.client.list_artifacts(run_id, folder)}


# --------------------------------------------------------------------------------------------------
# Four queries, every value worked out by hand. One relevant document each.
#
#   q1 factual    relevant at rank 1      rr 1     ndcg@10 1
#   q2 factual    relevant at rank 2      rr 1/2   ndcg@10 1/log2(3)
#   q3 multi_hop  relevant at rank 3      rr 1/3   ndcg@10 1/log2(4) = 1/2
#   q4 multi_hop  relevant not retrieved  rr 0     ndcg@10 0
# --------------------------------------------------------------------------------------------------
HAND = [
    {"query_id": "q1", "query_type": "factual", "retrieved_ids": ["a", "b", "c"], "relevant_ids": ["a"]},
    {"query_id": "q2", "query_type": "factual", "retrieved_ids": ["a", "b", "c"], "relevant_ids": ["b"]},
    {"query_id": "q3", "query_type": "multi_hop", "retrieved_ids": ["a", "b", "c"], "relevant_ids": ["c"]},
    {"query_id": "q4", "query_type": "multi_hop", "retrieved_ids": ["x", "y"], "relevant_ids": ["z"]},
]  # fmt: skip
HAND_MEANS = {
    "mrr": (1 + 1 / 2 + 1 / 3 + 0) / 4,
    "segment.query_type.factual.mrr": (1 + 1 / 2) / 2,
    "segment.query_type.multi_hop.mrr": (1 / 3 + 0) / 2,
    "ndcg_at_10": (1 + 1 / 1.584962500721156 + 1 / 2 + 0) / 4,
    "segment.query_type.multi_hop.ndcg_at_10": (1 / 2 + 0) / 2,
}
EVAL_ARGS = ["-m", "mrr", "-m", "ndcg@10", "--segment-by", "query_type", "--min-queries", "1",
             "--resamples", "200", "--no-config", "--no-progress"]  # fmt: skip


def test_eval_logs_means_intervals_segments_settings_gates_and_reports(
    capsys: pytest.CaptureFixture[str], store: Store, tmp_path: Path
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    name, experiment_id = _experiment(store, tmp_path)
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "-g", "mrr>=0.4", "-g", "ndcg@10>=0.9",
                  "--format", "json", "--worst", "2", "--mlflow", store.uri,
                  "--mlflow-experiment", name, "--mlflow-run-name", "nightly")  # fmt: skip
    # A failed gate keeps its exit code, and the failing run is logged.
    assert result.code == 1, result.err
    report = json.loads(result.out)
    run = _only_run(store, experiment_id)
    assert f"logged to MLflow run {run.info.run_id} (experiment {experiment_id})" in result.err
    assert run.info.status == "FINISHED" and run.info.run_name == "nightly"
    metrics, params, tags = run.data.metrics, run.data.params, run.data.tags

    for key, mean in HAND_MEANS.items():
        assert metrics[key] == pytest.approx(mean, abs=1e-12), key
    # Every mean and interval of the JSON report, under its documented name.
    for metric, mean in report["metrics"].items():
        key = metric.replace("@", "_at_")
        assert metrics[key] == mean
        assert [metrics[f"{key}.ci_low"], metrics[f"{key}.ci_high"]] == report["intervals"][metric]
    for group in report["segments"]:
        where = f"segment.query_type.{group['segment']['value']}"
        for metric, mean in group["metrics"].items():
            key = f"{where}.{metric.replace('@', '_at_')}"
            assert metrics[key] == mean
            assert [metrics[f"{key}.ci_low"], metrics[f"{key}.ci_high"]] == group["intervals"][
                metric
            ]
        assert metrics[f"{where}.queries.scored"] == group["scored"] == 2
        assert metrics[f"{where}.coverage"] == 1.0
    assert metrics["queries.read"] == metrics["queries.scored"] == 4
    assert metrics["queries.skipped.unlabeled"] == 0
    assert metrics["judged_at_10"] == report["judged"]["mean"]

    assert params["rankgate.metrics"] == "mrr, ndcg@10"
    assert params["rankgate.gates"] == "mrr>=0.4, ndcg@10>=0.9"
    assert params["rankgate.sources"] == str(traces)
    assert params["rankgate.segment_by"] == "query_type"
    assert (params["rankgate.resamples"], params["rankgate.min_queries"]) == ("200", "1")
    assert params["rankgate.relevance_threshold"] == "1.0"
    assert params["rankgate.min_coverage"] == "none"

    gates = {key: value for key, value in tags.items() if key.startswith("rankgate.gate.")}
    assert gates == {
        "rankgate.gate.mrr.ge.0.4": "passed",
        "rankgate.gate.ndcg_at_10.ge.0.9": "failed",
        "rankgate.gate.segment.query_type.factual.mrr.ge.0.4": "passed",
        "rankgate.gate.segment.query_type.multi_hop.mrr.ge.0.4": "failed",
        "rankgate.gate.segment.query_type.factual.ndcg_at_10.ge.0.9": "failed",
        "rankgate.gate.segment.query_type.multi_hop.ndcg_at_10.ge.0.9": "failed",
    }
    assert tags["rankgate.passed"] == "false" and tags["rankgate.command"] == "eval"
    # The search docs/mlflow.md shows finds it.
    failing = store.client.search_runs([experiment_id], "tags.`rankgate.passed` = 'false'")
    assert [found.info.run_id for found in failing] == [run.info.run_id]
    assert tags["rankgate.version"] == rankgate.__version__

    assert _artifact_names(store, run.info.run_id) == {
        "rankgate/eval.json",
        "rankgate/eval.html",
        "rankgate/metric_names.json",
    }
    assert json.loads(_artifact(store, run.info.run_id, "rankgate/eval.json", tmp_path)) == report
    html = _artifact(store, run.info.run_id, "rankgate/eval.html", tmp_path)
    assert html.startswith("<!DOCTYPE html>") and "q4" in html  # --worst: the worst queries


def test_compare_logs_each_cell_flags_and_the_verdict(
    capsys: pytest.CaptureFixture[str], store: Store, tmp_path: Path
) -> None:
    baseline, regressed, _ = ab_traces(queries=300, seed=7)
    base = _write(tmp_path / "baseline.jsonl", baseline)
    cand = _write(tmp_path / "regressed.jsonl", regressed)
    name, experiment_id = _experiment(store, tmp_path)
    metric_args = [arg for metric in AB_METRICS for arg in ("-m", metric)]
    result = _run(capsys, "compare", base, cand, *metric_args, "--segment-by", "query_type",
                  "--resamples", "200", "--no-config", "--no-progress", "--format", "json",
                  "--mlflow", store.uri, "--mlflow-experiment", name)  # fmt: skip
    assert result.code == 1, result.err
    report = json.loads(result.out)
    run = _only_run(store, experiment_id)
    metrics, params, tags = run.data.metrics, run.data.params, run.data.tags

    statistics = ("baseline", "candidate", "delta", "p_adjusted")
    for cell in report["cells"]:
        group = "" if cell["segment"] is None else f"segment.query_type.{cell['segment']['value']}."
        key = group + cell["metric"].replace("@", "_at_")
        for statistic in statistics:
            value = cell["baseline_mean" if statistic == "baseline" else
                         "candidate_mean" if statistic == "candidate" else statistic]  # fmt: skip
            assert metrics[f"{key}.{statistic}"] == value, (key, statistic)
        low, high = cell["interval"]
        assert (metrics[f"{key}.delta.ci_low"], metrics[f"{key}.delta.ci_high"]) == (low, high)
        flag = {"regression": -1.0, "improvement": 1.0, None: 0.0}[cell["flag"]]
        assert metrics[f"{key}.flag"] == flag, key
    # By construction (tests/ab_data.py): the baseline finds every relevant document in its top
    # 20, and only multi_hop's NDCG was made worse.
    assert metrics["recall_at_20.baseline"] == 1.0
    assert metrics["segment.query_type.multi_hop.ndcg_at_10.flag"] == -1.0
    assert metrics["segment.query_type.factual.mrr.flag"] == 0.0
    regressed = "metrics.`segment.query_type.multi_hop.ndcg_at_10.flag` < 0"
    assert len(store.client.search_runs([experiment_id], regressed)) == 1
    assert metrics["regressions"] == report["regressions"] >= 1
    assert metrics["queries.paired"] == 300
    assert not any(key.startswith("candidate.") for key in metrics)  # one candidate: no part

    assert params["rankgate.baseline"] == report["baseline"]
    assert params["rankgate.candidates"] == str(cand)
    assert params["rankgate.design"] == "paired"
    assert (params["rankgate.correction"], params["rankgate.alpha"]) == ("holm", "0.05")
    assert tags["rankgate.passed"] == "false" and tags["rankgate.command"] == "compare"
    assert _artifact_names(store, run.info.run_id) == {
        "rankgate/compare.json",
        "rankgate/compare.html",
        "rankgate/metric_names.json",
    }
    assert (
        json.loads(_artifact(store, run.info.run_id, "rankgate/compare.json", tmp_path)) == report
    )


def _hostile_values() -> list[Any]:
    hashed_like = "multi_hop-" + hashlib.sha256(b"multi hop").hexdigest()[:8]
    return [
        "multi_hop",
        "multi hop",
        hashed_like,  # the hashed form of "multi hop", as a plain value of its own
        "a/../../b",
        "..",
        ".",
        "/",
        "",
        " ",
        "line\nbreak",
        "con:flict",
        "ndcg@10>=0.7",
        "x" * 300,
        "日本語",
        "\ud800",
        "build-deadbeef",
        3,
        True,
        None,
    ]


def _hostile_run(
    capsys: pytest.CaptureFixture[str], store: Store, tmp_path: Path
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    values = _hostile_values()
    records = [
        {"query_id": f"q{i}", "query_type": value, "retrieved_ids": ["a", "b"],
         "relevant_ids": ["b"]}
        for i, value in enumerate(values)
    ]  # fmt: skip
    traces = _write(tmp_path / "hostile.jsonl", records)
    name, experiment_id = _experiment(store, tmp_path)
    result = _run(capsys, "eval", traces, "-m", "mrr", "--segment-by", "query_type",
                  "-g", "mrr>=0.4", "--resamples", "0", "--no-config", "--no-progress",
                  "--format", "json", "--mlflow", store.uri, "--mlflow-experiment", name)  # fmt: skip
    assert result.code == 0, result.err
    run = _only_run(store, experiment_id)
    names = json.loads(_artifact(store, run.info.run_id, "rankgate/metric_names.json", tmp_path))
    return run, json.loads(result.out), names


def test_hostile_segment_values_get_valid_distinct_names_that_map_back(
    capsys: pytest.CaptureFixture[str], store: Store, tmp_path: Path
) -> None:
    run, report, names = _hostile_run(capsys, store, tmp_path)
    metrics, tags = run.data.metrics, run.data.tags
    for key in [*metrics, *run.data.params, *tags]:
        assert VALID_NAME.fullmatch(key) and ".." not in key, key
    # Every segment's mean under its own name, and metric_names.json says which segment it is.
    means = {
        names[key]["segment"]["value"]: value
        for key, value in metrics.items()
        if names[key]["metric"] == "mrr"
        and names[key]["statistic"] == "mean"
        and names[key]["segment"] is not None
    }
    expected = {group["segment"]["value"]: group["metrics"]["mrr"] for group in report["segments"]}
    assert len(expected) == 19 and means == expected
    assert metrics["segment.query_type.multi_hop.mrr"] == 0.5
    hashed = "segment.query_type.multi_hop-" + hashlib.sha256(b"multi hop").hexdigest()[:8]
    assert names[hashed + ".mrr"]["segment"]["value"] == "multi hop"
    assert (
        names["segment.query_type.build-deadbeef-" + _sha("build-deadbeef") + ".mrr"]["segment"][
            "value"
        ]
        == "build-deadbeef"
    )
    gates = [key for key in tags if key.startswith("rankgate.gate.segment.")]
    assert len(gates) == 19


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_names_that_still_collide_are_made_distinct(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every hash the same, as a crafted collision would make two of them: no value is lost."""
    monkeypatch.setattr(tracking, "_digest", lambda text: "0" * 8)
    run, report, names = _hostile_run(capsys, store, tmp_path)
    segment_means = [
        key
        for key in run.data.metrics
        if names[key]["metric"] == "mrr"
        and names[key]["statistic"] == "mean"
        and names[key]["segment"] is not None
    ]
    assert len(segment_means) == len(report["segments"]) == 19
    values = {names[key]["segment"]["value"] for key in segment_means}
    assert len(values) == 19


def test_the_python_api_logs_into_the_active_run_under_a_prefix(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.uri)
    _, experiment_id = _experiment(store, tmp_path)
    evaluation = rankgate.evaluate(HAND, ["mrr"], ["mrr>=0.4"], settings=rankgate.Settings(
        segment_by=("query_type",), resamples=0))  # fmt: skip
    with mlflow.start_run(experiment_id=experiment_id) as active:
        first = tracking.log_evaluation(evaluation, sources=["hand"], prefix="val")
        second = tracking.log_evaluation(evaluation, sources=["hand"], prefix="test")
        # The same params again under no prefix would be fine; other values are refused, in
        # one line naming MLflow.
        tracking.log_evaluation(evaluation, sources=["hand"])
        with pytest.raises(tracking.TrackingError, match=r"^MLflow at sqlite:.*rankgate.sources"):
            tracking.log_evaluation(evaluation, sources=["other"])
    assert first.run_id == second.run_id == active.info.run_id
    assert not first.created and first.experiment_id == experiment_id
    run = store.client.get_run(active.info.run_id)
    assert (
        run.data.metrics["val.mrr"]
        == run.data.metrics["test.mrr"]
        == pytest.approx(HAND_MEANS["mrr"], abs=1e-12)
    )
    assert run.data.metrics["val.segment.query_type.factual.mrr"] == pytest.approx(0.75)
    assert "val.mrr.ci_low" not in run.data.metrics  # no resamples: no interval, not logged
    assert run.data.params["val.rankgate.sources"] == "hand"
    assert run.data.tags["test.rankgate.gate.mrr.ge.0.4"] == "passed"
    assert "rankgate/val/eval.json" in _artifact_names(store, run.info.run_id, "rankgate/val")


def test_the_python_api_starts_and_ends_its_own_run(store: Store, tmp_path: Path) -> None:
    name, experiment_id = _experiment(store, tmp_path)
    comparison = rankgate.compare(HAND, HAND, metrics=["mrr"])
    logged = tracking.log_comparison(
        comparison, tracking_uri=store.uri, experiment=name, run_name="api"
    )
    assert logged.created and logged.experiment_id == experiment_id
    run = store.client.get_run(logged.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "api"
    assert run.data.metrics["mrr.delta"] == 0.0 and run.data.metrics["mrr.flag"] == 0.0
    assert run.data.tags["rankgate.passed"] == "true"


def test_several_candidates_each_get_a_candidate_part(store: Store, tmp_path: Path) -> None:
    name, _ = _experiment(store, tmp_path)
    worse = [{**record, "retrieved_ids": record["retrieved_ids"][::-1]} for record in HAND]
    comparison = rankgate.compare(
        rankgate.Variant("main", HAND),
        rankgate.Variant("same", HAND),
        rankgate.Variant("re ranked", worse),
        metrics=["mrr"],
        policy=rankgate.GatePolicy(min_queries=1),
    )
    logged = tracking.log_comparison(comparison, tracking_uri=store.uri, experiment=name)
    run = store.client.get_run(logged.run_id)
    metrics, params, tags = run.data.metrics, run.data.params, run.data.tags
    other = "candidate.re_ranked-" + hashlib.sha256(b"re ranked").hexdigest()[:8]
    assert metrics["candidate.same.mrr.delta"] == 0.0
    # Reversed rankings: q1 1 -> 1/3, q2 1/2 -> 1/2, q3 1/3 -> 1, q4 0 -> 0.
    assert metrics[f"{other}.mrr.candidate"] == pytest.approx((1 / 3 + 1 / 2 + 1) / 4)
    assert metrics[f"{other}.mrr.delta"] == comparison.cell("mrr", candidate="re ranked").delta
    assert params["rankgate.candidate.same.design"] == "paired"
    assert params["rankgate.candidates"] == "same, re ranked"
    assert tags["rankgate.candidate.same.passed"] == "true"
    assert "mrr.delta" not in metrics


def test_bare_mlflow_uses_mlflows_own_tracking_uri_and_experiment(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.uri)
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow")
    assert result.code == 0, result.err
    run_id = re.search(r"logged to MLflow run (\w+) \(experiment 0\)", result.err)
    assert run_id is not None, result.err
    run = store.client.get_run(run_id.group(1))
    assert run.data.metrics["mrr"] == pytest.approx(HAND_MEANS["mrr"], abs=1e-12)

    name = f"from-env-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", name)
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow")
    assert result.code == 0, result.err
    created = store.client.get_experiment_by_name(name)
    assert created is not None
    assert _only_run(store, created.experiment_id).data.metrics["mrr"] == run.data.metrics["mrr"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_server_or_a_bad_uri_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    port = _closed_port()
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "-g", "mrr>=0.99",
                  "--mlflow", f"http://user:secret@127.0.0.1:{port}")  # fmt: skip
    line = result.one_line_error("cannot reach the MLflow tracking server", "Connection refused")
    assert "secret" not in line
    other = _write(tmp_path / "candidate.jsonl", HAND)
    result = _run(capsys, "compare", traces, other, "-m", "mrr", "--no-config", "--no-progress",
                  "--mlflow", f"http://127.0.0.1:{port}")  # fmt: skip
    result.one_line_error(f"http://127.0.0.1:{port}")
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow", "nosuchscheme://host")
    result.one_line_error("MLflow at nosuchscheme://host")
    with pytest.raises(tracking.TrackingError, match="cannot reach"):
        tracking.log_evaluation(
            rankgate.evaluate(HAND, ["mrr"]), tracking_uri=f"http://127.0.0.1:{port}"
        )


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    # argparse gave the optional URI the trace file: said, not read as a store.
    _run(capsys, "eval", "--mlflow", traces, *EVAL_ARGS).one_line_error(
        "not a tracking URI", "after the inputs"
    )
    _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow-experiment", "x").one_line_error(
        "--mlflow-experiment applies to --mlflow"
    )
    with pytest.raises(rankgate.ConfigError, match="prefix"):
        tracking.log_evaluation(rankgate.evaluate(HAND, ["mrr"]), prefix="a.b")


def test_without_mlflow_installed_the_flag_names_the_extra(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # importing it now raises ImportError
    _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow").one_line_error(
        "pip install 'rankgate[mlflow]'"
    )
    other = _write(tmp_path / "candidate.jsonl", HAND)
    _run(capsys, "compare", traces, other, "--no-config", "--mlflow").one_line_error(
        "pip install 'rankgate[mlflow]'"
    )
    with pytest.raises(UsageError, match=r"pip install 'rankgate\[mlflow\]'"):
        tracking.log_evaluation(rankgate.evaluate(HAND, ["mrr"]))


def test_mlflow_is_imported_only_when_logging(tmp_path: Path) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    script = (
        "import sys\n"
        "import rankgate, rankgate.integrations.mlflow\n"
        "from rankgate.cli import main\n"
        f"code = main(['eval', {str(traces)!r}, '-m', 'mrr', '--no-config', '--no-progress'])\n"
        "assert code == 0, code\n"
        "assert 'mlflow' not in sys.modules, 'mlflow was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_the_python_api_masks_a_password_in_its_error(tmp_path: Path) -> None:
    import rankgate
    from rankgate.integrations.mlflow import TrackingError, log_evaluation

    traces = tmp_path / "t.jsonl"
    traces.write_text('{"query_id": "q1", "retrieved_ids": ["d1"], "relevant_ids": ["d1"]}\n')
    evaluation = rankgate.evaluate(str(traces), ["map"])
    with pytest.raises(TrackingError) as raised:
        log_evaluation(evaluation, tracking_uri="nosuch://alice:S3cretPW@host/x")
    assert "S3cretPW" not in str(raised.value)


def test_a_token_in_the_tracking_uri_is_masked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    port = _closed_port()
    result = _run(capsys, "eval", traces, *EVAL_ARGS,
                  "--mlflow", f"http://127.0.0.1:{port}/?token=T0kenValue&x=1")  # fmt: skip
    line = result.one_line_error("cannot reach the MLflow tracking server", "token=***")
    assert "T0kenValue" not in line
    with pytest.raises(tracking.TrackingError) as raised:
        tracking.log_evaluation(
            rankgate.evaluate(HAND, ["mrr"]),
            tracking_uri=f"http://127.0.0.1:{port}/?access_token=T0kenValue",
        )
    assert "T0kenValue" not in str(raised.value)


def test_a_password_masked_twice_keeps_the_sentence_around_it() -> None:
    from rankgate.cli.terminal import mask_credentials

    assert (
        mask_credentials("postgresql://u:pw@h/db?password=***: connection refused")
        == "postgresql://u:***@h/db?password=***: connection refused"
    )


def test_a_trace_store_is_never_taken_for_the_tracking_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    assert main(["trace", "import", str(traces), "--store", "sqlite:///store.db"]) == 0
    before = (tmp_path / "store.db").read_bytes()
    # argparse hands --mlflow the store meant as the input, with or without another input.
    for args in (["--mlflow", "sqlite:///store.db", traces], ["--mlflow", "sqlite:///store.db"]):
        _run(capsys, "eval", *args, *EVAL_ARGS).one_line_error(
            "is a rankgate trace store, not an MLflow tracking store", "after the inputs"
        )
    assert (tmp_path / "store.db").read_bytes() == before  # MLflow created no table in it


def test_an_unreachable_tracking_database_fails_at_once_without_mlflows_chatter(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    traces = _write(tmp_path / "traces.jsonl", HAND)
    port = _closed_port()
    # MLflow's own client retries a refused database for about 100 s: one attempt, one line.
    result = _run(capsys, "eval", traces, *EVAL_ARGS,
                  "--mlflow", f"postgresql://alice:S3cretPW@127.0.0.1:{port}/mlflow")  # fmt: skip
    line = result.one_line_error("cannot reach the MLflow tracking store", f":{port}")
    assert "S3cretPW" not in line
    # A new SQLite tracking store is made without MLflow's INFO lines on stderr.
    result = _run(capsys, "eval", traces, *EVAL_ARGS, "--mlflow", "sqlite:///fresh.db")
    assert result.code == 0, result.err
    assert result.err.strip().splitlines() == [
        line for line in result.err.strip().splitlines() if line.startswith("logged to MLflow run")
    ]
