"""What may be shown of a string: the two boundaries every outside string crosses.

Masking. ``redact_url`` hides the secrets of every URL in a text: the userinfo's password, a
token standing as the whole userinfo (``https://TOKEN@host/``), and the value of every query or
fragment parameter whose name says it is a credential (``sensitive_param``). A URL is found by
its ``scheme://`` and parsed from there, so a password holding a quote, a slash or an ``@`` is
masked whole. ``redact_message`` does that to a library's error text and also masks the
secrets of the URLs ioprobe was given wherever the text repeats them without their scheme
(botocore quotes ``KEY:SECRET@bucket`` as a bucket name). Both are applied where a target
enters the tool, to error lines, to every string a record loads, and again by ``shown``.

Escaping. ``printable`` turns what could act on a terminal or break an encoder into visible
escapes: C0 and C1 control characters (``\\x1b``, ``\\x9b``), DEL, bidi overrides
(``\\u202e``) and the surrogates Python uses for bytes that are not UTF-8 (a file named
``bad\\xff`` shows as that text). ``shown`` is redaction then ``printable``; ``shown_all``
applies it to every string of a record, its findings or any plain-data value. Every renderer
calls ``shown_all`` on what it is given before it formats anything, then escapes for its own
format (HTML entities, Markdown backslashes, JSON); terminal views print through ``console``,
which reads no rich markup and no emoji codes, so a name holding ``[/]`` or ``:smile:`` is
text on every path by construction.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

if TYPE_CHECKING:
    from rich.console import Console

MASK = "***"

# Query (and fragment) parameters whose value is a credential; compared lower-cased. The list
# the tests walk; ``sensitive_param`` also takes any name whose words say "credential"
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
        "access_key",
        "secret_key",
        "jwt",
        "session",
        "code",
        "credential",
        "credentials",
        "bearer",
        "hmac",
        "client_assertion",
        "passphrase",
        "pass",
        "passcode",
        "pw",
        "cookie",
        "ticket",
        "sk",
    }
)
# a name is a credential's when one of its words (split at anything not a letter or digit) is
# one of these, or it holds one of the longer ones anywhere (``AWSAccessKeyId``, ``sessionid``)
_SECRET_WORDS = frozenset(
    {"sig", "signature", "token", "secret", "password", "passwd", "pwd", "key", "apikey"}
    | {"auth", "authorization", "jwt", "session", "code", "credential", "credentials", "sas"}
    | {"bearer", "hmac", "assertion", "passphrase", "pass", "passcode", "pw", "cookie", "ticket"}
    | {"otp", "totp", "hotp", "pin", "mfa", "2fa", "nonce"}
    # a personal access token, a refresh token, a credential cut short, a signed URL's
    # HMAC under another name, a session's or a form's token
    | {"pat", "refresh", "cred", "creds", "hash", "digest", "csrf", "xsrf", "sid"}
    # a signed link's hash under a CDN's or a server's own name (nginx's secure_link md5,
    # Akamai's hdnts/hdnea/__gda__), a MAC, a WS-Federation token, a one-time token
    | {"md5", "sha1", "sha256", "mac", "hdnts", "hdnea", "gda", "wresult", "ott", "tk", "tok"}
)
_SECRET_PARTS = (
    "private",
    "auth",
    "pass",
    "signature",
    "credential",
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "accesskey",
    "secretkey",
    "session",
    "jwt",
    "bearer",
    "passphrase",
    "sessid",  # PHP's PHPSESSID, sessid
    "saml",  # SAMLResponse, SAMLart: a bearer assertion or a handle on one
)
# a name ending so is a key's (``privatekey``, ``accountkey``, ``masterkeys``, ``dbpw``), but
# for the words that end so and say nothing of one
_SECRET_ENDS = ("key", "keys", "pw", "pwd")
_KEY_WORDS = frozenset({"monkey", "donkey", "turkey", "hockey", "jockey", "whiskey", "lackey"})
_WORD = re.compile(r"[^a-z0-9]+")
# a URL without its ``//`` or its scheme (``//user:pass@host/``, ``http:/user:pass@host/``),
# which a shell or a typo leaves and ioprobe reads as a path: a first segment of
# ``user:password@`` is masked all the same (no backslash in it, as in ``_AUTHORITY``)
_BARE_USERINFO = re.compile(
    r"(?<![^\s\"'(<=])((?:[A-Za-z][A-Za-z0-9+.\-]*:)?/+)([^/?#@:\s\"'<>`\\]*):[^/?#@\s\"'<>`\\]*@"
)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# where a URL quoted in text ends: whitespace or a quote, less the punctuation that ends a
# sentence or a clause ("{url}: not found")
_URL_TAIL = re.compile(r"[^\s\"'<>`]*[^\s\"'<>`.,:;!?)\]}]")
# a URL's authority after its userinfo: host and port, up to its path, query or fragment,
# or a backslash (none belongs there, and ``printable``'s escapes begin with one: a port
# read up to "\x0a" where the first pass stopped at the newline would mask it a second time)
_AUTHORITY = re.compile(r"[^/?#\s\"'<>`\\]*")
# the user of a userinfo: no delimiter of the authority in it
_USER = re.compile(r"[^/?#@:\s\"'<>`]*\Z")
# a plain login (POSIX user name shape) as a whole userinfo is shown; anything else with no
# password (a token, an upper-case key) is taken for a credential
_LOGIN = re.compile(r"[a-z_][a-z0-9_.\-]{0,31}\Z")
_PORT = re.compile(r"\d+(?:[/?#]|\Z)")
# schemes whose userinfo is an access key pair (fsspec's s3fs, gcsfs, adlfs, ossfs URLs)
KEY_PAIR_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "az", "abfs", "abfss", "oss"})
# an AWS-style access key id (long-term AKIA, temporary ASIA, ...): four letters, 16 more
_KEY_ID = re.compile(r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\Z")
# what printable escapes: C0, DEL, C1, the line and paragraph separators, bidi embeddings,
# overrides and isolates, and surrogates (undecodable bytes under surrogateescape)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

T = TypeVar("T")


def sensitive_param(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a credential: one of
    ``SENSITIVE_PARAMS``, or a name whose words say so (``X-Amz-Credential``, ``sas_token``,
    ``AWSAccessKeyId``, ``client-secret``). Percent-encoded names are decoded first."""
    low = unquote(name).strip().lower()
    if low in SENSITIVE_PARAMS:
        return True
    if any(word in _SECRET_WORDS for word in _WORD.split(low)):
        return True
    squashed = _WORD.sub("", low)
    if squashed.endswith(_SECRET_ENDS) and squashed.rstrip("s") not in _KEY_WORDS:
        return True
    if squashed.startswith("sig") or squashed.endswith("sig"):  # sigv4, apisig
        return True
    return any(part in squashed for part in _SECRET_PARTS)


def redact_url(text: str, whole: bool = False) -> str:
    """``text`` with every URL in it redacted: ``scheme://user:***@host/path?sig=***&n=1``.

    Works on a bare URL and on a message that quotes one; text without ``://`` is returned as
    it is, so a local path is never changed, but for a first segment ``user:password@`` after
    its leading slashes (a URL missing its scheme or a slash: ``_BARE_USERINFO``). ``whole``: ``text`` is one URL as it was given
    (a target on the command line), whose password may hold whitespace.
    """
    if "@" in text and ":" in text:
        text = _BARE_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
    if "://" not in text:
        return text
    out: list[str] = []
    pos = 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue  # inside the URL just masked (a URL quoted in a query value)
        out.append(text[pos : m.end()])
        start = m.end()
        one = whole and m.start() == 0
        after_userinfo, masked = _userinfo(text, start, m.group(0)[:-3].lower(), whole=one)
        out.append(masked)
        after_host, host = _host(text, after_userinfo)
        out.append(host)
        tail = _URL_TAIL.match(text, after_host)
        end = tail.end() if tail else after_host
        out.append(_redact_query(text[after_host:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _userinfo(text: str, start: int, scheme: str = "", whole: bool = False) -> tuple[int, str]:
    """Where the host starts after ``scheme://`` at ``start``, and the userinfo as shown.

    An object store's userinfo (``s3://KEY:SECRET@bucket``) is a credential pair, not a
    login: its key id is masked with the secret, as is a user name shaped like a cloud
    access key id (``AKIA...``) in any scheme.

    The userinfo runs to the last ``@`` before the next whitespace that is followed by a host:
    a password may hold ``/``, ``?``, ``'`` or ``@`` (a secret key pasted as it is), so no
    single delimiter can end it. ``host:port/path@name`` (an ``@2x`` image) is no userinfo.
    ``whole``: ``text`` is one URL as it was given (an argument), whose password may hold
    whitespace too.

    With a password, the user is shown only where it is a plain login: a token as the user
    (``https://ghp_TOKEN:x-oauth-basic@host``) is masked with it.
    """
    stop = start
    while stop < len(text) and (whole or not text[stop].isspace()):
        stop += 1
    at = text.rfind("@", start, stop)
    while at >= 0:
        info = text[start:at]
        user, colon, password = info.partition(":")
        if _USER.match(user) and not (colon and _PORT.match(password)):
            if colon and "/" not in user:
                if scheme in KEY_PAIR_SCHEMES or _KEY_ID.match(user) or not _LOGIN.match(user):
                    return at, MASK
                return at, f"{user}:{MASK}" if password else info
            if "/" in info or "?" in info or "#" in info:
                pass  # "host/path@x" with no colon: an "@" in a path
            elif info and info != MASK and not _LOGIN.match(info):
                return at, MASK  # a token as the whole userinfo
            else:
                return at, info
        at = text.rfind("@", start, at)
    return start, ""


def _host(text: str, start: int) -> tuple[int, str]:
    """Where the host ends after the userinfo at ``start``, and the host as shown, where its
    port is no number: nothing but digits belongs there, and what does stand there (a
    password typed where the host belonged, ``http://user:SECRET/``) is masked. Otherwise
    ``(start, "")``: the host is shown as the rest of the URL is."""
    auth = _AUTHORITY.match(text, start)
    head, colon, port = (auth.group() if auth else "").rpartition(":")
    port = port.rstrip(".,:;!?)]}")
    if not colon or not head or not port or port.isdigit() or "]" in port:
        return start, ""
    return start + len(head) + 1 + len(port), f"{head}:{MASK}"


def _redact_query(rest: str) -> str:
    """The credential parameters masked in the path's segments (``;jsessionid=...``), the
    query and the fragment; the others kept."""
    q = rest.find("?")
    h = rest.find("#")
    start = min(i for i in (q, h) if i >= 0) if q >= 0 or h >= 0 else len(rest)
    path = rest[:start]
    if ";" in path:  # a path parameter follows a ";" and ends at the next "/" or ";"
        bits = re.split(r"([/;])", path)
        path = "".join(
            _redact_param(bit) if i and bits[i - 1] == ";" else bit for i, bit in enumerate(bits)
        )
    tail = re.split(r"([?#&;])", rest[start:])
    return path + "".join(_redact_param(part) for part in tail)


def _redact_param(part: str) -> str:
    name, eq, value = part.partition("=")
    if not eq:  # "=" percent-encoded (a server decodes the parameter before it splits it)
        cut = part.lower().find("%3d")
        if cut > 0:
            name, eq, value = part[:cut], part[cut : cut + 3], part[cut + 3 :]
    if eq and value and (sensitive_param(name) or _holds_secret_url(value)):
        return f"{name}{eq}{MASK}"
    return part


def _holds_secret_url(value: str) -> bool:
    """Whether a query value is a percent-encoded URL with a credential in it (a gateway's
    ``?url=``, an OAuth ``redirect_uri``): masked whole, as its parts are encoded."""
    if "%" not in value:
        return False
    inner = unquote(value)
    return "://" in inner and redact_url(inner) != inner


def secrets_of(urls: Iterable[str]) -> list[str]:
    """The credentials in ``urls`` as they could be quoted elsewhere (a password, a userinfo
    token, a sensitive query value; raw and percent-decoded), longest first; none shorter than
    4 characters, which would mask ordinary words."""
    found: set[str] = set()
    for url in urls:
        if "://" not in url:
            continue
        scheme, rest = url.split("://", 1)
        at, _ = _userinfo(url, len(url) - len(rest), whole=True)
        info = url[len(url) - len(rest) : at] if at > len(url) - len(rest) else ""
        if info:
            user, colon, password = info.partition(":")
            found.update([password] if colon else [user])
            key_pair = scheme.lower() in KEY_PAIR_SCHEMES or _KEY_ID.match(user)
            if colon and (key_pair or not _LOGIN.match(user)):
                found.add(user)  # an access key id or a token, masked in the URL too
            # a secret key holds "/", where a library that parses the URL its own way ends
            # the host and quotes the part before it ("Invalid bucket name KEY:SECRET-PART")
            found.update(password.split("/") if colon else [])
        for part in re.split(r"[?#&;]", rest)[1:]:
            name, eq, value = part.partition("=")
            if eq and (sensitive_param(name) or _holds_secret_url(value)):
                found.add(value)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def redact_message(text: str, urls: Iterable[str] = ()) -> str:
    """A library's or an error's text as it may be shown: every URL in it redacted, and every
    secret of ``urls`` (the real URLs ioprobe was given) masked wherever the text repeats it,
    with or without its scheme."""
    # the secrets first: one that holds whitespace ends the URL where redact_url reads it
    for secret in secrets_of(urls):
        text = text.replace(secret, MASK)
    return redact_url(text)


def printable(text: str) -> str:
    """``text`` with every character that could act on a terminal or fail an encoder written
    as a visible escape: control characters (C0, DEL, C1; newline and tab too) and undecodable
    bytes (surrogateescape's U+DC80-U+DCFF) as ``\\xNN``, bidi controls, line separators and
    other surrogates as ``\\uNNNN``."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # the byte the file system's name held
    return f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` as any output may show it: URLs redacted, then ``printable``."""
    return printable(redact_url(text))


def shown_all(value: T) -> T:
    """``value`` with ``shown`` applied to every string in it, through dataclasses, lists,
    tuples and dicts (keys too). Parts holding nothing to change are returned as they are, not
    copied, so a clean record costs one walk and no allocation; a list that starts and ends
    with numbers is taken to hold only numbers and is not walked."""
    return _map_strings(value, shown)  # type: ignore[no-any-return]


def redacted_all(value: T) -> T:
    """``value`` with ``redact_url`` applied to every string in it, as ``shown_all`` walks:
    what a saved record holds, whatever part of it a URL reached."""
    return _map_strings(value, redact_url)  # type: ignore[no-any-return]


def console(**options: Any) -> Console:
    """A rich ``Console`` that takes every string as text: no markup (``[/]`` in a class name
    would raise), no emoji codes, no highlighting. Every console ioprobe prints through is
    made here; ``options`` are the Console's own (``stderr``, ``file``, ``width``, ...)."""
    from rich.console import Console  # rich is for the edges: importing redact stays cheap

    if "width" not in options and _unusable_columns():
        # rich takes COLUMNS=0 at its word and renders everything to nothing
        options["width"] = 80
    out = Console(markup=False, emoji=False, highlight=False, **options)
    # rich's own answer to a reader that went away (`ioprobe env | head -0`) is a silent
    # SystemExit(1), and click's to a BrokenPipeError the same; ioprobe's is one line and
    # exit 2, as for any failed write
    out.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
    return out


def _unusable_columns() -> bool:
    """Whether ``COLUMNS`` is set to a width of nothing (0): rich's fallback takes over for
    any value it cannot parse, but not for that one."""
    try:
        return int(os.environ.get("COLUMNS", "")) <= 0
    except ValueError:
        return False


def _broken_pipe() -> None:
    # what is still buffered for stdout has no reader: dropped, not flushed into an
    # "Exception ignored" at exit; the error is made one line by the command line's group
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


class HungUpTolerant:
    """A text stream whose writes that fail for a gone reader (a terminal that hung up: EIO,
    a closed pipe: EPIPE) are dropped, with every write after them: progress is a courtesy,
    and a closed terminal must not end a measurement (its SIGHUP does, in order, with the
    record written). Anything else is the stream's own. ``errnos``: the errors that say the
    reader is gone (a terminal's stdout takes EIO alone: a closed pipe there is the command's
    error, one line and exit 2)."""

    def __init__(self, stream: IO[str], errnos: tuple[int, ...] = (errno.EIO, errno.EPIPE)) -> None:
        self._stream = stream
        self._errnos = errnos
        self.gone = False

    def write(self, text: str) -> int:
        self._unless_gone(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._unless_gone(self._stream.flush)

    def _unless_gone(self, call: Callable[..., object], *args: Any) -> None:
        """``call(*args)`` unless the reader is gone; a write error that says it went marks
        it gone."""
        if self.gone:
            return
        try:
            call(*args)
        except OSError as exc:
            if exc.errno not in self._errnos:
                raise
            self.gone = True
            # what the stream still buffers would fail again at its next flush (the
            # interpreter's at exit, a library's own reference to the stream): its
            # descriptor is pointed at /dev/null, the reader being gone
            with contextlib.suppress(OSError, ValueError, AttributeError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self._stream.fileno())
                os.close(null)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list | tuple):
        if isinstance(value, list) and value and _is_number(value[0]) and _is_number(value[-1]):
            # the lists of records and findings hold one type each (a tuple may mix): a series
            # of a million numbers holds no string, and walking it would cost seconds per view
            return value
        items = [_map_strings(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        pairs = [(_map_strings(k, fn), _map_strings(v, fn)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _map_dataclass(value, fn)
    return value


def _is_number(value: Any) -> bool:
    return value is None or isinstance(value, int | float)


def _map_dataclass(value: Any, fn: Callable[[str], str]) -> Any:
    changed = {}
    for f in dataclasses.fields(value):
        old = getattr(value, f.name)
        new = _map_strings(old, fn)
        if new is not old:
            changed[f.name] = new
    if not changed:
        return value
    out = copy.copy(value)
    for name, new in changed.items():
        object.__setattr__(out, name, new)  # a frozen dataclass too: this is a fresh copy
    return out


__all__ = [
    "MASK",
    "SENSITIVE_PARAMS",
    "console",
    "printable",
    "redact_message",
    "redact_url",
    "redacted_all",
    "secrets_of",
    "sensitive_param",
    "shown",
    "shown_all",
]


def hung_up_tolerant(stream: IO[str], errnos: tuple[int, ...] | None = None) -> IO[str]:
    """``stream`` wrapped in ``HungUpTolerant``, once: a stream already wrapped is itself."""
    if isinstance(stream, HungUpTolerant):
        return stream
    return HungUpTolerant(stream, *([errnos] if errnos else []))  # type: ignore[return-value]
