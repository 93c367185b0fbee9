"""The HTML reports in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven through Selenium.

Each test loads a report from disk and checks what only a browser can tell: the page's own script
runs under its Content-Security-Policy with no console error, every chart has rendered, tables sort
on click and filter as one types, and payloads hidden in trace IDs do not execute. Screenshots go to
``test-output/`` at the project root.

Without a browser these tests skip with the reason; ``.ci/run`` installs one and sets
``RANKGATE_REQUIRE_BROWSER=1``, which turns a missing browser into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_html import GATED, evil_rows

from conftest import RunCli, WriteJsonl

ROOT = Path(__file__).parents[2]
OUTPUT = ROOT / "test-output"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
REQUIRED = os.environ.get("RANKGATE_REQUIRE_BROWSER") == "1"

# Set by the payloads below if any of them ever runs.
PAYLOADS = (
    '<img src=x onerror="window.__pwned=1">',
    "</script><script>window.__pwned=2</script>",
    '"><svg onload="window.__pwned=3">',
)


def _missing() -> list[str]:
    missing = [
        name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path
    ]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    return missing


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        reason = (
            f"no headless browser here ({', '.join(missing)} missing): "
            "apt-get install chromium chromium-driver"
        )
        if REQUIRED:
            pytest.fail(reason + " (RANKGATE_REQUIRE_BROWSER=1)")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def load(driver: Any, page: Path) -> list[dict[str, Any]]:
    """Open ``page`` and return what its console logged while loading."""
    driver.get_log("browser")  # drop what earlier pages logged
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    driver.get(page.resolve().as_uri())
    driver.execute_script("return document.readyState")
    return list(driver.get_log("browser"))


def errors(log: list[dict[str, Any]]) -> list[str]:
    return [entry["message"] for entry in log if entry["level"] in ("SEVERE", "ERROR")]


def screenshot(driver: Any, name: str) -> Path:
    """A full-page screenshot under test-output/."""
    OUTPUT.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 40, 16000))
    path = OUTPUT / name
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1280, 900)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def rendered_charts(driver: Any) -> list[dict[str, float]]:
    """Size and drawn-element count of every chart, as the browser laid them out."""
    return list(
        driver.execute_script(
            """
            return Array.from(document.querySelectorAll("svg.chart")).map(function (svg) {
              const box = svg.getBoundingClientRect();
              const drawn = svg.querySelectorAll("rect, path, line").length;
              return {width: box.width, height: box.height, drawn: drawn};
            });
            """
        )
    )


def column(driver: Any, table: str, index: int) -> list[str]:
    return list(
        driver.execute_script(
            "const index = arguments[1];"
            "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows)"
            ".filter(function (r) { return !r.hidden; })"
            ".map(function (r) { return r.cells[index].textContent; });",
            table,
            index,
        )
    )


def click_header(driver: Any, table: str, label: str) -> None:
    from selenium.webdriver.common.by import By

    button = driver.find_element(
        By.XPATH, f"//table[@id='{table}']/thead//button[normalize-space()='{label}']"
    )
    driver.execute_script("arguments[0].scrollIntoView()", button)
    button.click()


def numbers(texts: list[str]) -> list[float]:
    return [float(text.replace("+", "")) for text in texts]


def test_demo_report_renders_sorts_filters_and_is_screenshotted(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    if shutil.which("make") is None:
        pytest.skip("make is not installed, so `make demo` cannot run")
    page = tmp_path / "demo-report.html"
    demo = subprocess.run(
        ["make", "--no-print-directory", "demo", f"DEMO_HTML={page}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert page.is_file()

    assert errors(load(browser, page)) == []
    charts = rendered_charts(browser)
    # Means, one per gated metric across segments (3 gates), one histogram per metric (7).
    assert len(charts) == 1 + 3 + 7
    for chart in charts:
        assert chart["width"] > 100 and chart["height"] > 50 and chart["drawn"] > 5

    # Sorting: the worst-queries table starts worst-first on ndcg@10, then sorts on each click.
    # Columns: query ID, query, query_type, retriever, first ranks, missed, ndcg@5, ndcg@10, mrr
    ndcg10 = numbers(column(browser, "worst", 7))
    assert ndcg10 == sorted(ndcg10) and ndcg10[0] < ndcg10[-1]
    click_header(browser, "worst", "query ID")
    ids = column(browser, "worst", 0)
    assert ids == sorted(ids, key=str.lower) and len(ids) > 20
    click_header(browser, "worst", "query ID")
    assert column(browser, "worst", 0) == sorted(ids, key=str.lower, reverse=True)
    click_header(browser, "worst", "mrr")
    mrr = numbers(column(browser, "worst", 8))
    assert mrr == sorted(mrr) and mrr[0] < mrr[-1]
    header = browser.find_element(By.XPATH, "//table[@id='worst']/thead/tr/th[9]")
    assert header.get_attribute("aria-sort") == "ascending"

    # Filtering on a query ID leaves that query's row alone.
    box = browser.find_element(By.CSS_SELECTOR, "input.filter[data-table='worst']")
    box.send_keys(ids[3])
    assert column(browser, "worst", 0) == [ids[3]]
    count = browser.find_element(By.ID, "worst-count").text
    assert count == f"showing 1 of {len(ids)}"
    box.clear()
    box.send_keys(" ")  # an input event with an empty needle shows every row again
    assert len(column(browser, "worst", 0)) == len(ids)

    assert errors(list(browser.get_log("browser"))) == []
    screenshot(browser, "demo-report.png")

    # Dark mode keeps the page readable: the background turns dark, the text light.
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    colours = browser.execute_script(
        "const s = getComputedStyle(document.body); return [s.backgroundColor, s.color];"
    )
    assert colours == ["rgb(13, 17, 23)", "rgb(230, 237, 243)"]
    screenshot(browser, "demo-report-dark.png")


def test_payloads_in_trace_ids_never_run(
    browser: Any, cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    rows = evil_rows()
    for number, row in enumerate(rows):
        payload = PAYLOADS[number % len(PAYLOADS)]
        ids = list(row["retrieved_ids"])  # type: ignore[call-overload]
        ids[1] = f"{payload}#{number}"
        row.update(retrieved_ids=ids, query=payload, query_type=payload)
    traces = write_jsonl(rows, "evil.jsonl")
    page = tmp_path / "evil.html"
    cli("eval", traces, *GATED, "--format", "html", "--worst", "200", "-o", page)

    log = load(browser, page)
    assert browser.execute_script("return window.__pwned === undefined")
    assert errors(log) == []
    # The payloads are on the page as text, where a reader can see what the trace held.
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('#worst td:nth-child(2)'))"
        ".map(function (td) { return td.textContent; });"
    )
    assert set(PAYLOADS) <= set(shown)
    click_header(browser, "worst", "query")
    assert browser.execute_script("return window.__pwned === undefined")
    screenshot(browser, "escaped-payloads.png")


def test_compare_report_renders_and_sorts(
    browser: Any, cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    from ab_data import AB_METRICS, ab_traces

    baseline, regressed, _ = ab_traces(queries=600)
    base = write_jsonl(baseline, "baseline.jsonl")
    cand = write_jsonl(regressed, "candidate.jsonl")
    page = tmp_path / "compare.html"
    result = cli(
        "compare",
        base,
        cand,
        "-m",
        ",".join(AB_METRICS),
        "--segment-by",
        "query_type",
        "--format",
        "html",
        "-o",
        page,
    )
    assert result.code == 1
    assert errors(load(browser, page)) == []
    charts = rendered_charts(browser)
    metrics = 4  # ndcg@5, ndcg@10, mrr, recall@20
    assert len(charts) == metrics + 1  # a forest plot per metric, and the win/tie/loss bars
    assert all(chart["width"] > 100 and chart["drawn"] > 5 for chart in charts)
    regression_marks = browser.execute_script(
        "return document.querySelectorAll('svg.chart > path.marker.regression').length"
    )
    assert regression_marks >= 2

    click_header(browser, "c0-cells", "Δ")
    deltas = numbers(column(browser, "c0-cells", 5))
    assert deltas == sorted(deltas) and deltas[0] < 0
    # The most negative delta is a flagged regression on an NDCG metric in multi_hop.
    first = browser.execute_script(
        "const r = document.getElementById('c0-cells').tBodies[0].rows[0];"
        "return [r.cells[0].textContent, r.cells[1].textContent, r.className];"
    )
    assert (
        first[0] == "query_type=multi_hop"
        and first[1].startswith("ndcg")
        and "regression" in first[2]
    )
    assert errors(list(browser.get_log("browser"))) == []
    screenshot(browser, "compare-report.png")
