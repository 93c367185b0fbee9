"""The documentation site: it builds with MkDocs in strict mode, offline, from the pages as the
generators write them today, and the README keeps what a first visit needs and links into it.

The build runs on a copy of mkdocs.yml and docs/ in a temporary folder, so the working tree is never
written to; ``test_generated_pages.py`` checks that the committed generated pages are current.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATOR = DOCS / "gen_reference.py"
GENERATED = ("cli-reference.md", "api.md", "metrics.md")


class _ConfigLoader(yaml.SafeLoader):
    """MkDocs' YAML: its ``!relative`` tag (a path relative to the docs or config folder) kept as
    text."""


_ConfigLoader.add_constructor("!relative", lambda loader, node: loader.construct_scalar(node))


def _config() -> dict[str, Any]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_ConfigLoader)
    assert isinstance(config, dict)
    return config


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Regenerate the generated pages into a copy of docs/ and build it: (site folder, the run)."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError as missing:  # a required test tool, not an optional one: never a skip
        pytest.fail(
            f"{missing}: mkdocs and mkdocs-material are in the test extra (pip install -e '.[test]')"
        )
    work = tmp_path_factory.mktemp("docs-site")
    shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
    shutil.copytree(DOCS, work / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, str(GENERATOR), "--out", str(work / "docs")],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = work / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [
            *(sys.executable, "-m", "mkdocs", "build", "--strict"),
            *("--config-file", str(work / "mkdocs.yml"), "--site-dir", str(out)),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out, run


def test_the_site_builds_in_strict_mode_without_a_warning(
    site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, run = site
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    log = run.stdout + run.stderr
    assert "WARNING" not in log, log
    assert (out / "index.html").is_file()


def test_every_page_of_the_nav_is_built(
    site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, run = site
    assert run.returncode == 0, run.stderr
    pages = _nav_pages(_config()["nav"])
    assert len(pages) == len(set(pages)), "a page is listed twice in the nav"
    for page in pages:
        built = out / (
            page.removesuffix(".md") + "/index.html" if page != "index.md" else "index.html"
        )
        assert built.is_file(), f"{page} was not built ({built})"
    # The generated pages and the pages other parts own are all in the nav.
    for page in (*GENERATED, "frameworks.md", "mlflow.md", "ir-inputs.md", "ci.md"):
        assert page in pages


def test_every_markdown_page_in_docs_is_in_the_nav() -> None:
    pages = set(_nav_pages(_config()["nav"]))
    on_disk = {path.name for path in DOCS.glob("*.md")}
    assert on_disk - pages == set(), "pages missing from the nav in mkdocs.yml"
    assert pages - on_disk == set(), "the nav names pages that do not exist"


def test_the_build_fetches_nothing_from_the_network() -> None:
    """No web fonts and none of Material's downloading plugins; strict on every link check."""
    config = _config()
    assert config["theme"]["name"] == "material"
    assert config["theme"]["font"] is False
    plugins = [next(iter(p)) if isinstance(p, dict) else p for p in config.get("plugins", [])]
    assert plugins == ["search"]
    assert not {"privacy", "social", "material/privacy", "material/social"} & set(plugins)
    assert config["strict"] is True
    assert set(config["validation"].values()) == {"warn"}
    for extension in config["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            assert extension["pymdownx.snippets"].get("url_download", False) is False


def test_the_built_pages_load_no_web_font(
    site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, run = site
    assert run.returncode == 0, run.stderr
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text, page
        assert "fonts.gstatic.com" not in text, page


def test_the_readme_keeps_the_quick_start_and_the_ci_section() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = _section(readme, "## Quick start")
    assert "make demo" in quick_start
    assert "make test" in quick_start
    assert "pip install rankgate" in _section(readme, "## Install")
    in_ci = _section(readme, "## In CI")
    assert "docs/github-workflow.yml" in in_ci
    assert "the size of a 1m-query baseline" in " ".join(in_ci.lower().split())
    assert re.search(r"\*\*\d+(\.\d+)? MB\*\*", in_ci), "the measured size of the 1M-query baseline"


def test_the_readme_shows_the_judge_prompt_exactly_and_the_simulation_figures() -> None:
    from rankgate.judge_prompt import PROMPT_TEXT, PROMPT_VERSION, SYSTEM_TEXT

    judging = _section((ROOT / "README.md").read_text(encoding="utf-8"), "## Judging with a model")
    assert f"SYSTEM\n{SYSTEM_TEXT}\n\nUSER\n{PROMPT_TEXT.rstrip()}\n```" in judging
    assert f"version `{PROMPT_VERSION}`" in judging
    assert "bench/ppi_simulation.py" in judging and "tests/ppi/test_ppi_simulation.py" in judging
    assert "docs/judging.md" in judging


def test_the_readme_links_resolve_and_reach_every_command_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert local
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
    for page in ("getting-started.md", "concepts.md", "cli-reference.md", "api.md", "metrics.md"):
        assert f"docs/{page}" in local
    for page in ("eval.md", "compare.md", "plan.md", "labels-todo.md", "clicks.md", "stores.md"):
        assert f"docs/{page}" in local
    for page in ("monitor.md", "nightly.md", "spark.md", "ci.md"):
        assert f"docs/{page}" in local


def _section(text: str, heading: str) -> str:
    """The text under a Markdown heading that starts with ``heading``, up to the next heading of
    the same level."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    assert starts, f"README has no section {heading!r}"
    body = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith(level + " "):
            break
        body.append(line)
    return "\n".join(body)
