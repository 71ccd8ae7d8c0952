"""Secrets in the URL forms a parser reads differently from a person: a fragment (``#access_token=...``), a password
holding ``#``, ``/`` or ``?``, a percent-encoded parameter name (``?X%2DAmz%2DSignature=...``). Each is masked by the
one rule (:mod:`rag_plumbing._secrets`) in the error line, in every file an evaluation writes and in the
server's access log; a property test over generated URLs checks that no secret survives and that a URL without one
is left as it is."""

from __future__ import annotations

import json
import string
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.cli_runs import one_error, run

from rag_curriculum._plumbing import MASK, is_secret, mask_secrets, redact_command, redact_overrides

SECRET = "SeCrEt-93"

#: (the URL, what it reads masked)
FORMS = {
    "fragment": (f"http://127.0.0.1:9/retrieve#access_token={SECRET}&token_type=bearer",
                 "http://127.0.0.1:9/retrieve#access_token=***&token_type=bearer"),
    "password with #": (f"http://alice:pa55#{SECRET}@127.0.0.1:9/retrieve", "http://***@127.0.0.1:9/retrieve"),
    "password with /": (f"http://alice:pa55/{SECRET}@127.0.0.1:9/retrieve", "http://***@127.0.0.1:9/retrieve"),
    "password with ?": (f"http://alice:pa55?{SECRET}@127.0.0.1:9/retrieve", "http://***@127.0.0.1:9/retrieve"),
    "encoded name": (f"http://127.0.0.1:9/retrieve?X%2DAmz%2DSignature={SECRET}&X-Amz-Date=1",
                     "http://127.0.0.1:9/retrieve?X%2DAmz%2DSignature=***&X-Amz-Date=1"),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_secret_url_form_is_masked_in_values_command_lines_and_overrides(form):
    url, masked = FORMS[form]
    assert mask_secrets({"retriever": url}) == {"retriever": masked}
    assert mask_secrets(f"error: retriever {url} unreachable") == f"error: retriever {masked} unreachable"
    assert redact_command(f"curriculum eval --retriever {url} -k 2").replace("'", "") == (
        f"curriculum eval --retriever {masked} -k 2")
    assert redact_command(f"curriculum eval --retriever={url}").replace("'", "") == (
        f"curriculum eval --retriever={masked}")
    assert redact_overrides([f"agent.retriever={url}"]) == [f"agent.retriever={masked}"]


def test_a_path_after_a_port_that_starts_with_an_at_sign_is_not_a_password():
    for url in ("http://host:8000/@scope/pkg", "http://host/v1?to=a@b", "https://h/d.json#section-2",
                "http://h/r?tokens=5#top"):
        assert mask_secrets(url) == url


@pytest.mark.slow
@pytest.mark.parametrize("form", ["fragment", "password with #", "encoded name"])
def test_the_error_line_of_an_unreachable_retriever_masks_every_form(min_max_shards, tmp_path, form):
    url, _ = FORMS[form]
    r = run("eval", "--agent", "search-r1", "--retriever", url, "--retriever-retries", "0", "--backend", "scripted",
            "--model", "p=support.agent_policies:search_then_answer", "--data", min_max_shards, "--limit", "1",
            "--out", tmp_path / "ev", "--no-progress")
    line = one_error(r)
    assert SECRET not in r.output and "***" in line, r.output
    assert not (tmp_path / "ev").exists()


# -- the property ---------------------------------------------------------------------------------------------------
_SAFE = string.ascii_letters + string.digits
#: What a password may hold: the characters a URL parser reads as the end of the authority among them.
_PASSWORD = _SAFE + "#/?!$&'()*+,;=%~-._:"
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_SECRET_NAMES = st.sampled_from(["api_key", "access_token", "X-Amz-Signature", "X%2DAmz%2DSignature", "sig",
                                 "hub%5Ftoken", "Authorization", "password", "client_secret"])
_VALUES = st.text(_SAFE + "-._~%+", min_size=1, max_size=12)
_TOKENS = st.text(_SAFE, min_size=6, max_size=16).map(lambda s: f"Z{s}Q")


@st.composite
def _urls(draw, secrets: bool):
    """A URL (scheme, optional credentials, host, optional port, path, query, fragment) and the secrets in it."""
    planted: list[str] = []
    scheme = draw(st.sampled_from(["http", "https", "s3", "HTTP"]))
    host = draw(st.sampled_from(["127.0.0.1", "host", "retriever.example.org", "[::1]"]))
    port = draw(st.one_of(st.none(), st.integers(1, 65535)))
    url = f"{scheme}://"
    if secrets and draw(st.booleans()):
        password = draw(st.text(_PASSWORD, min_size=1, max_size=12)) + draw(_TOKENS)
        # ``http://alice:1234/@host``: a port, then a path starting with ``@host``; ambiguous, read as a path
        assume(not (password.split("/")[0].isdigit() and "/" in password and password.endswith("/")))
        planted.append(password)
        url += f"{draw(_NAMES)}:{password}@"
    url += host + (f":{port}" if port is not None else "")
    url += "/" + "/".join(draw(st.lists(_NAMES, max_size=3)))
    params = []
    for _ in range(draw(st.integers(0, 3))):
        if secrets and draw(st.booleans()):
            value = draw(_TOKENS)
            planted.append(value)
            params.append(f"{draw(_SECRET_NAMES)}={value}")
        else:
            name = draw(_NAMES)
            assume(not is_secret(name))
            params.append(f"{name}={draw(_VALUES)}")
    if params:
        url += "?" + "&".join(params)
    if draw(st.booleans()):
        if secrets and draw(st.booleans()):
            value = draw(_TOKENS)
            planted.append(value)
            url += f"#access_token={value}&expires_in=3600"
        else:
            url += "#" + draw(_NAMES)
    return url, planted


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_urls(secrets=True))
def test_no_planted_secret_survives_masking(case):
    url, planted = case
    assume(planted)
    for shown in (mask_secrets(url), mask_secrets(f"error: {url}: unreachable"), redact_command(f"c --url {url}"),
                  redact_command(f"c --url={url}"), redact_overrides([f"a.url={url}"])[0],
                  mask_secrets(url.replace("://", ":/"))):  # as pathlib prints a URL taken for a path
        for secret in planted:
            assert secret not in shown, (url, shown)
        assert MASK in shown


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_urls(secrets=False))
def test_a_url_without_secrets_is_unchanged(case):
    url, _ = case
    assert mask_secrets(url) == url
    assert mask_secrets(f"error: {url}: unreachable") == f"error: {url}: unreachable"
    assert redact_overrides([f"a.url={url}"]) == [f"a.url={url}"]


# -- the files an evaluation writes and the server's access log -----------------------------------------------------
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    pytest.importorskip("bm25s")
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("secret-forms") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    return out


@pytest.mark.slow
def test_a_served_evaluation_writes_and_logs_no_secret_of_any_form(index_dir, min_max_shards, tmp_path):
    """A real `curriculum serve` and `curriculum eval --retriever URL` whose URL holds a percent-encoded signature
    (sent to the server) and a fragment's access token (kept by the client): neither is in the evaluation's output,
    its summary.json, eval_config.json, results/*.json, nor in the server's access log."""
    pytest.importorskip("fastapi", reason="the serve extra is needed")
    from support.servers import free_port, server_process

    port = free_port()
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index_dir), "--port", str(port),
            "--access-log"]
    url = (f"http://127.0.0.1:{port}/retrieve?X%2DAmz%2DSignature={SECRET}&X-Amz-Date=1"
           f"#access_token={SECRET}x&token_type=bearer")
    out = tmp_path / "ev"
    with server_process(argv, f"http://127.0.0.1:{port}/health", log, timeout_s=180):
        r = run("eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted", "--model",
                "p=support.agent_policies:search_then_answer", "--data", min_max_shards, "--limit", "3", "--max-turns", "2",
                "--out", out, "--no-progress")
        # the toolkit's client sends ``X-Amz-Signature`` decoded; curl sends the name as it was typed
        body = json.dumps({"queries": ["Who wrote Hamlet?"], "topk": 1}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/retrieve?X%2DAmz%2DSignature={SECRET}", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
        time.sleep(0.3)
    assert r.exit_code == 0, r.output
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"summary.json", "eval_config.json"} <= written and any(w.startswith("results/") for w in written)
    leaks = [w for w in sorted(written) if SECRET.encode() in (out / w).read_bytes()]
    assert leaks == [] and SECRET not in r.output, leaks
    config = (out / "eval_config.json").read_text()
    assert "X%2DAmz%2DSignature=***" in config and "#access_token=***" in config, config
    text = log.read_text(errors="replace")
    assert SECRET not in text, text[-2000:]
    assert '"POST /retrieve?X-Amz-Signature=***&X-Amz-Date=1 HTTP/1.1" 200' in text, text[-2000:]
    assert '"POST /retrieve?X%2DAmz%2DSignature=*** HTTP/1.1" 200' in text, text[-2000:]


def test_the_written_form_of_a_path_argument_keeps_no_secret(tmp_path):
    """An --input given as a URL with a fragment secret: the refusal names it masked."""
    url = f"https://data.example.org/x.jsonl#sig={SECRET}"
    r = run("build", "-d", "musique", "-i", url, "--n", "5", "-o", tmp_path / "o")
    line = one_error(r)
    assert SECRET not in r.output and "#sig=***" in line, r.output
    assert not Path(tmp_path / "o").exists()
