"""Alert rules over windowed means: replayed drops, hysteresis, quiet buckets, persistence, config.

The replay streams are 5-minute buckets of about 200 MRR-like per-query values (beta draws, per-query
SD about 0.29, so one bucket's standard error is about 0.020) over two days. In the drop streams the
true mean falls from 0.70 to 0.62 at 36 h, a drop of about 4 standard errors per bucket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from rankgate.errors import ConfigError, InputError
from rankgate.monitor.alerts import (
    AlertEngine,
    AlertEvent,
    BucketStats,
    CusumRule,
    EwmaRule,
    ThresholdRule,
    parse_rules,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
BUCKET = timedelta(minutes=5)
BUCKETS = 2 * 24 * 12  # two days
DROP_AT = 36 * 12  # bucket index where the true mean drops
BEFORE, AFTER = 0.70, 0.62
CONCENTRATION = 1.5  # beta(a, b) with a + b = 1.5: per-query SD ~0.29 at mean 0.7

RULES = {
    "mrr_low": {"metric": "mrr", "below": 0.66, "for": "30m"},
    "mrr_drop": {"metric": "mrr", "detector": "cusum", "baseline": "7d"},
    "mrr_drop_ewma": {"metric": "mrr", "detector": "ewma"},
}


def simulate(seed: int, drop: bool, group: str = "overall") -> Iterator[BucketStats]:
    """Seeded buckets of beta-distributed per-query values; the mean drops at DROP_AT if asked."""
    rng = np.random.default_rng(seed)
    for index in range(BUCKETS):
        mean = AFTER if drop and index >= DROP_AT else BEFORE
        count = int(rng.poisson(200))
        values = rng.beta(mean * CONCENTRATION, (1 - mean) * CONCENTRATION, size=count)
        start = T0 + index * BUCKET
        yield BucketStats(
            "mrr",
            group,
            start,
            start + BUCKET,
            count,
            float(values.mean()),
            float(((values - values.mean()) ** 2).sum()),
        )


def replay(engine: AlertEngine, buckets: Iterator[BucketStats]) -> list[tuple[int, AlertEvent]]:
    events: list[tuple[int, AlertEvent]] = []
    for index, stats in enumerate(buckets):
        events += [(index, event) for event in engine.observe(stats)]
    return events


def first(events: list[tuple[int, AlertEvent]], rule: str, state: str) -> int | None:
    return next((i for i, e in events if e.rule == rule and e.state == state), None)


def bucket(index: int, mean: float, count: int = 200, group: str = "overall") -> BucketStats:
    start = T0 + index * BUCKET
    # m2 of a per-query SD of 0.29: what the drift rules' standard error is built from.
    return BucketStats("mrr", group, start, start + BUCKET, count, mean, 0.29**2 * (count - 1))


# ------------------------------------------------------------------------------------- replay


@pytest.mark.parametrize("seed", range(5))
def test_drop_fires_within_the_expected_number_of_buckets(seed: int) -> None:
    events = replay(AlertEngine(parse_rules(RULES)), simulate(seed, drop=True))
    # Nothing fires on the 36 hours of steady traffic before the drop.
    assert all(i >= DROP_AT for i, e in events if e.state == "firing")
    # CUSUM: each dropped bucket has z ~ -4, so S grows by ~3.5 a bucket (z + k) and passes h = 8
    # on the third bucket; noise (SD 1 per bucket) can delay it by one or two. Bound: 6 buckets.
    cusum = first(events, "mrr_drop", "firing")
    assert cusum is not None and DROP_AT <= cusum < DROP_AT + 6
    # EWMA (lambda 0.2, L 3.8): E moves 0.2 * z ~ -0.8 in the first bucket, and the limit then is
    # 3.8 * 0.2 * sqrt(1 + 0.8**2 + ...) ~ 0.76-0.93 for the first buckets: 1 to 3 buckets.
    ewma = first(events, "mrr_drop_ewma", "firing")
    assert ewma is not None and DROP_AT <= ewma < DROP_AT + 4
    # Threshold 0.66 for 30m: the dropped mean 0.62 is ~2 SE below 0.66, so nearly every bucket
    # breaches; it fires on the sixth consecutive breaching 5-minute bucket, never on the fifth.
    buckets = list(simulate(seed, drop=True))
    threshold = first(events, "mrr_low", "firing")
    assert threshold is not None and DROP_AT + 4 <= threshold < DROP_AT + 15
    assert all(b.mean < 0.66 for b in buckets[threshold - 5 : threshold + 1])
    pending = max(
        i for i, e in events if e.rule == "mrr_low" and e.state == "pending" and i < threshold
    )
    assert threshold - pending == 5
    fired = next(e for i, e in events if i == threshold and e.rule == "mrr_low")
    assert fired.message.endswith("for 30m (firing)")
    # The drift rules stay firing for the rest of the run: a sustained drop is one alert.
    for rule in ("mrr_drop", "mrr_drop_ewma"):
        assert [e.state for _, e in events if e.rule == rule] == ["firing"]


def test_control_streams_rarely_fire() -> None:
    """No drop, 40 seeded two-day runs: the false alarms allowed by the detectors' run lengths.

    Each run gives a drift rule about 546 buckets after its 30-bucket warm-up. At the defaults the
    simulated in-control average run length is about 17,800 buckets for CUSUM and 16,900 for EWMA,
    a little less while the baseline is still short, so 40 runs expect about 1.3-2 false alarms
    per drift rule; more than 4 would mean the standardisation or the baseline is off. The
    threshold rule (0.66, 2 SE below the mean, for 30m) needs six 2-SE dips in a row: never.
    """
    alarms: dict[str, int] = {rule: 0 for rule in RULES}
    quiet_runs = 0
    for seed in range(100, 140):
        events = replay(AlertEngine(parse_rules(RULES)), simulate(seed, drop=False))
        fired = [e for _, e in events if e.state == "firing"]
        quiet_runs += not fired
        for event in fired:
            alarms[event.rule] += 1
    assert alarms["mrr_low"] == 0
    assert alarms["mrr_drop"] <= 4 and alarms["mrr_drop_ewma"] <= 4
    assert quiet_runs >= 34


def test_baseline_is_not_dragged_down_by_the_drop() -> None:
    engine = AlertEngine(parse_rules({"drop": RULES["mrr_drop"]}))
    replay(engine, simulate(7, drop=True))
    (state,) = engine.states()
    assert state.state == "firing"
    assert state.baseline_mean is not None and abs(state.baseline_mean - BEFORE) < 0.005


def test_drift_rule_waits_for_its_baseline() -> None:
    rules = parse_rules({"drop": {"metric": "mrr", "detector": "cusum", "min_baseline": 24}})
    engine = AlertEngine(rules)
    # 24 buckets reach the baseline only after the 6-bucket lag: 30 buckets before any decision.
    for index in range(29):
        assert engine.observe(bucket(index, 0.7)) == []
    assert engine.states()[0].baseline_buckets == 23
    # Even an absurd bucket cannot fire while the baseline is short.
    assert engine.observe(bucket(29, 0.1)) == []
    assert [e.state for e in engine.observe(bucket(30, 0.1))] == ["firing"]


# -------------------------------------------------------------------------- threshold details


def test_threshold_fires_after_exactly_for_and_not_before() -> None:
    engine = AlertEngine(parse_rules({"low": {"metric": "mrr", "below": 0.6, "for": "30m"}}))
    states = [[e.state for e in engine.observe(bucket(i, 0.5))] for i in range(8)]
    assert states == [["pending"], [], [], [], [], ["firing"], [], []]


def test_pending_that_recovers_is_resolved_without_firing() -> None:
    engine = AlertEngine(parse_rules({"low": {"metric": "mrr", "below": 0.6, "for": "30m"}}))
    engine.observe(bucket(0, 0.5))
    (event,) = engine.observe(bucket(1, 0.61))
    assert (event.state, event.previous) == ("resolved", "pending")
    assert "before firing" in event.message


def test_hovering_at_the_threshold_does_not_flap() -> None:
    hovering = [0.59 if i % 2 == 0 else 0.61 for i in range(60)]
    engine = AlertEngine(parse_rules({"low": {"metric": "mrr", "below": 0.6}}))
    events = [e for i, mean in enumerate(hovering) for e in engine.observe(bucket(i, mean))]
    # Default clear is 0.62: 0.61 is inside the band, so one alert fires and stays firing.
    assert [e.state for e in events] == ["firing"]
    assert events[0].message == "mrr overall 0.590 < 0.6 for 5m (firing)"
    # Without the band the same stream flaps every bucket: what the hysteresis prevents.
    no_band = AlertEngine(parse_rules({"low": {"metric": "mrr", "below": 0.6, "clear": 0.6}}))
    flaps = [e for i, mean in enumerate(hovering) for e in no_band.observe(bucket(i, mean))]
    assert len(flaps) == 60


def test_resolves_only_after_clear_for() -> None:
    rule = {"metric": "mrr", "below": 0.6, "clear_for": "15m"}
    engine = AlertEngine(parse_rules({"low": rule}))
    means = [0.5, 0.65, 0.65, 0.61, 0.65, 0.65, 0.65]
    events = [(i, e) for i, mean in enumerate(means) for e in engine.observe(bucket(i, mean))]
    # 0.61 is inside the band and restarts the 15 minutes: resolved on the third clear bucket.
    assert [(i, e.state) for i, e in events] == [(0, "firing"), (6, "resolved")]
    assert events[1][1].message == "mrr overall 0.650 >= clear 0.62 for 15m (resolved)"


def test_above_rules_mirror_below_rules() -> None:
    engine = AlertEngine(parse_rules({"high": {"metric": "mrr", "above": 0.9}}))
    assert [e.state for e in engine.observe(bucket(0, 0.95))] == ["firing"]
    assert engine.observe(bucket(1, 0.89)) == []  # default clear 0.88
    assert [e.state for e in engine.observe(bucket(2, 0.87))] == ["resolved"]


# ------------------------------------------------------------------------------- quiet buckets


def test_quiet_buckets_neither_start_nor_fire_nor_resolve() -> None:
    rules = parse_rules({"low": {"metric": "mrr", "below": 0.6, "for": "15m"}})
    engine = AlertEngine(rules)
    # A quiet night of terrible means starts nothing.
    assert [e for i in range(20) for e in engine.observe(bucket(i, 0.1, count=29))] == []
    # Two real breaches make it pending; quiet buckets add nothing to the 15 minutes.
    assert [e.state for e in engine.observe(bucket(20, 0.5))] == ["pending"]
    assert engine.observe(bucket(21, 0.5)) == []
    assert [e for i in range(22, 40) for e in engine.observe(bucket(i, 0.1, count=5))] == []
    assert engine.states()[0].state == "pending"
    assert [e.state for e in engine.observe(bucket(40, 0.5))] == ["firing"]
    # Nor do quiet good buckets resolve it.
    assert [e for i in range(41, 60) for e in engine.observe(bucket(i, 0.9, count=0))] == []
    assert engine.states()[0].state == "firing"
    assert [e.state for e in engine.observe(bucket(60, 0.9))] == ["resolved"]


def test_quiet_buckets_stay_out_of_the_drift_baseline() -> None:
    engine = AlertEngine(parse_rules({"drop": {"metric": "mrr", "detector": "cusum"}}))
    for index in range(40):
        engine.observe(bucket(index, 0.7, count=10 if index % 2 else 200))
    assert engine.states()[0].baseline_buckets == 20 - 6
    assert engine.states()[0].baseline_mean is None  # 14 < min_baseline 24: not started


# -------------------------------------------------------------------------------- persistence


def test_restore_mid_breach_gives_the_same_transitions() -> None:
    buckets = list(simulate(3, drop=True))
    uninterrupted = replay(AlertEngine(parse_rules(RULES)), iter(buckets))

    cut = DROP_AT + 2  # the threshold rule is pending, the CUSUM sum is climbing
    engine = AlertEngine(parse_rules(RULES))
    before = replay(engine, iter(buckets[:cut]))
    assert {s.rule: s.state for s in engine.states()}["mrr_low"] == "pending"
    saved = json.loads(json.dumps(engine.to_dict()))
    restored = AlertEngine.from_dict(parse_rules(RULES), saved)
    # Re-feeding the last bucket after a restore changes nothing.
    assert restored.observe(buckets[cut - 1]) == []
    after = replay(restored, iter(buckets[cut:]))
    assert before + [(i + cut, e) for i, e in after] == uninterrupted
    assert restored.to_dict() == json.loads(json.dumps(restored.to_dict()))


def test_restore_drops_state_of_changed_or_removed_rules() -> None:
    engine = AlertEngine(parse_rules({"low": {"metric": "mrr", "below": 0.6, "for": "30m"}}))
    engine.observe(bucket(0, 0.5))
    saved = engine.to_dict()
    changed = parse_rules({"low": {"metric": "mrr", "below": 0.55, "for": "30m"}})
    assert AlertEngine.from_dict(changed, saved).states() == []
    same = parse_rules({"low": {"metric": "mrr", "below": 0.6, "for": "30m"}})
    assert [s.state for s in AlertEngine.from_dict(same, saved).states()] == ["pending"]


@pytest.mark.parametrize(
    "data", [{}, {"version": 99, "tracks": []}, {"version": 1, "tracks": [{"rule": "low"}]}]
)
def test_restore_rejects_foreign_data(data: dict[str, Any]) -> None:
    rules = parse_rules({"low": {"metric": "mrr", "below": 0.6}})
    with pytest.raises(InputError, match="alert state"):
        AlertEngine.from_dict(rules, data)


# ------------------------------------------------------------------------------------- groups


def test_rules_apply_per_group_and_respect_groups() -> None:
    rules = parse_rules(
        {
            "all": {"metric": "MRR", "below": 0.6},
            "faq_only": {"metric": "mrr", "below": 0.6, "groups": ["query_type=faq"]},
        }
    )
    engine = AlertEngine(rules)
    fired = engine.observe(bucket(0, 0.5, group="query_type=faq"))
    fired += engine.observe(bucket(0, 0.7, group="overall"))
    fired += engine.observe(bucket(0, 0.5, group="query_type=chat"))
    assert sorted((e.rule, e.group) for e in fired) == [
        ("all", "query_type=chat"),
        ("all", "query_type=faq"),
        ("faq_only", "query_type=faq"),
    ]
    assert len(engine.states()) == 4
    # Other metrics are not this rule's business.
    other = BucketStats("ndcg@10", "overall", T0, T0 + BUCKET, 200, 0.1, 1.0)
    assert engine.observe(other) == []


# ------------------------------------------------------------------------------------- config


def test_parse_rules_defaults() -> None:
    low, drop, ewma = parse_rules(RULES)
    assert isinstance(low, ThresholdRule)
    assert (low.direction, low.threshold, low.clear, low.clear_for) == ("below", 0.66, 0.68, None)
    assert (low.sustain, low.min_queries, low.groups) == (timedelta(minutes=30), 30, None)
    assert isinstance(drop, CusumRule)
    assert (drop.k, drop.h, drop.clear_level, drop.baseline) == (0.5, 8.0, 4.0, timedelta(days=7))
    assert (drop.min_baseline, drop.baseline_lag, drop.direction) == (24, 6, "down")
    assert isinstance(ewma, EwmaRule)
    assert (ewma.lam, ewma.limit, ewma.clear_level) == (0.2, 3.8, 1.9)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"below": 0.6}, "[alerts.r] metric: is required"),
        ({"metric": "bogus", "below": 0.6}, "[alerts.r] metric: unknown metric 'bogus'"),
        ({"metric": 3, "below": 0.6}, "[alerts.r] metric: must be a metric name"),
        ({"metric": "mrr"}, "[alerts.r] below: set below or above"),
        (
            {"metric": "mrr", "below": 0.6, "above": 0.9},
            "[alerts.r] above: set below or above, not both",
        ),
        ({"metric": "mrr", "below": "0.6"}, "[alerts.r] below: must be a number, got '0.6'"),
        ({"metric": "mrr", "below": True}, "[alerts.r] below: must be a number"),
        (
            {"metric": "mrr", "below": 0.6, "for": "30 minutes"},
            "[alerts.r] for: must be a duration",
        ),
        ({"metric": "mrr", "below": 0.6, "for": 30}, "[alerts.r] for: must be a duration"),
        ({"metric": "mrr", "below": 0.6, "clear": 0.5}, "[alerts.r] clear: must be at or above"),
        ({"metric": "mrr", "above": 0.6, "clear": 0.7}, "[alerts.r] clear: must be at or below"),
        (
            {"metric": "mrr", "below": 0.6, "clear_for": "0m"},
            "[alerts.r] clear_for: must be longer",
        ),
        (
            {"metric": "mrr", "below": 0.6, "min_queries": 0},
            "[alerts.r] min_queries: must be an integer >= 1",
        ),
        (
            {"metric": "mrr", "below": 0.6, "groups": "overall"},
            "[alerts.r] groups: must be a non-empty list",
        ),
        (
            {"metric": "mrr", "below": 0.6, "k": 0.5},
            "[alerts.r] k: unknown key for a threshold rule",
        ),
        ({"metric": "mrr", "detector": "shewhart"}, "[alerts.r] detector: must be one of"),
        ({"metric": "mrr", "detector": "cusum", "h": -1}, "[alerts.r] h: must be > 0"),
        ({"metric": "mrr", "detector": "cusum", "k": -0.1}, "[alerts.r] k: must be >= 0"),
        (
            {"metric": "mrr", "detector": "cusum", "clear_level": 9},
            "[alerts.r] clear_level: must be >= 0 and below h",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "below": 0.6},
            "[alerts.r] below: unknown key for a cusum rule",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "baseline": "7d", "baseline_buckets": 100},
            "[alerts.r] baseline_buckets: set baseline or",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "baseline_buckets": 10},
            "[alerts.r] baseline_buckets: 10 is below min_baseline",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "baseline": "0d"},
            "[alerts.r] baseline: must be longer than 0",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "direction": "sideways"},
            "[alerts.r] direction: must be one of down, up",
        ),
        (
            {"metric": "mrr", "detector": "cusum", "overdispersion": "yes"},
            "[alerts.r] overdispersion: must be true or false",
        ),
        (
            {"metric": "mrr", "detector": "ewma", "lambda": 0},
            "[alerts.r] lambda: must be in (0, 1]",
        ),
        ({"metric": "mrr", "detector": "ewma", "L": 0}, "[alerts.r] L: must be > 0"),
        (
            {"metric": "mrr", "detector": "ewma", "clear_level": 5},
            "[alerts.r] clear_level: must be between -L and L",
        ),
    ],
)
def test_bad_rules_name_the_rule_and_the_key(rule: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rules({"r": rule})
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


def test_alerts_must_be_a_table_of_tables() -> None:
    with pytest.raises(ConfigError, match=r"\[alerts\] mrr_low: each rule must be a table"):
        parse_rules({"mrr_low": 0.6})
    with pytest.raises(ConfigError, match=r"\[alerts\] must be a table"):
        parse_rules(["mrr_low"])  # type: ignore[arg-type]
