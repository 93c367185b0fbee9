"""Datasets on object storage, against a local S3-compatible server the tests start (moto).

The server runs in this process (moto's threaded server: real HTTP on a local port); rankgate finds
it and its credentials the way it finds a real bucket's, through the environment
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...). Without moto the module is skipped, saying so,
unless ``RANKGATE_REQUIRE_SERVICES=1`` turns that into a failure.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dataset_files import (
    counting,
    dataset_records,
    day_of,
    write_hive_jsonl,
    write_hive_parquet,
    write_jsonl,
)

import rankgate.io.paths as paths_module
from rankgate import evaluate
from rankgate.cli import main

REQUIRED = os.environ.get("RANKGATE_REQUIRE_SERVICES") == "1"
try:
    import boto3
    from moto.server import ThreadedMotoServer
except ImportError as missing:  # pragma: no cover - depends on the environment
    if REQUIRED:
        raise RuntimeError(
            f"moto[server] is needed for the S3 tests ({missing}) (RANKGATE_REQUIRE_SERVICES=1)"
        ) from None
    pytest.skip(
        f"moto[server] is not installed ({missing}): pip install 'moto[server]'",
        allow_module_level=True,
    )

BUCKET = "traces"
SECRET = "s3cr3t-never-printed"
METRICS = ["ndcg@10", "mrr", "p@5"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        moto.stop()


@pytest.fixture(scope="module")
def bucket(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The traces uploaded as a Parquet dataset and a JSON Lines dataset; the local reference."""
    root = tmp_path_factory.mktemp("s3data")
    records = dataset_records()
    write_hive_parquet(root / "pq", records)
    write_hive_jsonl(root / "js", records)
    client = boto3.client(
        "s3",
        endpoint_url=server,
        aws_access_key_id="testing",
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), BUCKET, path.relative_to(root).as_posix())
    return {"records": records, "jsonl": write_jsonl(root / "all.jsonl", records)}


@pytest.fixture
def aws(server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Credentials and endpoint as a real deployment sets them: in the environment only."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return server


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, Any, str]:
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    report = json.loads(captured.out) if code in (0, 1) and captured.out.strip() else None
    return code, report, captured.err


ARGS = ("-m", "ndcg@10", "-m", "mrr", "-m", "p@5", "--format", "json", "--no-progress")


@pytest.mark.parametrize("where", ["pq", "pq/**/*.parquet", "js"])
def test_a_dataset_on_s3_gives_the_report_of_the_concatenated_jsonl(
    aws: str, bucket: dict[str, Any], capsys: pytest.CaptureFixture[str], where: str
) -> None:
    code, reference, err = run(capsys, "eval", bucket["jsonl"], *ARGS)
    assert code == 0, err
    url = f"s3://{BUCKET}/{where}"
    code, report, err = run(capsys, "eval", url, *ARGS)
    assert code == 0, err
    assert report["summary"] == reference["summary"]
    assert report["metrics"] == pytest.approx(reference["metrics"], rel=1e-12)
    assert report["intervals"] == reference["intervals"]
    assert report["sources"] == [url]


def test_the_python_api_reads_s3_too(aws: str, bucket: dict[str, Any]) -> None:
    got = evaluate(f"s3://{BUCKET}/pq", METRICS)
    expected = evaluate(bucket["jsonl"], METRICS)
    assert got.summary.read == expected.summary.read == len(bucket["records"])
    assert {str(k): v for k, v in got.means.items()} == pytest.approx(
        {str(k): v for k, v in expected.means.items()}, rel=1e-12
    )


def test_since_reads_only_the_matching_partitions_on_s3(
    aws: str,
    bucket: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[str] = []
    original = paths_module.filesystem_for

    def wrapped(spec: str) -> tuple[Any, str, bool]:
        filesystem, path, local = original(spec)
        if local:
            return filesystem, path, local
        counted, handler = counting(filesystem)
        handler.opened = opened
        return counted, path, local

    monkeypatch.setattr(paths_module, "filesystem_for", wrapped)
    code, report, err = run(
        capsys, "eval", f"s3://{BUCKET}/pq", "--since", "2026-12-04T12:00:00Z", *ARGS
    )
    assert code == 0, err
    assert opened
    assert {path.split("/")[-2] for path in opened} == {"date=2026-12-04", "date=2026-12-05"}
    # Day 4 from noon (hours 12..23 of its first 24 traces, and of the 16 after) and all of day 5.
    kept = [
        record
        for record in bucket["records"]
        if record["timestamp"] >= "2026-12-04T12:00:00" and day_of(record) >= "2026-12-04"
    ]
    assert report["summary"]["read"] == len(kept)
    expected = evaluate(kept, METRICS)
    assert report["metrics"] == pytest.approx({str(k): v for k, v in expected.means.items()})


# --- errors: one line, exit 2, nothing secret ---------------------------------------------------


def refused(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    code, _, err = run(capsys, "eval", *args, "-m", "mrr", "--no-progress")
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("rankgate: error: ")
    assert SECRET not in err
    return err


def test_a_missing_bucket_or_prefix_is_one_line(
    aws: str, bucket: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no such file or folder" in refused(capsys, "s3://no-such-bucket/traces/")
    assert "no such file or folder" in refused(capsys, f"s3://{BUCKET}/nothing-here/")
    assert "no file matches" in refused(capsys, f"s3://{BUCKET}/pq/*.csv")


def test_refused_credentials_are_one_line_without_the_secret(
    aws: str,
    bucket: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import moto.settings

    # From here on the server checks signatures, and knows no such key.
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    err = refused(capsys, f"s3://{BUCKET}/pq")
    assert f"s3://{BUCKET}/pq" in err


def test_credentials_in_the_url_are_masked_everywhere(
    aws: str,
    bucket: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"s3://testing:{SECRET}@{BUCKET}/pq"
    code, report, err = run(capsys, "eval", url, *ARGS)
    assert code == 0, err
    assert SECRET not in json.dumps(report) and SECRET not in err
    assert report["sources"] == [f"s3://testing:***@{BUCKET}/pq"]
    import moto.settings

    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    assert "s3://testing:***@" in refused(capsys, url)


def test_an_unreachable_endpoint_is_one_line(
    aws: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    err = refused(capsys, f"s3://{BUCKET}/pq")
    assert f"s3://{BUCKET}/pq:" in err
