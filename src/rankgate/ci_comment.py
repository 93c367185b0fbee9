"""The one pull-request comment of ``rankgate.ci_action``, posted, updated and deleted through
the ``gh`` CLI and the job's token.

A rankgate comment is a comment whose body starts with ``COMMENT_MARKER`` (a hidden HTML comment)
and, by default, whose author is ``github-actions[bot]``, the identity of the job's token: a comment
that merely quotes the marker, or someone else's comment that starts with it, is never written over
or deleted. Everything goes through a ``GhRunner``, so tests record the calls instead of making
them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "COMMENT_MARKER",
    "DEFAULT_AUTHOR",
    "GhError",
    "GhRunner",
    "PullRequestComment",
    "gh_environment",
    "pull_request_number",
    "run_gh",
]

#: The first line of the pull-request comment, which finds it again on the next run.
COMMENT_MARKER = "<!-- rankgate-report -->"
#: Who posts with the job's own token (``secrets.GITHUB_TOKEN``).
DEFAULT_AUTHOR = "github-actions[bot]"
_TIMEOUT = 120


class GhError(Exception):
    """A ``gh`` invocation that failed (not installed, refused by the API, timed out)."""


#: Runs ``gh`` with these arguments and environment, returns its standard output.
GhRunner = Callable[[Sequence[str], Mapping[str, str]], str]


def run_gh(arguments: Sequence[str], environ: Mapping[str, str]) -> str:
    """The ``gh`` CLI, for real: its standard output, or ``GhError`` with its message."""
    try:
        done = subprocess.run(
            ["gh", *arguments],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise GhError("the gh CLI is not installed on this runner") from None
    except subprocess.TimeoutExpired:
        raise GhError(f"gh {' '.join(arguments[:4])} took longer than {_TIMEOUT} s") from None
    if done.returncode != 0:
        message = " ".join(done.stderr.split())[:300] or f"exit code {done.returncode}"
        raise GhError(f"gh {' '.join(arguments[:4])}: {message}")
    return done.stdout


def gh_environment(environ: Mapping[str, str], token: str) -> dict[str, str]:
    """The environment ``gh`` runs in: the token, the host (GitHub Enterprise Server reads its
    token from another variable), and no prompts or colour."""
    env = dict(environ)
    env.update(GH_TOKEN=token, GH_PROMPT_DISABLED="1", NO_COLOR="1")
    host = urlsplit(environ.get("GITHUB_SERVER_URL", "")).hostname
    if host and host != "github.com":
        env.update(GH_HOST=host, GH_ENTERPRISE_TOKEN=token)
    return env


def pull_request_number(environ: Mapping[str, str]) -> int | None:
    """The pull request the event is about (``pull_request``, ``pull_request_target``, or a
    comment on a pull request); None for any other event or without a readable event file."""
    event_path = environ.get("GITHUB_EVENT_PATH", "")
    if not event_path:
        return None
    try:
        event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(event, dict):
        return None
    pull, issue = event.get("pull_request"), event.get("issue")
    if isinstance(pull, dict):
        number = pull.get("number")
    elif isinstance(issue, dict) and issue.get("pull_request"):
        number = issue.get("number")
    else:
        return None
    return number if isinstance(number, int) and not isinstance(number, bool) else None


@dataclass
class PullRequestComment:
    """The rankgate comment of one pull request. ``author`` empty: any author's comment that
    starts with the marker counts (for a token whose login is not known in advance). ``done``
    collects what was done, in words, for the log."""

    repository: str
    number: int
    author: str
    environ: Mapping[str, str]
    gh: GhRunner = run_gh
    done: list[str] = field(default_factory=list)

    def existing(self) -> list[int]:
        """The IDs of the rankgate comments already on the pull request, oldest first."""
        path = f"repos/{self.repository}/issues/{self.number}/comments?per_page=100"
        found = []
        for comment in _json_pages(self.gh(["api", "--paginate", path], self.environ)):
            if not isinstance(comment, dict):
                continue
            body, user = comment.get("body"), comment.get("user")
            login = user.get("login") if isinstance(user, dict) else None
            if (
                isinstance(body, str)
                and body.startswith(COMMENT_MARKER)
                and (not self.author or login == self.author)
                and isinstance(comment.get("id"), int)
            ):
                found.append(comment["id"])
        return found

    def post(self, body_file: Path) -> None:
        """Leave one rankgate comment with this body: the oldest earlier one written over (so
        the thread keeps its place), further ones deleted, or a new one."""
        request = body_file.with_suffix(".json")
        body = body_file.read_text(encoding="utf-8")
        request.write_text(json.dumps({"body": body}), encoding="utf-8")
        earlier = self.existing()
        if earlier:
            path = f"repos/{self.repository}/issues/comments/{earlier[0]}"
            self._api("PATCH", path, "--input", str(request))
            self.done.append(f"updated the rankgate comment on pull request #{self.number}")
        else:
            path = f"repos/{self.repository}/issues/{self.number}/comments"
            self._api("POST", path, "--input", str(request))
            self.done.append(f"commented on pull request #{self.number}")
        self.delete(earlier[1:])

    def delete(self, ids: Sequence[int]) -> None:
        for comment_id in ids:
            self._api("DELETE", f"repos/{self.repository}/issues/comments/{comment_id}")
        if ids:
            self.done.append(
                f"deleted {len(ids)} earlier rankgate comment(s) on pull request #{self.number}"
            )

    def _api(self, method: str, path: str, *extra: str) -> str:
        return self.gh(["api", "--method", method, path, *extra], self.environ)


def _json_pages(text: str) -> list[Any]:
    """``gh api --paginate`` output: one JSON array per page, written one after another.

    Raises:
        GhError: output that is not JSON.
    """
    decoder = json.JSONDecoder()
    items: list[Any] = []
    text = text.strip()
    position = 0
    try:
        while position < len(text):
            page, position = decoder.raw_decode(text, position)
            items.extend(page if isinstance(page, list) else [page])
            while position < len(text) and text[position].isspace():
                position += 1
    except ValueError:
        raise GhError("gh api returned something other than JSON") from None
    return items
