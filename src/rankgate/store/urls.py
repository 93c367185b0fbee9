"""Store URLs as text: which texts are store URLs, how one is shown (as written, passwords
masked), and how a driver's message is cleaned of the passwords it may quote.

Kept apart from the backends because everything here runs before, or without, a connection, and
is shared by every command that prints a store's name.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, unquote

__all__ = [
    "CONTROL",
    "FILE_SYSTEM_SCHEMES",
    "SCHEME",
    "SCHEMES",
    "credentials_problem",
    "describe_error",
    "is_store_url",
    "redact_url",
    "sqlite_url_for",
]

SCHEMES = ("sqlite", "postgresql", "postgres")
# Schemes that name files rather than databases (Spark and fsspec read these as paths), so a
# source written with one of them is never taken for a store URL.
FILE_SYSTEM_SCHEMES = frozenset(
    {
        "file", "http", "https", "ftp", "s3", "s3a", "s3n", "gs", "gcs", "hdfs", "webhdfs",
        "viewfs", "abfs", "abfss", "wasb", "wasbs", "adl", "dbfs", "oss", "cos", "cosn", "az",
    }
)  # fmt: skip
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def sqlite_url_for(path: object) -> str | None:
    """The store URL a user most likely meant by a bare path to a SQLite file (``x.db``), for an
    error message to suggest; None for anything else."""
    if not isinstance(path, (str, Path)) or is_store_url(str(path)):
        return None
    if Path(path).suffix.lower() not in (".db", ".sqlite", ".sqlite3"):
        return None
    # Percent-encoded as connect() decodes it, so a '%' or '#' in the name survives the trip.
    return "sqlite:///" + quote(str(path), safe="/~:@+=,")


def is_store_url(text: object) -> bool:
    """True for anything written ``scheme://...`` that is not a file-system URL (``s3a://``,
    ``file://``...): ``sqlite:///...`` and ``postgresql://...`` are stores, and ``mysql://...`` is
    taken for one too, so that ``connect`` refuses it by name instead of it reading as a missing
    file."""
    if not isinstance(text, str):
        return False
    match = SCHEME.match(text)
    return match is not None and match.group(1).lower() not in FILE_SYSTEM_SCHEMES


#: Query parameters that carry a secret: a database password, or the token or key an HTTP service
#: (an MLflow server, object storage's signed URLs) takes in the URL.
SECRET_PARAMETERS = (
    "password|passwd|pwd|token|access_token|auth_token|api_key|apikey|secret|client_secret|"
    "sig|signature"
)
_PASSWORD_PARAMETER = re.compile(rf"(?i)[?&](?:{SECRET_PARAMETERS})=([^&#]*)")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _password_spans(url: str) -> list[tuple[int, int, bool]]:
    """Where a URL holds passwords: ``(start, end, in_user_part)`` for the user part's password
    and for each secret parameter (``password=``, ``token=`` ...). SQLite URLs carry none."""
    match = SCHEME.match(url)
    if match is None or match.group(1).lower() == "sqlite":
        return []
    start = match.end()
    rest = url[start:]
    spans: list[tuple[int, int, bool]] = []
    # The user part ends at the last '@' of the authority, which ends at the first '/', '?' or
    # '#'. A password holding one of those unencoded ends the authority early; then the user
    # part runs to the first '@', provided its ':' comes before any '/'.
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    at = authority.rfind("@")
    if at < 0:
        at = rest.find("@")
        head = rest[: max(at, 0)]
        slash = head.find("/")
        if ":" not in head or (0 <= slash < head.find(":")):
            at = -1
    if at >= 0:
        colon = rest[:at].find(":")
        if colon >= 0 and colon + 1 < at:
            spans.append((start + colon + 1, start + at, True))
    for parameter in _PASSWORD_PARAMETER.finditer(url):
        if parameter.end(1) > parameter.start(1) and parameter.start() >= start:
            spans.append((parameter.start(1), parameter.end(1), False))
    return spans


def _secrets(url: str) -> list[str]:
    """Every password in ``url``, as written and percent-decoded, longest first."""
    found: set[str] = set()
    for begin, end, _ in _password_spans(url):
        raw = url[begin:end]
        found.update(text for text in (raw, unquote(raw)) if text)
    return sorted(found, key=len, reverse=True)


def credentials_problem(url: str) -> str | None:
    """What is wrong with a password in ``url`` that the driver would misread (and then quote
    back in its error): a character a URL must percent-encode, or a '%' that starts no escape."""
    for begin, end, in_user_part in _password_spans(url):
        raw = url[begin:end]
        unsafe = r"[\s@/?#]" if in_user_part else r"\s"
        where = "the password" if in_user_part else "the password= parameter"
        if re.search(unsafe, raw) or _BAD_PERCENT.search(raw):
            return (
                f"{where} must be percent-encoded in a URL (%20 for a space, %40 for @, "
                "%2F for /, %3F for ?, %23 for #, %25 for %)"
            )
    return None


def describe_error(problem: BaseException, url: str | None = None) -> str:
    """A driver's message on one line, with every password masked: those of ``url`` (as written
    and percent-decoded, wherever the driver quotes them) and any other URL's or
    ``password=`` setting's."""
    text = str(problem).strip()
    line = " ".join(text.splitlines()) if text else type(problem).__name__
    if url:
        secrets = _secrets(url)

        def scrub(piece: str) -> str:
            for secret in secrets:
                piece = piece.replace(secret, "***")
            return piece

        # The URL itself, where quoted whole, is shown as given with its password masked.
        line = redact_url(url).join(scrub(piece) for piece in line.split(url))
    line = re.sub(r"(://[^:/@\s\"']*:)[^@\s\"']*@", r"\1***@", line)
    return re.sub(
        rf"(?i)(\b(?:{SECRET_PARAMETERS})\s*=\s*)('[^']*'|\"[^\"]*\"|[^&\s\"']*)", r"\1***", line
    )


def redact_url(url: str) -> str:
    """The URL exactly as written, but for its passwords (in the user part and in ``password=``
    parameters), shown as ``***``; control characters are shown escaped, so the URL stays on
    one line and can be pasted back."""
    masked = url
    for begin, end, _ in sorted(_password_spans(url), reverse=True):
        masked = masked[:begin] + "***" + masked[end:]
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", masked)
