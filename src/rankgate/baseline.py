"""A saved baseline: what a later comparison needs of one evaluation, in one small Parquet file.

"Did this pull request make retrieval worse than main?" needs main's numbers, not main's raw
traces. ``save_baseline`` keeps, per scored query, its ID, the values of every metric the run
computed (the requested ones and the evidence ``compare`` reads for unjudged documents), its
segment values and a digest of the labels it was scored with; it also keeps the IDs of the valid
queries it read but did not score (no labels), so that a comparison pairs queries and measures
their overlap as one against the traces would. The file's metadata holds the scoring settings
and the rankgate version. ``compare(path_to_baseline, candidate)`` then uses it
as the baseline side: paired by query, with the same statistics and flags as a trace-vs-trace
comparison, because the cells are computed from the same per-query values.

A comparison is meaningless when the two sides were scored differently, so ``SavedBaseline.check``
refuses one with a clear line when a metric is missing from the file, a metric's definition
changed, the relevance threshold, the empty-relevant policy or the document-ID mapping differs,
and (per paired query) when the labels differ from the ones the baseline was scored with.

The file is Parquet (zstd), named ``*.rgb`` by convention: a ``query_id`` column, ``label_digest``
(uint64, 0 when unknown), ``scored`` (bool), one ``segment:<field>`` text column per segment
field and one ``metric:<spec>`` float64 column per metric, null on the unscored rows (a file
without ``scored`` holds scored rows only); the schema metadata key ``rankgate.baseline`` holds
the settings as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.errors import InputError, UsageError
from rankgate.evaluate import SKIP_REASONS, Evaluation, Settings, Summary
from rankgate.gates import Gate, GatePolicy, decide
from rankgate.label_digest import UNKNOWN
from rankgate.metrics import registry
from rankgate.segments import GroupCounts, SegmentKey, split_by_segment, summarise
from rankgate.spec import MetricSpec, make_metric, parse_metric

__all__ = [
    "BASELINE_SUFFIX",
    "FORMAT_VERSION",
    "SavedBaseline",
    "baseline_options",
    "is_saved_baseline",
    "load_baseline",
    "save_baseline",
]

BASELINE_SUFFIX = ".rgb"
FORMAT_VERSION = 1
METADATA_KEY = b"rankgate.baseline"
METRIC_PREFIX = "metric:"
SEGMENT_PREFIX = "segment:"
#: How many differing queries a refusal names.
EXAMPLES = 3


def definition_digest(spec: MetricSpec) -> str:
    """A short digest of what a metric means: its registry definition (formula, edge cases,
    declared parameters) and the spec's own parameters. Two runs whose digests differ computed
    different things under the same name."""
    definition = registry.get(spec.name)
    text = json.dumps(
        [
            str(spec),
            definition.formula,
            definition.edge_cases,
            [(p.name, repr(p.default)) for p in definition.params],
        ]
    )
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _settings_record(settings: Settings) -> dict[str, Any]:
    return {
        "relevance_threshold": settings.relevance_threshold,
        "empty_relevant": settings.empty_relevant,
        "doc_ids": None if settings.doc_ids is None else str(settings.doc_ids),
        "missing_trace": settings.missing_trace,
    }


def baseline_options(
    metrics: Any, gates: Sequence[Gate | str] = (), policy: GatePolicy | None = None
) -> dict[str, Any]:
    """The ``evaluate`` arguments a baseline needs beyond the report: label digests, and the
    values compare's unjudged-document evidence reads, so that a comparison against the file
    decides label-limited cells as one against the traces would::

        evaluation = evaluate(traces, metrics, **baseline_options(metrics))
        save_baseline(evaluation, "main.rgb")
    """
    from rankgate.compare_unjudged import evidence_specs, judged_depth, requested_metrics

    requested = requested_metrics(metrics, gates, policy or GatePolicy())
    return {
        "label_digests": True,
        "extra_metrics": evidence_specs(requested, judged_depth(requested)),
    }


def save_baseline(evaluation: Evaluation, path: str | Path, *, sources: Sequence[str] = ()) -> int:
    """Write ``evaluation`` as a baseline file at ``path``; the bytes written.

    The evaluation should carry label digests (``evaluate(..., label_digests=True)``), without
    which a later comparison cannot check its labels (it says so), and the evidence metrics
    (``compare_unjudged.evidence_specs``), without which its cells get no unjudged-document
    evidence: ``evaluate(..., **baseline_options(metrics))`` asks for both, as
    ``rankgate eval --save-baseline`` does.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rankgate import __version__

    scored = len(evaluation.query_ids)
    unscored = evaluation.unscored_query_ids
    unscored = (
        pa.array([], pa.large_string()) if unscored is None else unscored.cast(pa.large_string())
    )
    extra = len(unscored)
    columns: dict[str, Any] = {
        "query_id": pa.concat_arrays([_ids_array(evaluation.query_ids), unscored]),
        "scored": pa.array(np.arange(scored + extra) < scored, pa.bool_()),
    }
    digests = evaluation.label_digests
    saved_digests = np.full(scored + extra, UNKNOWN, dtype=np.uint64)
    if digests is not None:
        saved_digests[:scored] = digests
    columns["label_digest"] = pa.array(saved_digests, pa.uint64())
    fields = list(evaluation.segment_values)
    for name in fields:
        columns[SEGMENT_PREFIX + name] = pa.array(
            [*evaluation.segment_column(name), *([""] * extra)], pa.large_string()
        )
    unscored_rows = np.arange(scored + extra) >= scored
    for spec, values in evaluation.values.items():
        # The queries read but not scored have no value: null, never a number.
        columns[METRIC_PREFIX + str(spec)] = pa.array(
            np.concatenate([values, np.zeros(extra)]), pa.float64(), mask=unscored_rows
        )
    meta = {
        "format": FORMAT_VERSION,
        "rankgate_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "sources": list(sources),
        "metrics": [str(spec) for spec in evaluation.metrics],
        "definitions": {str(spec): definition_digest(spec) for spec in evaluation.values},
        "settings": _settings_record(evaluation.settings),
        "segment_fields": fields,
        "label_digests": digests is not None,
        "summary": {
            "read": evaluation.summary.read,
            "scored": evaluation.summary.scored,
            "labeled": evaluation.summary.labeled,
            "skipped": dict(evaluation.summary.skipped),
        },
    }
    table = pa.table(columns).replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})
    target = Path(path)
    try:
        pq.write_table(table, target, compression="zstd")
    except OSError as problem:
        raise UsageError(f"cannot write the baseline to {path}: {problem}") from None
    return target.stat().st_size


def _ids_array(query_ids: Sequence[str]) -> Any:
    to_arrow = getattr(query_ids, "to_arrow", None)  # ``attributes.QueryIds``
    return to_arrow() if to_arrow is not None else fast.text_array(list(query_ids))


def is_saved_baseline(item: Any) -> bool:
    """Whether a source argument names a baseline file (by its ``.rgb`` name)."""
    if isinstance(item, (str, Path)) and "://" not in str(item):
        return str(item).lower().endswith(BASELINE_SUFFIX)
    return False


@dataclass(frozen=True, eq=False)
class SavedBaseline:
    """A baseline file read back: its table and its settings."""

    name: str
    #: The scored queries' rows.
    table: Any
    meta: dict[str, Any]
    #: The queries whose traces were read but not scored (no labels), an Arrow string array:
    #: they pair and count as they would on a trace-vs-trace comparison.
    unscored_ids: Any

    @property
    def scored(self) -> int:
        return int(self.table.num_rows)

    @property
    def queries(self) -> int:
        """Every valid query the baseline read, scored or not."""
        return self.scored + len(self.unscored_ids)

    @property
    def segment_fields(self) -> list[str]:
        return list(self.meta.get("segment_fields", []))

    def specs(self) -> dict[MetricSpec, str]:
        """Every metric the file holds values of, with its column name."""
        found = {}
        for name in self.table.schema.names:
            if name.startswith(METRIC_PREFIX):
                found[parse_metric(name[len(METRIC_PREFIX) :])] = name
        return found

    def check(
        self, settings: Settings, requested: Sequence[MetricSpec], segment_fields: Sequence[str]
    ) -> None:
        """Refuse, with one line, a comparison the baseline cannot take part in fairly."""
        saved = self.meta.get("settings", {})
        ours = _settings_record(settings)
        names = {
            "relevance_threshold": "relevance threshold",
            "empty_relevant": "empty_relevant policy",
            "doc_ids": "document-ID mapping (--doc-id)",
            "missing_trace": "missing_trace policy",
        }
        for key, label in names.items():
            if saved.get(key) != ours[key]:
                raise UsageError(
                    f"{self.name}: the baseline was scored with {label} {saved.get(key)!r}, this "
                    f"run uses {ours[key]!r}: the two sides would not be comparable; save a new "
                    "baseline with these settings"
                )
        held = self.specs()
        definitions = self.meta.get("definitions", {})
        for spec in requested:
            if spec not in held:
                raise UsageError(
                    f"{self.name}: the baseline holds no values of {spec} (it has "
                    f"{', '.join(self.meta.get('metrics', [])) or 'none'}); save it with "
                    f"-m {spec}"
                )
            if definitions.get(str(spec)) != definition_digest(spec):
                raise UsageError(
                    f"{self.name}: {spec} is defined differently than when the baseline was saved "
                    f"(rankgate {self.meta.get('rankgate_version')}): save a new baseline"
                )
        missing = [name for name in segment_fields if name not in self.segment_fields]
        if missing:
            raise UsageError(
                f"{self.name}: the baseline was not segmented by {', '.join(missing)} (it has "
                f"{', '.join(self.segment_fields) or 'no segment field'}); save it with "
                + " ".join(f"--segment-by {name}" for name in missing)
            )

    def check_labels(self, rows: npt.NDArray[np.int64], digests: Any, query_ids: Any) -> None:
        """Refuse when the candidate's labels of the paired queries (``digests``, aligned with
        the baseline ``rows``) differ from the baseline's."""
        if digests is None or not self.meta.get("label_digests"):
            return
        saved = self.table.column("label_digest").to_numpy()[rows]
        known = (saved != UNKNOWN) & (digests != UNKNOWN)
        differ = np.flatnonzero(known & (saved != digests))
        if len(differ):
            examples = ", ".join(repr(query_ids[i]) for i in differ[:EXAMPLES])
            raise UsageError(
                f"{self.name}: {len(differ):,} of the {len(rows):,} paired queries have other "
                f"labels than the baseline was scored with (first: {examples}); a difference "
                "would be the labels', not the retriever's: save a new baseline with these labels"
            )

    def evaluation(
        self,
        rows: npt.NDArray[np.int64],
        metrics: Sequence[MetricSpec],
        gates: Sequence[Gate],
        settings: Settings,
        policy: GatePolicy,
    ) -> Evaluation:
        """The baseline's ``rows`` as an ``Evaluation``: their saved values, segments and groups,
        as ``evaluate`` would have built them from the traces (intervals by ``settings``)."""
        import pyarrow as pa

        taken = self.table.take(pa.array(rows, pa.int64()))
        values = {
            spec: np.ascontiguousarray(taken.column(column).to_numpy(), dtype=np.float64)
            for spec, column in self.specs().items()
        }
        query_ids = taken.column("query_id").to_pylist()
        n = len(query_ids)
        overall = summarise(
            None, GroupCounts(read=n, labeled=n), values, settings.seed, settings.resamples
        )
        segment_values = {
            name: taken.column(SEGMENT_PREFIX + name).to_pylist()
            for name in self.segment_fields
            if name in settings.segment_by or any(rule.key.field == name for rule in policy.rules)
        }
        segments = []
        for name, column in segment_values.items():
            for value, part in sorted(split_by_segment(column, values).items()):
                count = len(next(iter(part.values()))) if part else 0
                segments.append(
                    summarise(
                        SegmentKey(name, value),
                        GroupCounts(read=count, labeled=count),
                        part,
                        settings.seed,
                        settings.resamples,
                    )
                )
        outcomes, coverage = decide(tuple(gates), policy, overall, segments)
        cutoffs = [spec.k for spec in metrics if spec.k is not None]
        judged = make_metric("judged", max(cutoffs)) if cutoffs else None
        summary = Summary(
            read=n,
            scored=n,
            skipped=dict.fromkeys(SKIP_REASONS, 0),
            labeled=n,
            duplicates_dropped=0,
        )
        digests = self.table.column("label_digest").to_numpy()[rows]
        return Evaluation(
            metrics=tuple(metrics),
            query_ids=query_ids,
            values=values,
            attributes=[{} for _ in range(n)],
            summary=summary,
            gates=outcomes,
            settings=settings,
            overall=overall,
            segments=tuple(segments),
            coverage_checks=coverage,
            policy=policy,
            judged=judged if judged in values else None,
            segment_values=segment_values,
            label_digests=digests,
        )


def _check_meta(name: str, meta: dict[str, Any]) -> None:
    """The metadata's values have the types this module reads, or the file is refused."""
    kinds: dict[str, Any] = {
        "settings": dict,
        "definitions": dict,
        "segment_fields": list,
        "metrics": list,
        "label_digests": bool,
    }
    for key, kind in kinds.items():
        if key in meta and not isinstance(meta[key], kind):
            raise InputError(name, None, f"metadata {key!r} must be a {kind.__name__}")
    for field_name in meta.get("segment_fields", []):
        if not isinstance(field_name, str):
            raise InputError(name, None, "metadata 'segment_fields' must hold field names")


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not on this platform: no limit
        return 2**62


def load_baseline(path: str | Path) -> SavedBaseline:
    """Read a baseline file; an ``InputError`` for a file that is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = str(path)
    if not Path(path).is_file():
        raise UsageError(f"{name}: no such baseline file")
    try:
        file = pq.ParquetFile(path)
        unpacked = sum(
            file.metadata.row_group(i).total_byte_size for i in range(file.metadata.num_row_groups)
        )
        room = _memory_bytes() // 2
        if unpacked > room:
            raise InputError(
                name,
                None,
                f"it unpacks to {unpacked / 2**30:.1f} GiB, more than half of this machine's "
                "memory: not a baseline this rankgate saved (a 1M-query baseline unpacks to "
                "well under 1 GiB)",
            )
        table = file.read()
    except (pa.ArrowException, OSError) as problem:
        raise InputError(name, None, f"not a baseline file (Parquet): {problem}") from None
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise InputError(name, None, "not a rankgate baseline (no rankgate.baseline metadata)")
    try:
        meta = json.loads(raw)
    except ValueError:
        raise InputError(name, None, "its rankgate.baseline metadata is not JSON") from None
    if (
        not isinstance(meta, dict)
        or isinstance(meta.get("format"), bool)
        or meta.get("format") != FORMAT_VERSION
    ):
        raise InputError(
            name,
            None,
            f"baseline format {meta.get('format') if isinstance(meta, dict) else '?'!r} is not "
            f"the one this rankgate reads ({FORMAT_VERSION}); save it again",
        )
    names = table.schema.names
    if "query_id" not in names or "label_digest" not in names:
        raise InputError(name, None, "a baseline needs query_id and label_digest columns")
    _check_meta(name, meta)
    expected = {"query_id": (pa.string(), pa.large_string()), "label_digest": (pa.uint64(),)}
    for field_name in meta.get("segment_fields", []):
        column = SEGMENT_PREFIX + field_name
        if column not in names:
            raise InputError(name, column, "a segment field of the metadata has no column")
        expected[column] = (pa.string(), pa.large_string())
    for column, kinds in expected.items():
        if table.schema.field(column).type not in kinds:
            raise InputError(name, column, f"must hold {kinds[0]} values")
        if column != "query_id" and table.column(column).null_count:
            raise InputError(name, column, "must hold no nulls")
    if "scored" in names:
        if table.schema.field("scored").type != pa.bool_() or table.column("scored").null_count:
            raise InputError(name, "scored", "must hold true or false on every row")
        scored = table.column("scored").to_numpy(zero_copy_only=False).astype(np.bool_)
    else:
        scored = np.ones(table.num_rows, dtype=np.bool_)
    for column in names:
        if column.startswith(METRIC_PREFIX):
            if table.schema.field(column).type != pa.float64():
                raise InputError(name, column, "a metric column must hold float64 values")
            values = table.column(column)
            present = fast.numpy_of(values.is_valid().combine_chunks())
            finite = np.isfinite(values.fill_null(0.0).to_numpy(zero_copy_only=False))
            # A scored query has a finite value; a query read but not scored has none.
            if not np.array_equal(present, scored) or not bool(finite.all()):
                raise InputError(
                    name, column, "every scored query needs a finite value, every other none"
                )
    ids = table.column("query_id")
    if ids.null_count or len(ids.unique()) != len(ids):
        raise InputError(name, "query_id", "a baseline holds each query once, never null")
    if not scored.any():
        raise InputError(name, None, "the baseline holds no scored query")
    unscored_ids = ids.filter(pa.array(~scored)).combine_chunks().cast(pa.large_string())
    return SavedBaseline(name, table.filter(pa.array(scored)), meta, unscored_ids)
