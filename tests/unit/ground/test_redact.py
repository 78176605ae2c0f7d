"""Secrets in URLs are masked and control characters made visible, wherever data is shown."""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ioprobe.analysis import finalize
from ioprobe.analysis.compare import compare
from ioprobe.analysis.report import findings
from ioprobe.collect.progress import LineReporter
from ioprobe.record import FilesystemInfo, HostInfo, RunRecord
from ioprobe.redact import (
    SENSITIVE_PARAMS,
    console,
    printable,
    redact_message,
    redact_url,
    secrets_of,
    shown,
    shown_all,
)
from ioprobe.render import terminal
from ioprobe.render.compare import compare_markdown, render_compare
from ioprobe.render.host import render_host
from ioprobe.render.html import render as render_html
from ioprobe.render.markdown import render as render_markdown
from ioprobe.render.terminal import to_text
from tests.unit.analysis.test_whatif import probe_record

SECRET_URL = "https://alice:hunter2@data.example.com/train/?X-Amz-Signature=abc123&part=7"
EVIL = "evil\x1b]0;pwned\x07dir\x1b[2J\n\t\x7f\x9b"
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newline and tab aside: layout


def test_password_is_masked_and_the_user_kept() -> None:
    assert redact_url("http://user:s3cr3tpw@127.0.0.1:8000/data/") == (
        "http://user:***@127.0.0.1:8000/data/"
    )


def test_an_object_stores_key_pair_is_masked_whole_key_id_and_all() -> None:
    # s3fs, gcsfs and adlfs take KEY:SECRET as the userinfo: the key id names an account
    assert redact_url("s3://AKIDEXAMPLE:pass@bucket/key") == "s3://***@bucket/key"
    assert redact_url("gs://KEY:SECRET@bucket/x") == "gs://***@bucket/x"
    assert redact_url("abfs://acct:KEY@container/x") == "abfs://***@container/x"
    # a user name shaped like an AWS access key id, in any scheme
    assert redact_url("https://AKIAIOSFODNN7EXAMPLE:x@host/p") == "https://***@host/p"
    assert redact_url("https://ASIAIOSFODNN7EXAMPLE@host/p") == "https://***@host/p"
    # a login stays a login
    assert redact_url("https://akia:pw@host/p") == "https://akia:***@host/p"


def test_a_password_with_an_unencoded_slash_or_at_sign_is_masked_whole() -> None:
    # AWS secret keys hold "/" and "+"; people paste them as they are
    assert redact_url("s3://AKID:abc/def+ghi@bucket/x") == "s3://***@bucket/x"
    assert redact_url("http://u:p@ss@host/x") == "http://u:***@host/x"


@pytest.mark.parametrize("name", sorted(SENSITIVE_PARAMS))
def test_every_credential_parameter_is_masked_in_any_case(name: str) -> None:
    url = f"https://h/p?a=1&{name.upper()}=topsecret&b=2"
    assert redact_url(url) == f"https://h/p?a=1&{name.upper()}=***&b=2"


def test_the_brief_list_of_signed_url_parameters_is_covered() -> None:
    named = {"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "sig"}
    named |= {"token", "x-goog-signature", "x-goog-credential", "key", "access_token"}
    assert named | {"awsaccesskeyid"} <= SENSITIVE_PARAMS


def test_names_that_say_bearer_hmac_assertion_or_passphrase_are_masked() -> None:
    # a hostile round found bearer=, hmac= and client_assertion= shown in every output
    for name in ("bearer", "hmac", "client_assertion", "X-Request-HMAC", "jwt_assertion"):
        assert redact_url(f"https://h/p?{name}=zz&n=1") == f"https://h/p?{name}=***&n=1", name
    assert redact_url("https://h/p?key_passphrase=zz") == "https://h/p?key_passphrase=***"


def test_names_that_end_in_key_or_say_private_auth_pass_sig_or_a_one_time_code_are_masked() -> None:
    # round ten: privatekey=, authkey= and accountkey= were shown; a list of names is never
    # whole, so a name's ending and its parts say it
    names = ("privatekey", "authkey", "accountkey", "Ocp-Apim-Subscription-Key", "dbpw")
    names += ("masterkey", "signingkey", "sigv4", "apisig", "otp", "pin", "mfa", "nonce")
    for name in names:
        assert redact_url(f"https://h/p?{name}=zz&n=1") == f"https://h/p?{name}=***&n=1", name
    kept = "https://h/p?monkey=1&turkeys=2&spin=3&topic=4&opinion=5"
    assert redact_url(kept) == kept


def test_a_personal_access_token_a_refresh_token_a_cred_and_a_hash_or_digest_are_masked() -> None:
    # round eleven: cred=, pat=, refresh=, hash= and digest= were shown in every output
    for name in ("cred", "pat", "refresh", "hash", "digest", "creds", "csrf", "sid", "url_hash"):
        assert redact_url(f"https://h/p?{name}=zz&n=1") == f"https://h/p?{name}=***&n=1", name
    kept = "https://h/p?path=1&pattern=2&page=3&hashed_files=4"
    assert redact_url(kept) == kept


def test_a_url_missing_its_scheme_or_a_slash_is_masked_as_a_path_would_show_it() -> None:
    # round ten: read as local paths, "no such file" quoted them whole
    assert redact_url("//u:zz@127.0.0.1:9/") == "//u:***@127.0.0.1:9/"
    assert redact_url("http:/u:zz@h/x: no such file") == "http:/u:***@h/x: no such file"
    assert redact_url("error: //u:zz@h/") == "error: //u:***@h/"
    assert redact_url("/data/a:b/c@d") == "/data/a:b/c@d"  # a later segment: a name


def test_other_parameters_paths_and_local_names_are_left_alone() -> None:
    kept = [
        "https://h/p?part=7&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600",
        "http://127.0.0.1:8080/img/icon@2x.png",  # an "@" in a path is no userinfo
        "/data/train?token=1",  # a local path: no scheme, nothing is a query
        "s3://bucket/img?.jpg",  # a glob's "?", not a query
        "https://user@h/p",  # a user with no password hides nothing
    ]
    assert [redact_url(u) for u in kept] == kept


def test_fragment_parameters_and_percent_encoded_names_are_masked() -> None:
    assert (
        redact_url("https://h/cb#access_token=zz&state=1")
        == "https://h/cb#access_token=***&state=1"
    )
    assert redact_url("https://h/p?X%2DAmz%2DSignature=zz") == "https://h/p?X%2DAmz%2DSignature=***"


def test_urls_quoted_in_a_message_are_masked_and_the_punctuation_kept() -> None:
    msg = f"{SECRET_URL}: cannot reach it: 403, url='http://a:b@c/x?sig=q' (see http://u:p@h/)."
    assert redact_url(msg) == (
        "https://alice:***@data.example.com/train/?X-Amz-Signature=***&part=7: cannot reach it: "
        "403, url='http://a:***@c/x?sig=***' (see http://u:***@h/)."
    )


def test_redaction_is_idempotent() -> None:
    once = redact_url(SECRET_URL)
    assert redact_url(once) == once
    assert "hunter2" not in once and "abc123" not in once


def test_printable_escapes_c0_del_and_c1_and_keeps_other_text() -> None:
    assert printable(EVIL) == r"evil\x1b]0;pwned\x07dir\x1b[2J\x0a\x09\x7f\x9b"
    assert printable("données/été ✓ [x]") == "données/été ✓ [x]"


@dataclass(frozen=True)
class _Inner:
    name: str
    values: list[float] = field(default_factory=list)


@dataclass
class _Outer:
    inner: _Inner
    tags: dict[str, str]
    pairs: list[tuple[int, str, int]]


def test_shown_all_escapes_every_string_and_leaves_the_original_alone() -> None:
    value = _Outer(_Inner("a\x1bb", [1.0]), {"k\x07": "v\x1b"}, [(0, "x\x9b", 1)])
    out = shown_all(value)
    assert out.inner.name == r"a\x1bb"
    assert out.tags == {r"k\x07": r"v\x1b"}
    assert out.pairs == [(0, r"x\x9b", 1)]  # a tuple that starts with a number is walked
    assert value.inner.name == "a\x1bb"  # a copy: the caller's record is not changed


def test_shown_all_returns_clean_parts_as_they_are() -> None:
    clean = _Outer(_Inner("a", [1.0, 2.0]), {"k": "v"}, [(0, "x", 1)])
    assert shown_all(clean) is clean


def test_shown_all_does_not_walk_long_number_series() -> None:
    # a watched run's series can hold millions of numbers; walking them cost seconds per view
    series = _Inner("main", [0.5] * 5_000_000)
    t0 = time.perf_counter()
    assert shown_all(_Outer(series, {}, [])).inner is series
    assert time.perf_counter() - t0 < 1.0


def test_a_record_loaded_from_disk_has_its_secrets_redacted() -> None:
    data = finalize(probe_record()).to_json()
    data["dataset"]["target"] = SECRET_URL
    data["notes"] = [f"read from {SECRET_URL} twice"]
    rec = RunRecord.from_json(data)
    assert rec.dataset.target == redact_url(SECRET_URL)
    assert "hunter2" not in rec.dumps() and "abc123" not in rec.dumps()


def _hostile() -> RunRecord:
    rec = finalize(probe_record())
    rec.dataset.target = EVIL
    rec.dataset.formats = {EVIL: 3}
    rec.notes.append(f"note about {EVIL}")
    rec.host.hostname = EVIL
    return rec


@pytest.mark.parametrize("color", [False, True])
def test_terminal_view_escapes_data_and_keeps_its_own_colours(color: bool) -> None:
    rec = _hostile()
    text = terminal.render(rec, findings(rec), width=120, color=color)
    assert r"evil\x1b]0;pwned\x07dir" in text
    # with colour on, the only escapes are rich's own styling (CSI ... m)
    styling = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert RAW_CONTROL.search(styling) is None
    assert ("\x1b[" in text) is color
    assert rec.dataset.target == EVIL  # the record itself is untouched


def test_compare_view_and_markdown_escape_file_names() -> None:
    a = finalize(probe_record())
    c = compare(a, a, names=(EVIL, "b.json"))
    assert RAW_CONTROL.search(to_text(render_compare(c), width=120)) is None
    assert RAW_CONTROL.search(compare_markdown(c)) is None


def test_html_and_markdown_hold_no_raw_control_byte() -> None:
    rec = _hostile()
    f = findings(rec)
    page = render_html(rec, f)
    summary = render_markdown(rec, f)
    assert re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", page) is None
    assert RAW_CONTROL.search(summary) is None
    assert r"evil\x1b]0;pwned\x07dir" in page
    assert r"evil\\x1b\]0;pwned\\x07dir" in summary  # markdown escapes the backslash and "]"


def test_progress_lines_escape_what_a_phase_or_a_result_quotes() -> None:
    out = io.StringIO()
    rep = LineReporter(out)
    rep.phase("storage \x1b[2J")
    rep.result("read \x1b]0;pwned\x07 failed")
    assert out.getvalue() == "ioprobe: storage \\x1b[2J: read \\x1b]0;pwned\\x07 failed\n"


def test_env_host_panel_escapes_the_path_it_was_given() -> None:
    host = HostInfo(hostname=EVIL, filesystem=FilesystemInfo(path=EVIL))
    text = to_text(render_host(host), width=120)
    assert RAW_CONTROL.search(text) is None
    assert r"evil\x1b]0;pwned\x07dir" in text


# -- issue 29: the secrets that slipped the mask, each family as a table ---------------------

SLIPPED = [
    # a password holding an apostrophe (an RFC 3986 sub-delimiter) ended the pattern
    ("https://alice:pa'ss@h/x", "https://alice:***@h/x"),
    ("s3://KEY:ab'cd/ef@bucket/x: not found", "s3://***@bucket/x: not found"),
    # credential parameters beyond the list
    ("https://h/p?access_key=A1&n=1", "https://h/p?access_key=***&n=1"),
    ("https://h/p?secret_key=A1", "https://h/p?secret_key=***"),
    ("https://h/p?jwt=A1", "https://h/p?jwt=***"),
    ("https://h/p?session=A1", "https://h/p?session=***"),
    ("https://h/p?code=A1", "https://h/p?code=***"),
    ("https://h/p?credential=A1", "https://h/p?credential=***"),
    ("https://h/p?sas_token=A1&sv=2020", "https://h/p?sas_token=***&sv=2020"),
    ("https://h/p?Client-Secret=A1", "https://h/p?Client-Secret=***"),
    # a token as the whole userinfo
    ("https://ghp_AbC123@github.com/o/r", "https://***@github.com/o/r"),
    ("https://TOKEN@host/", "https://***@host/"),
    # quoted in a library's message, after a quote
    ("url='https://u:pa'ss@h/x' failed", "url='https://u:***@h/x' failed"),
    # round twelve: PHP's session id in a URL, its short form, a SAML assertion or artifact
    ("https://h/p?PHPSESSID=A1&n=1", "https://h/p?PHPSESSID=***&n=1"),
    ("https://h/p?sessid=A1", "https://h/p?sessid=***"),
    ("https://h/sso?SAMLResponse=PHN&RelayState=x", "https://h/sso?SAMLResponse=***&RelayState=x"),
    ("https://h/sso?SAMLart=AAQ", "https://h/sso?SAMLart=***"),
    # round thirteen: signed links' hashes under other names, WS-Fed's token, one-time ones
    ("https://h/f?md5=A1&expires=2147483647", "https://h/f?md5=***&expires=2147483647"),
    ("https://h/f?hdnts=exp%3D1~hmac%3DA1", "https://h/f?hdnts=***"),
    ("https://h/f?__gda__=1700000000_A1", "https://h/f?__gda__=***"),
    ("https://h/f?wresult=A1&ott=B2&tk=C3", "https://h/f?wresult=***&ott=***&tk=***"),
    # a URL percent-encoded in a query value keeps no password, nor a credential parameter
    (
        "https://gw/?url=https%3A%2F%2Fbob%3AS3%40h.example%2Fdata&n=1",
        "https://gw/?url=***&n=1",
    ),
    ("https://gw/?to=https%3A%2F%2Fh%2Fp%3Fsig%3DA1", "https://gw/?to=***"),
    # round fifteen: a path parameter (Java's session id in the path, a matrix parameter)
    ("http://h:8/f.bin;jsessionid=A1", "http://h:8/f.bin;jsessionid=***"),
    ("https://h/data;jsessionid=A1/x.bin?n=1", "https://h/data;jsessionid=***/x.bin?n=1"),
    ("https://h/a;v=2;token=A1/b;n=3", "https://h/a;v=2;token=***/b;n=3"),
    # round sixteen: its "=" percent-encoded, in the path and in the query
    ("http://h:8/f.bin;sessionid%3DA1", "http://h:8/f.bin;sessionid%3D***"),
    ("https://h/p?token%3dA1&n=1", "https://h/p?token%3d***&n=1"),
]


@pytest.mark.parametrize(("url", "shown_as"), SLIPPED)
def test_secrets_that_slipped_the_mask_are_masked(url: str, shown_as: str) -> None:
    assert redact_url(url) == shown_as
    assert redact_url(shown_as) == shown_as  # masking twice changes nothing


KEPT = [
    "https://alice@h/p",  # a plain login hides nothing
    "https://gw/?next=https%3A%2F%2Fh.example%2Fdata%3Fpart%3D2",  # an encoded URL, no secret
    "https://h/p?part=7&X-Amz-Date=20240101T000000Z&keyframe=3&monkey=1",
    "http://127.0.0.1:8080/img/icon@2x.png",
    "http://h:8080/a@b",
    "/local/dir/with:colon@at",
    "https://h/a;v=2/b;part=3.bin",  # path parameters that are no credential
    "/local/dir;token=x",  # a local path is never changed
]


@pytest.mark.parametrize("text", KEPT)
def test_what_carries_no_credential_is_kept(text: str) -> None:
    assert redact_url(text) == text


def test_a_library_message_repeating_a_secret_without_its_scheme_is_masked() -> None:
    # botocore's "Invalid bucket name" quotes the authority of s3://KEY:SECRET@bucket whole
    url = "s3://AKIDEXAMPLE:wJalr/XUtnF+EMI@bucket/train"
    msg = 'Invalid bucket name "AKIDEXAMPLE:wJalr/XUtnF+EMI@bucket": Bucket name must match'
    shown_msg = redact_message(msg, [url])
    # the key id too: an object store's userinfo is a credential pair, masked whole in the
    # URL, so in the library's words as well
    assert "wJalr/XUtnF+EMI" not in shown_msg and "AKIDEXAMPLE" not in shown_msg
    assert shown_msg.startswith('Invalid bucket name "***:***@bucket"')
    # a secret key with "/" in it, where botocore ends the host at the first "/" and quotes
    # only what comes before it
    url = "s3://AKIAIOSFODNN7EXAMPLE:SeCrEt123/K7MDENG/bPxRfiCY@bucket/x"
    msg = 'Invalid bucket name "AKIAIOSFODNN7EXAMPLE:SeCrEt123": Bucket name must match'
    assert redact_message(msg, [url]).startswith('Invalid bucket name "***:***"')
    # a key id that does not look like one, in a key-pair scheme
    msg = 'Invalid bucket name "MyKeyId99:abcdefgh@b"'
    assert redact_message(msg, ["s3://MyKeyId99:abcdefgh@b/"]) == 'Invalid bucket name "***:***@b"'
    # a login's user name stays: https://alice:pw@host is a person, not a key
    assert redact_message("alice said", ["https://alice:pw12345@h/"]) == "alice said"
    # a percent-encoded secret, and a sensitive query value, repeated bare
    assert redact_message("sig ab%2Bcd and ab+cd", ["https://h/p?sig=ab%2Bcd"]) == "sig *** and ***"
    assert secrets_of(["https://TOKEN123@h/"]) == ["TOKEN123"]
    assert secrets_of(["https://h/p?sig=ab"]) == []  # too short to mask in free text


PRINTABLE = [
    ("bad\udcff\udcfe", r"bad\xff\xfe"),  # undecodable bytes show as the bytes they were
    ("csi\x9b31m", r"csi\x9b31m"),  # an 8-bit CSI
    ("\u202egnp.exe", r"\u202egnp.exe"),  # a bidi override
    ("a\u2028b\u2066c", r"a\u2028b\u2066c"),
    ("\ud800", r"\ud800"),  # a surrogate that is no byte
    ("[/] :smile: ✓ é", "[/] :smile: ✓ é"),  # text, for the renderers to escape their way
]


@pytest.mark.parametrize(("raw", "escaped"), PRINTABLE)
def test_printable_escapes_what_acts_on_a_terminal_or_fails_an_encoder(
    raw: str, escaped: str
) -> None:
    assert printable(raw) == escaped
    escaped.encode("utf-8")


def test_shown_masks_then_escapes() -> None:
    assert shown("https://u:pw@h/\x1b[2J") == r"https://u:***@h/\x1b[2J"


def test_every_rich_console_and_text_column_takes_strings_as_text() -> None:
    """The escaping boundary holds by construction: no module makes a rich Console but
    ``redact.console`` (no markup, no emoji), and every progress column is markup-free."""
    root = Path(__file__).resolve().parents[3] / "ioprobe"
    for path in root.rglob("*.py"):
        source = path.read_text()
        if path.name != "redact.py":
            assert re.search(r"\bConsole\(", source) is None, path
        for call in re.findall(r"TextColumn\((.*?)\)\s*,\n", source, re.S):
            assert "markup=False" in call, (path, call)
        assert "from_markup" not in source, path


def test_the_text_console_prints_markup_and_emoji_codes_literally() -> None:
    out = io.StringIO()
    console(file=out, width=80).print("a [/] b [bold]c[/bold] :smile:")
    assert out.getvalue() == "a [/] b [bold]c[/bold] :smile:\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # a token as the user, the password a placeholder (GitHub's basic-auth form)
        ("https://ghp_S3KR1Tabc:x-oauth-basic@github.com/o/r", "https://***@github.com/o/r"),
        ("https://oauth2:glpat-S3KR1T@gitlab.com/x", "https://oauth2:***@gitlab.com/x"),
        ("https://S3KR1T0TOKEN:x@h/x", "https://***@h/x"),
        # a plain login keeps its name
        ("http://john:pw1234@h/x", "http://john:***@h/x"),
    ],
)
def test_a_token_as_the_user_beside_a_password_is_masked_with_it(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://127.0.0.1:S3KR1T/data/: not found", "http://127.0.0.1:***/data/: not found"),
        ("http://h:S3KR1T", "http://h:***"),
        ("see http://h:8080/x, or http://h:8080.", "see http://h:8080/x, or http://h:8080."),
        ("http://[::1]:80/a and http://[::1]/a", "http://[::1]:80/a and http://[::1]/a"),
    ],
)
def test_a_port_that_is_no_number_is_masked(text: str, shown: str) -> None:
    # a password typed where the host belonged: nothing but digits goes there
    assert redact_url(text) == shown


def test_a_secret_holding_whitespace_is_masked_where_a_library_repeats_it() -> None:
    given = "s3://AKIAXX:S3KR1T+a b@bucket-x/data/"
    said = f'Invalid bucket name "AKIAXX:S3KR1T+a b@bucket-x": must match; {given}'
    out = redact_message(said, [given])
    assert "S3KR1T" not in out and "AKIAXX" not in out, out


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:S3KR1T x@127.0.0.1:9/", "http://alice:***@127.0.0.1:9/"),
        ("http://alice:S3KR1T\t#x@127.0.0.1:9/", "http://alice:***@127.0.0.1:9/"),
        ("s3://AKIAXX:S3KR1T a@bucket-x/data/", "s3://***@bucket-x/data/"),
    ],
)
def test_a_target_whose_password_holds_whitespace_is_masked_whole(url: str, shown: str) -> None:
    # a URL given as one argument: its userinfo runs to its last "@", whitespace and all
    assert redact_url(url, whole=True) == shown
    # and a library's message quoting it loses it too
    said = redact_message(f"{url}: cannot reach it ({url.split('://')[1]})", [url])
    assert "S3KR1T" not in said and "AKIAXX" not in said, said
