"""The action's step (``python -m rankgate.ci_action``) under a simulated runner: the job summary,
the outputs, the pull-request comment's body and the ``gh`` calls that post it (recorded by a fake
``gh``, never sent), and the exit codes."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from action_runner import PULL_REQUEST, REPOSITORY, TOKEN, Runner, Step, parse_outputs, write_jsonl

from rankgate.ci_action import OUTPUTS, read_inputs, run, write_outputs
from rankgate.ci_comment import COMMENT_MARKER
from rankgate.errors import UsageError

COMPARE_ARGS = "--metric ndcg@5,10 --metric mrr --segment-by query_type --resamples 200"
COMMENTS_PATH = f"repos/{REPOSITORY}/issues/{PULL_REQUEST}/comments"


def _regressed(runner: Runner, ab_files: dict[str, Path], **inputs: str) -> Step:
    return runner.run(
        baseline=str(ab_files["baseline"]),
        sources=str(ab_files["regressed"]),
        args=COMPARE_ARGS,
        delta_metric="ndcg@10",
        **inputs,
    )


def _table_rows(markdown: str, heading: str) -> list[str]:
    """The body rows of the table under ``#### heading``."""
    section = markdown.split(f"#### {heading}\n", 1)[1]
    table = section.lstrip("\n").split("\n\n", 1)[0].splitlines()
    assert all(line.startswith("|") for line in table)
    return table[2:]


def test_a_regression_writes_summary_outputs_and_one_comment(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    step = _regressed(runner, ab_files, comment="true")
    assert step.code == 1, step.err

    summary = step.summary()
    assert summary.startswith("**rankgate compare: FAIL** · ")
    regressions = _table_rows(summary, "Regressions")
    assert any(row.startswith("| `query_type=multi_hop` | ndcg@10 |") for row in regressions)

    outputs = step.outputs()
    assert set(outputs) == set(OUTPUTS)
    assert outputs["passed"] == "false"
    assert outputs["exit-code"] == "1"
    assert outputs["regressions"] == str(len(regressions))
    assert outputs["gate-misses"] == "0"
    assert float(outputs["delta"]) < 0
    assert 0 < float(outputs["mean"]) < 1
    assert outputs["verdict"].startswith("FAIL · ")
    assert Path(outputs["html-report"]) == runner.report_dir / "report.html"
    assert "<html" in Path(outputs["html-report"]).read_text(encoding="utf-8")
    assert Path(outputs["summary-file"]).read_text(encoding="utf-8") + "\n" == summary

    comment = Path(outputs["comment-file"])
    assert comment == runner.report_dir / "comment.md"
    body = comment.read_text(encoding="utf-8")
    assert body.startswith(COMMENT_MARKER + "\n**rankgate compare: FAIL** · ")
    assert "https://github.com/octo/search/actions/runs/4242" in body
    assert len(body) < 65_536

    calls = step.gh_calls()
    assert [call["args"] for call in calls] == [
        ["api", "--paginate", f"{COMMENTS_PATH}?per_page=100"],
        [
            "api",
            "--method",
            "POST",
            COMMENTS_PATH,
            "--input",
            str(runner.report_dir / "comment.json"),
        ],
    ]
    assert all(call["token"] == TOKEN for call in calls)
    assert calls[1]["input"] == {"body": body}

    # The log quotes data only while workflow commands are stopped; the annotation comes after.
    lines = step.out.splitlines()
    token = lines[0].removeprefix("::stop-commands::")
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    resumed = lines.index(f"::{token}::")
    assert any(line.startswith("FAIL · ") for line in lines[1:resumed])
    assert lines[resumed + 1].startswith("::error title=rankgate::rankgate compare failed: ")


def test_a_passing_run_writes_no_comment(runner: Runner, ab_files: dict[str, Path]) -> None:
    step = runner.run(
        baseline=str(ab_files["baseline"]),
        sources=str(ab_files["control"]),
        args=COMPARE_ARGS,
        comment="true",
    )
    assert step.code == 0, step.err
    assert step.summary().startswith("**rankgate compare: PASS** · no regression")
    outputs = step.outputs()
    assert outputs["passed"] == "true"
    assert outputs["exit-code"] == "0"
    assert outputs["regressions"] == "0"
    assert outputs["comment-file"] == ""
    assert not (runner.report_dir / "comment.md").exists()
    # It only looks for an earlier comment to delete; there is none.
    assert [call["args"][:2] for call in step.gh_calls()] == [["api", "--paginate"]]
    assert "::error" not in step.out


def _comment(comment_id: int, login: str, body: str) -> dict[str, object]:
    return {"id": comment_id, "user": {"login": login}, "body": body}


def test_the_earlier_comment_is_updated_and_duplicates_deleted(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    bot = "github-actions[bot]"
    first_page = [
        _comment(1, "alice", "LGTM"),
        _comment(2, "mallory", f"{COMMENT_MARKER}\nnot the bot's"),
        _comment(3, bot, f"{COMMENT_MARKER}\n**rankgate compare: FAIL** (older run)"),
    ]
    second_page = [
        _comment(4, bot, f"quoting {COMMENT_MARKER} is not a rankgate comment"),
        _comment(5, bot, f"{COMMENT_MARKER}\na duplicate from a race"),
    ]
    # gh api --paginate prints one JSON array per page, back to back.
    runner.comments(json.dumps(first_page) + json.dumps(second_page))
    step = _regressed(runner, ab_files, comment="true")
    assert step.code == 1, step.err
    methods = [(call["args"][2], call["args"][3]) for call in step.gh_calls()[1:]]
    assert methods == [
        ("PATCH", f"repos/{REPOSITORY}/issues/comments/3"),
        ("DELETE", f"repos/{REPOSITORY}/issues/comments/5"),
    ]
    assert "updated the rankgate comment on pull request #7" in step.out


def test_a_passing_run_deletes_the_comment_it_no_longer_holds(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    runner.comments(json.dumps([_comment(3, "github-actions[bot]", f"{COMMENT_MARKER}\nold")]))
    inputs = {
        "baseline": str(ab_files["baseline"]),
        "sources": str(ab_files["control"]),
        "args": COMPARE_ARGS,
        "comment": "true",
    }
    step = runner.run(**inputs)
    assert step.code == 0, step.err
    assert [call["args"][1:4] for call in step.gh_calls()[1:]] == [
        ["--method", "DELETE", f"repos/{REPOSITORY}/issues/comments/3"]
    ]

    runner.gh_log.unlink()
    kept = runner.run(**inputs, delete_comment_on_pass="false")
    assert kept.code == 0, kept.err
    assert kept.gh_calls() == []


def test_no_comment_unless_asked_or_on_a_pull_request(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    step = _regressed(runner, ab_files)  # comment defaults to false
    assert step.code == 1, step.err
    assert step.gh_calls() == []
    assert step.outputs()["comment-file"] == ""

    runner.event({"ref": "refs/heads/main", "commits": []}, name="push")
    pushed = _regressed(runner, ab_files, comment="true")
    assert pushed.code == 1, pushed.err
    assert pushed.gh_calls() == []
    assert "comment: not a pull-request event, so no comment" in pushed.out
    assert not (runner.report_dir / "comment.md").exists()


def test_a_refused_comment_is_a_warning_not_a_verdict(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    runner.env["FAKE_GH_FAIL"] = "1"  # a fork's read-only token
    step = _regressed(runner, ab_files, comment="true")
    assert step.code == 1, step.err
    assert step.outputs()["exit-code"] == "1"
    assert (runner.report_dir / "comment.md").exists()
    warnings = [line for line in step.out.splitlines() if line.startswith("::warning")]
    assert len(warnings) == 1 and "Resource not accessible by integration" in warnings[0]


def test_eval_gates_fill_the_outputs(runner: Runner, ab_files: dict[str, Path]) -> None:
    step = runner.run(
        command="eval",
        sources=str(ab_files["baseline"]),
        args="--segment-by query_type --gate 'ndcg@10>=0.3' --gate 'mrr>=0.2'",
        delta_metric="ndcg@10",
        comment="true",
    )
    assert step.code == 1, step.err
    summary = step.summary()
    assert summary.startswith("**rankgate eval: FAIL** · 2 of 8 checks failed · 300 queries")
    assert len(_table_rows(summary, "Missed gates")) == 2
    outputs = step.outputs()
    assert outputs["gate-misses"] == "2"
    assert outputs["regressions"] == "0"
    assert outputs["delta"] == ""
    assert abs(float(outputs["mean"]) - 0.29994) < 1e-4
    body = (runner.report_dir / "comment.md").read_text(encoding="utf-8")
    assert body.startswith(COMMENT_MARKER + "\n**rankgate eval: FAIL**")


def test_bad_input_exits_2_with_outputs_and_no_comment(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    step = runner.run(baseline=str(ab_files["baseline"]), sources="missing.jsonl", comment="true")
    assert step.code == 2
    assert step.summary().startswith("**rankgate compare: ERROR** (exit 2: bad input or usage")
    assert "missing.jsonl" in step.summary()
    outputs = step.outputs()
    assert (outputs["passed"], outputs["exit-code"], outputs["html-report"]) == ("false", "2", "")
    assert step.gh_calls() == []
    assert "::error title=rankgate::rankgate compare could not run (exit 2)" in step.out


def test_options_the_action_owns_are_refused(runner: Runner, ab_files: dict[str, Path]) -> None:
    for args, said in (
        ("--format json", "--format is the action's to set"),
        ("--html elsewhere.html", "--html is the action's to set"),
        ("--mlflow", "--mlflow is the action's to set"),
        ("--no-such-option", "unrecognized arguments: --no-such-option"),
        ("--margin 'unclosed", "input args: No closing quotation"),
    ):
        step = runner.run(
            baseline=str(ab_files["baseline"]), sources=str(ab_files["control"]), args=args
        )
        assert step.code == 2, args
        assert said in step.summary(), (args, step.summary())
        assert step.err.count("rankgate: error:") <= 1, step.err
        assert "error: rankgate: error" not in step.summary()
    bad = runner.run(command="evaluate", sources=str(ab_files["baseline"]))
    assert bad.code == 2
    assert "input command: expected eval or compare, got 'evaluate'" in bad.summary()


def test_an_uncomputed_delta_metric_warns_and_leaves_the_output_empty(
    runner: Runner, ab_files: dict[str, Path]
) -> None:
    step = runner.run(
        baseline=str(ab_files["baseline"]),
        sources=str(ab_files["control"]),
        args=COMPARE_ARGS,
        delta_metric="map",
    )
    assert step.code == 0, step.err
    assert step.outputs()["delta"] == ""
    assert any(
        line.startswith("::warning title=rankgate::delta-metric map was not computed")
        for line in step.out.splitlines()
    )


def test_data_cannot_set_outputs_or_run_workflow_commands(runner: Runner) -> None:
    """A segment value with line breaks, a fake delimiter and workflow commands reaches the
    verdict (its worst miss) and the log: it sets no output, and the log quotes it only while
    workflow commands are stopped."""
    hostile = "x\npassed<<EOF\ntrue\nEOF\n::add-mask::secret\n::set-output name=passed::true"
    records = [
        {
            "query_id": f"q{number}",
            "kind": hostile if number % 2 else "plain",
            "retrieved_ids": ["a", "b", "c"] if number % 2 else ["c", "a", "b"],
            "relevance_scores": {"c": 1},
        }
        for number in range(40)
    ]
    traces = write_jsonl(runner.root / "traces.jsonl", records)
    step = runner.run(
        command="eval",
        sources=str(traces),
        args="--segment-by kind --gate 'mrr>=0.9' --min-queries 5",
    )
    assert step.code == 1, step.err
    outputs = step.outputs()
    assert set(outputs) == set(OUTPUTS)
    assert outputs["passed"] == "false"
    flat = "kind=x passed<<EOF true EOF ::add-mask::secret ::set-output name=passed::true"
    assert flat in outputs["verdict"] and "\n" not in outputs["verdict"]
    lines = step.out.splitlines()
    token = lines[0].removeprefix("::stop-commands::")
    resumed = lines.index(f"::{token}::")
    assert any(flat in line for line in lines[1:resumed])
    assert all("::add-mask::" not in line for line in lines[resumed:])
    # In the summary the value is one code span in one table row.
    rows = [line for line in step.summary().splitlines() if "passed<<EOF" in line]
    assert rows and all(line.startswith("| `kind=x passed<<EOF true EOF") for line in rows)


def test_write_outputs_picks_a_delimiter_the_value_does_not_hold(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    value = "line one\nghadelimiter_\nname<<x\n"
    write_outputs(path, {"verdict": value, "passed": "true"})
    text = path.read_text(encoding="utf-8")
    assert parse_outputs(text) == {"verdict": value, "passed": "true"}
    delimiters = re.findall(r"^\w[\w-]*<<(ghadelimiter_[0-9a-f-]{36})$", text, re.MULTILINE)
    assert len(set(delimiters)) == 2


def test_inputs_default_and_malformed_ones_are_named(tmp_path: Path) -> None:
    inputs = read_inputs({"INPUT_SOURCES": "a.jsonl 'with space.jsonl'\nc.jsonl"})
    assert inputs.command == "compare"
    assert inputs.sources == ("a.jsonl", "with space.jsonl", "c.jsonl")
    assert (inputs.comment, inputs.delete_comment_on_pass) == (False, True)
    assert inputs.comment_author == "github-actions[bot]"
    assert inputs.report_dir.is_absolute() and inputs.report_dir.name == "rankgate-report"
    assert read_inputs({"INPUT_COMMENT_AUTHOR": ""}).comment_author == ""
    assert read_inputs({"RUNNER_TEMP": str(tmp_path)}).report_dir == tmp_path / "rankgate"
    for environ, said in (
        ({"INPUT_COMMENT": "yes"}, "input comment: expected true or false, got 'yes'"),
        ({"INPUT_DELTA_METRIC": "ndgc@10"}, "input delta-metric: "),
    ):
        with pytest.raises(UsageError, match=re.escape(said)):
            read_inputs(environ)


def test_the_gh_runner_is_injectable_and_enterprise_hosts_are_named(
    tmp_path: Path, ab_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12}}), encoding="utf-8")
    environ = {
        "INPUT_BASELINE": str(ab_files["baseline"]),
        "INPUT_SOURCES": str(ab_files["regressed"]),
        "INPUT_ARGS": COMPARE_ARGS,
        "INPUT_COMMENT": "true",
        "INPUT_GITHUB_TOKEN": TOKEN,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "octo/search",
        "GITHUB_SERVER_URL": "https://ghe.example.com",
        "GITHUB_RUN_ID": "9",
    }
    calls: list[tuple[list[str], str, str | None]] = []

    def gh(arguments: Sequence[str], env: Mapping[str, str]) -> str:
        calls.append((list(arguments), env["GH_TOKEN"], env.get("GH_HOST")))
        return "[]" if "--paginate" in arguments else "{}"

    out, err = io.StringIO(), io.StringIO()
    assert run(environ, gh=gh, stdout=out, stderr=err) == 1, err.getvalue()
    assert [call[0][:4] for call in calls] == [
        ["api", "--paginate", "repos/octo/search/issues/12/comments?per_page=100"],
        ["api", "--method", "POST", "repos/octo/search/issues/12/comments"],
    ]
    assert {(token, host) for _, token, host in calls} == {(TOKEN, "ghe.example.com")}
    body = (tmp_path / "rankgate-report" / "comment.md").read_text(encoding="utf-8")
    assert "https://ghe.example.com/octo/search/actions/runs/9" in body
    assert "::" not in out.getvalue()  # workflow commands only under GITHUB_ACTIONS=true
