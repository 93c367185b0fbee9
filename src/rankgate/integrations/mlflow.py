"""Log an ``Evaluation`` or a ``Comparison`` to MLflow (``rankgate[mlflow]``): means, intervals and
cells as metrics, the settings as params, the verdicts as tags, the JSON and HTML reports as
artifacts. docs/mlflow.md documents every name.

MLflow is imported only when something is logged, so ``import rankgate`` and every command run
without ``--mlflow`` stay free of it.

Each call has two phases. The first is pure: it turns the JSON report (``report.json_report``, so
MLflow shows the very numbers the report does) into names and values. The second talks to MLflow;
anything raised there comes from the tracking server, its store or the network, the user's
environment rather than rankgate, and becomes one ``TrackingError``.

Names. MLflow accepts alphanumerics, ``_ - . /`` and space in a metric, param or tag name (and
``:`` outside Windows), at most 250 characters, and refuses a name that a path normalisation would
change (``a//b``, ``..``). Segment values come from the traces, so they are untrusted: a value made
of ``[A-Za-z0-9_-]`` (at most 64 characters) is used as it is; any other gets its safe characters
(at most 32) and ``-`` and 8 hex digits of its SHA-256, so ``multi hop`` becomes
``multi_hop-<hash>``. A plain value that happens to end like a hash is hashed too, so the two
forms never meet. Segment fields and candidate names may also hold dots between plain runs
(``meta.query_type``). Dots separate the parts of a name, and ``/`` and space never appear.
Should two names of one call still coincide (a crafted hash collision), the later one gets
``-2``, ``-3``...; and ``rankgate/metric_names.json`` maps every name logged back to its
metric, segment, candidate and statistic.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rankgate import __version__
from rankgate.cli.terminal import mask_credentials
from rankgate.errors import ConfigError, RankgateError
from rankgate.evaluate import require_extra
from rankgate.io.paths import shown

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rankgate.compare import Comparison
    from rankgate.evaluate import Evaluation

__all__ = ["LoggedRun", "TrackingError", "log_comparison", "log_evaluation"]

#: MLflow's limits (``mlflow.utils.validation``): the length of a key, of a param value, and the
#: entities one ``log_batch`` request may carry.
MAX_KEY_LENGTH = 250
MAX_PARAM_LENGTH = 6000
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100

#: The artifact folder of a run that holds the reports.
ARTIFACT_DIR = "rankgate"
PART_LENGTH = 64
STEM_LENGTH = 32
DIGEST_LENGTH = 8
#: How long the reachability check of an HTTP tracking server waits for any answer, in seconds.
REACH_TIMEOUT = 10
_MESSAGE_LENGTH = 400

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_PLAIN_DOTTED = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_HASHED_TAIL = re.compile(rf"-[0-9a-f]{{{DIGEST_LENGTH}}}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_UNSAFE_METRIC = re.compile(r"[^A-Za-z0-9_.-]+")
_OPERATORS = {">=": "ge", ">": "gt", "<=": "le", "<": "lt"}
_STATUSES = {"pass": "passed", "fail": "failed"}
_FLAGS = {"regression": -1.0, "improvement": 1.0}
#: What metric_names.json says of each name: the keys a name may leave unset are there as null.
_NO_MEANING = {"metric": None, "segment": None, "candidate": None}
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


class TrackingError(RankgateError):
    """MLflow could not be reached, or refused what was logged: a tracking URI with no server
    behind it, an unknown scheme, a run that already holds a param with another value."""


@dataclass(frozen=True, slots=True)
class LoggedRun:
    """Where a call logged: the run, its experiment, the tracking URI, and whether the call
    created the run (and ended it) or logged into one that was already there."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    created: bool


def log_evaluation(
    evaluation: Evaluation,
    *,
    sources: Sequence[str] = (),
    run_id: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    run_name: str | None = None,
    prefix: str | None = None,
) -> LoggedRun:
    """Log an evaluation to MLflow: overall and per-segment means and 95% intervals, query counts
    and coverage as metrics; the settings as params; each gate's verdict and ``rankgate.passed``
    as tags; ``eval.json``, ``eval.html`` and ``metric_names.json`` under ``rankgate/``.

    Args:
        evaluation: what ``rankgate.evaluate`` returned.
        sources: the inputs' names, as the reports show them (param ``rankgate.sources``).
        run_id: log into this run (left running).
        tracking_uri: the tracking server or store (default: MLflow's own choice,
            ``mlflow.set_tracking_uri`` or ``MLFLOW_TRACKING_URI``, else ``./mlflow.db``).
        experiment: the experiment of a new run, by name, created when missing (default:
            MLflow's, ``MLFLOW_EXPERIMENT_NAME``/``MLFLOW_EXPERIMENT_ID`` or Default).
        run_name: the name of a new run (default: MLflow's generated one).
        prefix: put before every metric, param and tag key, with a dot (``val`` logs
            ``val.ndcg_at_10``); the reports go to ``rankgate/val/``. For logging several
            evaluations into one run. Letters, digits, ``_`` and ``-``.

    Which run: ``run_id`` when given. Otherwise, when none of ``tracking_uri``, ``experiment``
    and ``run_name`` asks for a new run, the run active in this process (``with
    mlflow.start_run():``), else the run ``MLFLOW_RUN_ID`` names; these are left running. Else a
    new run, ended as FINISHED (FAILED when logging breaks off).

    Raises:
        UsageError: mlflow is not installed.
        ConfigError: ``prefix`` is not a plain name part.
        TrackingError: MLflow could not be reached or refused what was logged.
    """
    require_extra("mlflow", "log_evaluation()")
    content = _evaluation_content(evaluation, sources, _checked_prefix(prefix))
    return _log(content, run_id, tracking_uri, experiment, run_name)


def log_comparison(
    comparison: Comparison,
    *,
    run_id: str | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    run_name: str | None = None,
    prefix: str | None = None,
) -> LoggedRun:
    """Log a comparison to MLflow: per cell (metric x segment, per candidate) both means, the
    delta, its 95% interval, the adjusted p-value and the flag (-1 regression, 1 improvement,
    0 neither) as metrics, with the counts of flagged cells; the settings as params; each
    candidate's gates and ``rankgate.passed`` as tags; ``compare.json``, ``compare.html`` and
    ``metric_names.json`` under ``rankgate/``. The other arguments, the choice of run and the
    errors are those of ``log_evaluation``.
    """
    require_extra("mlflow", "log_comparison()")
    content = _comparison_content(comparison, _checked_prefix(prefix))
    return _log(content, run_id, tracking_uri, experiment, run_name)


# --- what is logged: pure ---------------------------------------------------------------------


@dataclass
class _RunContent:
    """Everything one call logs, by MLflow key; ``artifacts`` maps a file name to its text."""

    prefix: str
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    meanings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def metric(self, parts: Iterable[str], value: Any, **meaning: Any) -> None:
        """One metric, unless its value is undefined (null in the JSON report: not logged)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not math.isfinite(value):
            return
        name = _unique(self._key(parts), self.metrics)
        self.metrics[name] = float(value)
        self.meanings[name] = {**_NO_MEANING, **meaning}

    def param(self, parts: Iterable[str], value: Any) -> None:
        self.params[_unique(self._key(["rankgate", *parts]), self.params)] = _param_text(value)

    def tag(self, parts: Iterable[str], value: str) -> None:
        self.tags[_unique(self._key(["rankgate", *parts]), self.tags)] = _clean_text(value)

    def _key(self, parts: Iterable[str]) -> str:
        return _capped(".".join([*([self.prefix] if self.prefix else []), *parts]))


def _evaluation_content(
    evaluation: Evaluation, sources: Sequence[str], prefix: str = ""
) -> _RunContent:
    """What ``log_evaluation`` logs, as names and values (nothing is sent)."""
    from rankgate.report.html import render_eval_html
    from rankgate.report.json_report import eval_report, render_json

    report = eval_report(evaluation, list(sources))
    content = _RunContent(prefix)
    summary = report["summary"]
    _group_metrics(content, [], report, None, summary)
    for reason, count in summary["skipped"].items():
        content.metric(["queries", "skipped", reason], count, statistic=f"skipped {reason}")
    content.metric(
        ["queries", "missing_trace"], summary["missing_trace"], statistic="missing_trace"
    )
    for group in report["segments"]:
        _group_metrics(content, _segment_parts(group["segment"]), group, group["segment"], group)

    content.param(["sources"], list(sources))
    content.param(["metrics"], list(report["metrics"]))
    content.param(["gates"], list(dict.fromkeys(_gate_text(gate) for gate in report["gates"])))
    for key, value in report["settings"].items():
        content.param([key], value)

    _common_tags(content, "eval", report["passed"])
    for gate in report["gates"]:
        _gate_tag(content, [], gate)
    for check in report["coverage_checks"]:
        content.tag(["coverage", *_segment_parts(check["segment"])], _passed(check["passed"]))

    _artifacts(content, "eval", render_json(report), render_eval_html(evaluation, list(sources)))
    return content


def _comparison_content(comparison: Comparison, prefix: str = "") -> _RunContent:
    """What ``log_comparison`` logs, as names and values (nothing is sent)."""
    from rankgate.report.html import render_comparison_html
    from rankgate.report.json_report import comparison_report, render_json

    report = comparison_report(comparison)
    content = _RunContent(prefix)
    several = len(report["candidates"]) > 1
    # With one candidate (the usual case) names carry no candidate part, so nightly runs chart
    # together whatever the candidate's file is called.
    parts_of = {
        name: (["candidate", _name_part(name, dotted=True)] if several else [])
        for name in report["candidates"]
    }
    for cell in report["cells"]:
        candidate = cell["candidate"]
        base = [
            *parts_of[candidate],
            *_segment_parts(cell["segment"]),
            _metric_part(cell["metric"]),
        ]
        meaning = {"metric": cell["metric"], "segment": cell["segment"], "candidate": candidate}
        low, high = cell["interval"]
        for statistic, value in (
            ("baseline", cell["baseline_mean"]),
            ("candidate", cell["candidate_mean"]),
            ("delta", cell["delta"]),
            ("delta.ci_low", low),
            ("delta.ci_high", high),
            ("p_adjusted", cell["p_adjusted"]),
            ("flag", _FLAGS.get(cell["flag"] or "", 0.0)),
        ):
            content.metric([*base, statistic], value, **meaning, statistic=statistic)
    for count in ("regressions", "improvements", "label_limited", "underpowered"):
        content.metric([count], report[count], statistic=count)
    for result in report["results"]:
        name = result["name"]
        parts = parts_of[name]
        for count, value in (("paired", result["pairing"]["paired"]), ("scored", result["scored"])):
            content.metric([*parts, "queries", count], value, candidate=name, statistic=count)
        content.param([*parts, "design"], result["design"]["design"])
        for gate in result["gates"]:
            _gate_tag(content, parts, gate)
        if several:
            content.tag([*parts, "passed"], _true(result["passed"]))

    content.param(["baseline"], report["baseline"])
    content.param(["candidates"], report["candidates"])
    content.param(["metrics"], list(dict.fromkeys(cell["metric"] for cell in report["cells"])))
    gates = (_gate_text(gate) for result in report["results"] for gate in result["gates"])
    content.param(["gates"], list(dict.fromkeys(gates)))
    content.param(["labels_source"], report["labels_source"])
    for key, value in report["settings"].items():
        content.param([key], value)

    _common_tags(content, "compare", report["passed"])
    _artifacts(content, "compare", render_json(report), render_comparison_html(comparison))
    return content


def _group_metrics(
    content: _RunContent, parts: list[str], group: Mapping[str, Any], segment: Any, counts: Any
) -> None:
    """Means, intervals, the judged share, counts and coverage of one group (overall: no parts;
    ``counts`` holds ``read``, ``scored`` and ``coverage``)."""
    for metric, mean in group["metrics"].items():
        base = [*parts, _metric_part(metric)]
        meaning = {"metric": metric, "segment": segment}
        content.metric(base, mean, **meaning, statistic="mean")
        bounds = group["intervals"].get(metric)
        if bounds is not None:
            content.metric([*base, "ci_low"], bounds[0], **meaning, statistic="ci_low")
            content.metric([*base, "ci_high"], bounds[1], **meaning, statistic="ci_high")
    judged = group.get("judged")
    if judged is not None and judged["metric"] not in group["metrics"]:
        meaning = {"metric": judged["metric"], "segment": segment}
        content.metric(
            [*parts, _metric_part(judged["metric"])], judged["mean"], **meaning, statistic="mean"
        )
    for count in ("read", "scored"):
        content.metric([*parts, "queries", count], counts[count], segment=segment, statistic=count)
    content.metric([*parts, "coverage"], counts["coverage"], segment=segment, statistic="coverage")


def _gate_tag(content: _RunContent, parts: list[str], gate: Mapping[str, Any]) -> None:
    """``rankgate.gate.[segment.F.V.]ndcg_at_10.ge.0.7`` = passed, failed or insufficient."""
    threshold = _UNSAFE_METRIC.sub("", format(gate["threshold"], "g"))
    key = [
        "gate",
        *parts,
        *_segment_parts(gate["segment"]),
        _metric_part(gate["metric"]),
        _OPERATORS[gate["op"]],
        threshold,
    ]
    content.tag(key, _STATUSES.get(gate["status"], gate["status"]))


def _gate_text(gate: Mapping[str, Any]) -> str:
    return f"{gate['metric']}{gate['op']}{gate['threshold']:g}"


def _common_tags(content: _RunContent, command: str, passed: bool) -> None:
    content.tag(["command"], command)
    content.tag(["version"], __version__)
    content.tag(["passed"], _true(passed))


def _artifacts(content: _RunContent, command: str, report_json: str, report_html: str) -> None:
    content.artifacts[f"{command}.json"] = report_json
    content.artifacts[f"{command}.html"] = report_html
    # ASCII-escaped, so a value with a lone surrogate reads back exactly.
    content.artifacts["metric_names.json"] = (
        json.dumps(content.meanings, indent=2, ensure_ascii=True, sort_keys=True) + "\n"
    )


def _segment_parts(segment: Mapping[str, str] | None) -> list[str]:
    if segment is None:
        return []
    return ["segment", _name_part(segment["field"], dotted=True), _name_part(segment["value"])]


def _metric_part(metric: str) -> str:
    """A canonical metric spec as a name part: ``ndcg@10`` -> ``ndcg_at_10``,
    ``ndcg(gain=linear)@10`` -> ``ndcg_gain_linear_at_10``, ``rbp(p=0.9)`` -> ``rbp_p_0.9``."""
    text = metric.replace("(", "_").replace("=", "_").replace(",", "_").replace(")", "")
    return _UNSAFE_METRIC.sub("_", text.replace("@", "_at_"))


def _name_part(text: str, *, dotted: bool = False) -> str:
    """A value from the data (or a field, a candidate: ``dotted``) as one part of a name: as it
    is when plain, else its safe characters and a hash of the whole (see the module docstring)."""
    plain = (_PLAIN_DOTTED if dotted else _PLAIN).fullmatch(text)
    if plain and len(text) <= PART_LENGTH and not _HASHED_TAIL.search(text):
        return text
    stem = _UNSAFE.sub("_", text).strip("_")[:STEM_LENGTH].strip("_") or "_"
    return f"{stem}-{_digest(text)}"


def _digest(text: str) -> str:
    # surrogatepass: a lone surrogate from a JSON string still hashes, and to its own value.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LENGTH]


def _capped(name: str) -> str:
    """``name`` within MLflow's key length: a longer one is cut and ends in a hash of the whole."""
    if len(name) <= MAX_KEY_LENGTH:
        return name
    return f"{name[: MAX_KEY_LENGTH - DIGEST_LENGTH - 1]}-{_digest(name)}"


def _unique(name: str, taken: Mapping[str, Any]) -> str:
    """``name``, or ``name-2``, ``name-3``... when an earlier name of the call already took it."""
    number = 1
    candidate = name
    while candidate in taken:
        number += 1
        suffix = f"-{number}"
        candidate = name[: MAX_KEY_LENGTH - len(suffix)] + suffix
    return candidate


def _param_text(value: Any) -> str:
    if value is None:
        text = "none"
    elif isinstance(value, bool):
        text = _true(value)
    elif isinstance(value, (list, tuple)):
        text = ", ".join(_param_text(item) for item in value)
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    text = _clean_text(text)
    if len(text) > MAX_PARAM_LENGTH:
        text = text[: MAX_PARAM_LENGTH - 3] + "..."
    return text


def _clean_text(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (from a file name, say) written escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _true(value: bool) -> str:
    return "true" if value else "false"


def _passed(value: bool) -> str:
    return "passed" if value else "failed"


def _checked_prefix(prefix: str | None) -> str:
    if prefix is None or prefix == "":
        return ""
    if not isinstance(prefix, str) or not _PLAIN.fullmatch(prefix) or len(prefix) > PART_LENGTH:
        raise ConfigError(
            f"prefix must be letters, digits, '_' or '-' (at most {PART_LENGTH}), got {prefix!r}"
        )
    return prefix


# --- logging: MLflow ----------------------------------------------------------------------------


def _log(
    content: _RunContent,
    run_id: str | None,
    tracking_uri: str | None,
    experiment: str | None,
    run_name: str | None,
) -> LoggedRun:
    import mlflow

    uri = tracking_uri
    try:
        uri = tracking_uri or mlflow.get_tracking_uri()
        _check_reachable(uri)
        with _quiet_mlflow_logs():
            return _send(content, uri, run_id, tracking_uri is not None, experiment, run_name)
    except TrackingError:
        raise
    except Exception as problem:  # the tracking server's, its store's or the network's
        where = "MLflow" if uri is None else f"MLflow at {shown(uri)}"
        raise TrackingError(f"{where}: {_first_line(problem)}") from problem


def _send(
    content: _RunContent,
    uri: str,
    run_id: str | None,
    uri_given: bool,
    experiment: str | None,
    run_name: str | None,
) -> LoggedRun:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    reused = run_id
    if reused is None and not (uri_given or experiment is not None or run_name is not None):
        reused = _current_run_id()
    if reused is not None:
        experiment_id = client.get_run(reused).info.experiment_id
        target = reused
    else:
        experiment_id = _experiment_id(client, experiment, uri_given)
        target = client.create_run(experiment_id, run_name=run_name).info.run_id
    try:
        _write(client, target, content)
    except BaseException:
        if reused is None:
            # The first failure is the one to report.
            with contextlib.suppress(Exception):
                client.set_terminated(target, status="FAILED")
        raise
    if reused is None:
        client.set_terminated(target)
    return LoggedRun(target, experiment_id, uri, created=reused is None)


def _write(client: MlflowClient, run_id: str, content: _RunContent) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, 0) for key, value in content.metrics.items()]
    for batch in _batches(metrics, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=batch)
    params = [Param(key, value) for key, value in content.params.items()]
    for batch in _batches(params, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=batch)
    tags = [RunTag(key, value) for key, value in content.tags.items()]
    for batch in _batches(tags, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, tags=batch)
    with tempfile.TemporaryDirectory(prefix="rankgate-mlflow-") as folder:
        for name, text in content.artifacts.items():
            # A lone surrogate from a broken trace ID is written escaped, as in every report.
            Path(folder, name).write_text(text, encoding="utf-8", errors="backslashreplace")
        where = ARTIFACT_DIR if not content.prefix else f"{ARTIFACT_DIR}/{content.prefix}"
        client.log_artifacts(run_id, folder, artifact_path=where)


def _batches(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _current_run_id() -> str | None:
    """The run active in this process, else the one ``MLFLOW_RUN_ID`` names (``mlflow run``
    sets it for the code it runs)."""
    import mlflow

    active = mlflow.active_run()
    if active is not None:
        return str(active.info.run_id)
    return os.environ.get("MLFLOW_RUN_ID") or None


def _experiment_id(client: MlflowClient, experiment: str | None, uri_given: bool) -> str:
    """The experiment named (created when missing), else MLflow's choice: the environment's
    (``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME``), then ``mlflow.set_experiment``'s
    when logging to MLflow's own tracking URI, then the Default experiment."""
    if experiment is not None:
        return _named_experiment(client, experiment)
    named_id = os.environ.get("MLFLOW_EXPERIMENT_ID")
    if named_id:
        return str(client.get_experiment(named_id).experiment_id)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        return _named_experiment(client, name)
    if not uri_given:
        from mlflow.tracking import fluent

        # set by mlflow.set_experiment(); private, hence looked up with a fallback
        active = getattr(fluent, "_active_experiment_id", None)
        if active:
            return str(active)
    return "0"  # MLflow's Default experiment


def _named_experiment(client: MlflowClient, name: str) -> str:
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return str(client.create_experiment(name))
        except MlflowException as problem:
            # Another job created it since: take theirs.
            found = client.get_experiment_by_name(name)
            if found is None:
                raise problem from None
    if found.lifecycle_stage == "deleted":
        raise TrackingError(
            f"MLflow experiment {name!r} is deleted: restore it or log to another experiment"
        )
    return str(found.experiment_id)


@contextlib.contextmanager
def _quiet_mlflow_logs() -> Iterator[None]:
    """MLflow's INFO lines (creating a SQLite store's tables, migrating them) kept off stderr,
    which carries rankgate's own messages; its warnings still show."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# Tracking stores MLflow reaches through SQLAlchemy: a database server, which its client retries
# for about 100 seconds when refused.
_DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")


def _check_reachable(uri: str) -> None:
    """Ask the tracking server or database for any answer at all, once and briefly: MLflow's own
    client retries a refused connection for minutes before it gives up."""
    scheme = urlsplit(uri).scheme.lower()
    if scheme.split("+")[0] in _DATABASE_SCHEMES:
        _check_database(uri)
        return
    if scheme not in ("http", "https"):
        return
    try:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request
    except ImportError:  # moved in another MLflow version: logging will tell
        return
    try:
        http_request(  # type: ignore[no-untyped-call]
            get_default_host_creds(uri),  # type: ignore[no-untyped-call]
            "/health",
            "GET",
            max_retries=0,
            timeout=REACH_TIMEOUT,
            raise_on_status=False,
        )
    except Exception as problem:
        text = str(problem)
        found = _ERRNO.search(text)
        reason = found.group(1).strip() if found else _first_line(problem)
        if "timed out" in text.lower() or "timeout" in text.lower():
            reason = f"no answer within {REACH_TIMEOUT} s"
        raise TrackingError(
            f"cannot reach the MLflow tracking server at {shown(uri)}: {reason}"
        ) from problem


def _check_database(uri: str) -> None:
    """One connection attempt to a database tracking store, through SQLAlchemy as MLflow makes
    it, with a short connect timeout (PostgreSQL's and MySQL's drivers take one)."""
    import sqlalchemy

    options = {} if uri.lower().startswith("mssql") else {"connect_timeout": REACH_TIMEOUT}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=options)
    except Exception as problem:  # no driver for the scheme, a malformed URL
        raise TrackingError(
            f"MLflow tracking store {shown(uri)}: {_first_line(problem)}"
        ) from problem
    try:
        with engine.connect():
            pass
    except Exception as problem:
        raise TrackingError(
            f"cannot reach the MLflow tracking store at {shown(uri)}: {_first_line(problem)}"
        ) from problem
    finally:
        engine.dispose()


def _first_line(problem: BaseException) -> str:
    """The first non-empty line of an exception's message (MLflow appends pages of advice), with
    URL passwords masked."""
    # MLflow quotes the URI it was given, password and all: mask it before it reaches a message.
    message = mask_credentials(str(getattr(problem, "message", None) or problem))
    line = next((text.strip() for text in message.splitlines() if text.strip()), "")
    if not line:
        return type(problem).__name__
    return line if len(line) <= _MESSAGE_LENGTH else line[:_MESSAGE_LENGTH] + "..."
