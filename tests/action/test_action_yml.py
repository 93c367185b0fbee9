"""``action.yml`` and the example workflow: they parse, the action's inputs and outputs are the ones
the step reads and writes and the docs describe, and no input is pasted into a shell script."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rankgate.ci_action import INPUTS, OUTPUTS

yaml = pytest.importorskip("yaml", reason="PyYAML reads action.yml")

ROOT = Path(__file__).resolve().parents[2]
# Inputs the composite steps use themselves, not the Python step.
STEP_INPUTS = {"python-version", "install", "upload-report"}


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _step(action: dict[str, Any], step_id: str) -> dict[str, Any]:
    found = [step for step in action["runs"]["steps"] if step.get("id") == step_id]
    assert len(found) == 1
    return found[0]


def test_a_composite_action_with_the_documented_inputs_and_outputs(
    action: dict[str, Any],
) -> None:
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) == set(INPUTS) | STEP_INPUTS
    assert set(action["outputs"]) == set(OUTPUTS)
    for name, output in action["outputs"].items():
        assert output["value"] == f"${{{{ steps.rankgate.outputs.{name} }}}}"
    for spec in (*action["inputs"].values(), *action["outputs"].values()):
        assert spec["description"].strip()
    assert action["inputs"]["comment"]["default"] == "false"
    assert action["inputs"]["command"]["default"] == "compare"

    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", docs, re.MULTILINE))
    assert documented == set(action["inputs"]) | set(OUTPUTS)


def test_each_input_reaches_the_step_as_its_own_variable(action: dict[str, Any]) -> None:
    step = _step(action, "rankgate")
    assert step["env"].pop("RANKGATE_PYTHON") == "${{ steps.install.outputs.python }}"
    assert step["env"] == {
        variable: f"${{{{ inputs.{name} }}}}" for name, variable in INPUTS.items()
    }
    assert "rankgate.ci_action" in step["run"]


def test_no_expression_is_pasted_into_a_shell_script(action: dict[str, Any]) -> None:
    scripts = [step["run"] for step in action["runs"]["steps"] if "run" in step]
    assert len(scripts) == 2
    for script in scripts:
        assert "${{" not in script, script


def test_the_report_is_uploaded_even_when_the_gate_fails(action: dict[str, Any]) -> None:
    steps = action["runs"]["steps"]
    upload = steps[-1]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert "always()" in upload["if"]
    assert upload["with"]["path"] == "${{ steps.rankgate.outputs.html-report }}"
    install = _step(action, "install")
    assert '"$GITHUB_ACTION_PATH"' in install["run"]


def test_the_example_workflow_keeps_a_baseline_and_compares_pull_requests(
    action: dict[str, Any],
) -> None:
    workflow = yaml.safe_load((ROOT / "docs" / "github-workflow.yml").read_text(encoding="utf-8"))
    jobs = workflow["jobs"]
    saved = [step for step in jobs["baseline"]["steps"] if "--save-baseline" in step.get("run", "")]
    assert len(saved) == 1
    uploads = [s for s in jobs["baseline"]["steps"] if "upload-artifact" in s.get("uses", "")]
    assert uploads[0]["with"]["name"] == "rankgate-baseline"

    steps = jobs["compare"]["steps"]
    downloads = [s for s in steps if "download-artifact" in s.get("uses", "")]
    assert downloads[0]["with"]["name"] == "rankgate-baseline"
    used = [s for s in steps if "/rankgate@" in s.get("uses", "")]
    assert len(used) == 1
    assert set(used[0]["with"]) <= set(action["inputs"])
    assert used[0]["with"]["baseline"].endswith("main.rgb")
    assert jobs["compare"]["permissions"]["pull-requests"] == "write"
    for step in steps:
        assert "${{" not in step.get("run", ""), step
