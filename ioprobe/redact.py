"""What may be shown of a string: secrets in URLs hidden, control characters made visible.

``redact_url`` hides the password of a URL's userinfo and the values of query parameters that
carry credentials (signed URLs, tokens, SAS signatures), in a bare URL or in any text that
quotes URLs (an error message from a library). It is applied where a target enters the tool,
so records, reports and error lines only ever hold the redacted form.

``printable`` turns control characters into visible escapes (``\\x1b``): a directory name or a
URL holding a terminal escape sequence must not retitle, clear or rewrite the user's terminal
when a report or an error line shows it. ``printable_all`` does that to every string in a
record, its findings or any other plain-data value, for the renderers that write to a terminal.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, TypeVar
from urllib.parse import unquote

MASK = "***"

# Query (and fragment) parameters whose value is a credential; compared lower-cased.
SENSITIVE_PARAMS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "awsaccesskeyid",
        "signature",
        "sig",
        "x-goog-signature",
        "x-goog-credential",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "session_token",
        "security_token",
        "auth",
        "auth_token",
        "private_token",
        "client_secret",
        "secret",
        "password",
        "passwd",
        "pwd",
        "key",
        "api_key",
        "apikey",
        "x-api-key",
    }
)

# A URL inside free text: a scheme, "://", and everything up to whitespace or a quote, less
# the punctuation that ends a sentence or a clause ("{url}: not found")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]*[^\s\"'<>`.,:;!?)\]}]")
# userinfo with a password in it; the password may hold an unencoded "/" or "?" (a secret
# key pasted as it is), so it runs to the "@" rather than to the authority's end
_USERINFO = re.compile(r"(?P<user>[^/?#@:\s]*):(?P<password>[^\s@]*)@")
_PORT = re.compile(r"\d+(?:[/?#]|$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

T = TypeVar("T")


def redact_url(text: str) -> str:
    """``text`` with every URL in it redacted: ``scheme://user:***@host/path?sig=***&n=1``.

    Works on a bare URL and on a message that quotes one; text without ``://`` is returned as
    it is, so a local path is never changed.
    """
    if "://" not in text:
        return text
    return _URL.sub(lambda m: _redact_one(m.group()), text)


def _redact_one(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{_redact_query(_redact_userinfo(rest))}"


def _redact_userinfo(rest: str) -> str:
    """The part after ``scheme://`` with the userinfo's password masked."""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, end)
    if at >= 0:
        user, colon, password = rest[:at].partition(":")
        return f"{user}:{MASK}{rest[at:]}" if colon and password else rest
    m = _USERINFO.match(rest)
    if m is None or not m.group("password") or _PORT.match(m.group("password")):
        return rest  # host:port/path@name (an "@2x" image) is no userinfo
    return f"{m.group('user')}:{MASK}@{rest[m.end() :]}"


def _redact_query(rest: str) -> str:
    """The query's and the fragment's credential parameters masked; the others kept."""
    q = rest.find("?")
    h = rest.find("#")
    start = min(i for i in (q, h) if i >= 0) if q >= 0 or h >= 0 else -1
    if start < 0:
        return rest
    tail = re.split(r"([?#&;])", rest[start:])
    return rest[:start] + "".join(_redact_param(part) for part in tail)


def _redact_param(part: str) -> str:
    name, eq, value = part.partition("=")
    if eq and value and unquote(name).strip().lower() in SENSITIVE_PARAMS:
        return f"{name}={MASK}"
    return part


def printable(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1; newline and tab too) written as a
    visible ``\\xNN`` escape, so it shows as text and never acts on a terminal."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def printable_all(value: T) -> T:
    """``value`` with ``printable`` applied to every string in it, through dataclasses,
    lists, tuples and dicts (keys too). Parts holding nothing to escape are returned as they
    are, not copied, so a clean record costs one walk and no allocation; a list that starts
    and ends with numbers is taken to hold only numbers and is not walked."""
    return _printable_any(value)  # type: ignore[no-any-return]


def _printable_any(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list | tuple):
        if isinstance(value, list) and value and _is_number(value[0]) and _is_number(value[-1]):
            # the lists of records and findings hold one type each (a tuple may mix): a series
            # of a million numbers holds no string, and walking it would cost seconds per view
            return value
        items = [_printable_any(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        pairs = [(_printable_any(k), _printable_any(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _printable_dataclass(value)
    return value


def _is_number(value: Any) -> bool:
    return value is None or isinstance(value, int | float)


def _printable_dataclass(value: Any) -> Any:
    changed = {}
    for f in dataclasses.fields(value):
        old = getattr(value, f.name)
        new = _printable_any(old)
        if new is not old:
            changed[f.name] = new
    if not changed:
        return value
    out = copy.copy(value)
    for name, new in changed.items():
        object.__setattr__(out, name, new)  # a frozen dataclass too: this is a fresh copy
    return out


__all__ = ["MASK", "SENSITIVE_PARAMS", "printable", "printable_all", "redact_url"]
