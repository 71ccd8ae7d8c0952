"""One masking rule for URL credentials, with or without a query string, fragment or port, through
every route: the files a partition and an evaluation write (command lines recorded in partition.json, manifests,
cards, eval_config.json), `train`'s printed config, the log lines of the HTTP client, and error messages that echo
an --input / --index URL."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN, ROOT
from typer.testing import CliRunner

from rag_curriculum._plumbing import MaskingFilter, mask_secrets, redact_command, redact_overrides
from rag_curriculum.cli import app

SECRET = "PW-SECRET-7"
URLS = [f"http://u:{SECRET}@host/v1?x=1", f"http://u:{SECRET}@host:8000?x=1", f"https://u:{SECRET}@host#frag",
        f"http://u:{SECRET}@host:8000/v1?api_key=k&x=1", f"http://u:{SECRET}@host/v1"]

POLICY = '''
def answer(messages, n, seed):
    return ["<think>t</think> Final answer: yes"] * n
'''


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def leaks(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


# -- the rule -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", URLS)
def test_url_credentials_are_masked_with_or_without_query_string_fragment_or_port(url):
    masked = url.replace(f"u:{SECRET}", "***").replace("api_key=k", "api_key=***")
    assert mask_secrets({"base_url": url}) == {"base_url": masked}
    assert redact_command(f"curriculum partition m --base-url {url} -k 2").replace("'", "") == (
        f"curriculum partition m --base-url {masked} -k 2")
    assert redact_command(f"curriculum partition m --base-url={url}").replace("'", "") == (
        f"curriculum partition m --base-url={masked}")
    assert redact_overrides([f"model.base_url={url}"]) == [f"model.base_url={masked}"]
    assert SECRET not in mask_secrets(f"error: {url.replace('://', ':/')}: no such file")  # as pathlib prints it


def test_an_at_sign_in_a_query_string_is_not_credentials():
    assert mask_secrets("http://host/v1?to=a@b") == "http://host/v1?to=a@b"
    assert redact_command("curriculum x --base-url http://host/v1?to=a@b") == "curriculum x --base-url 'http://host/v1?to=a@b'"


# -- written files ------------------------------------------------------------------------------------------------
@pytest.fixture()
def policy(tmp_path, monkeypatch):
    d = tmp_path / "policy_mod"
    d.mkdir()
    (d / "secrets_policy.py").write_text(POLICY)
    monkeypatch.syspath_prepend(str(d))
    return "secrets_policy:answer"


@pytest.fixture(scope="module")
def max_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("secrets") / "musique-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=2)], schedule="max",
                                 out=str(out), seed=0), command="t")
    return out


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("secrets") / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), 4)], setting="distractor",
                                 out=str(out), seed=0), command="t")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("url", URLS[:3])
def test_no_credential_in_any_file_a_partition_or_an_eval_writes(max_dir, eval_dir, tmp_path, policy, monkeypatch,
                                                                  url):
    args = ["partition", str(max_dir), "--backend", "scripted", "--model", policy, "--pass-at", "2", "--base-url",
            url, "--no-progress", "--out", str(tmp_path / "p")]
    monkeypatch.setattr(sys, "argv", ["curriculum", *args])
    r = run(*args)
    assert r.exit_code == 0, r.output
    written = [p for p in (tmp_path / "p").rglob("*") if p.is_file()]
    assert len(written) >= 7 and (tmp_path / "p" / "partition.json").is_file()
    assert "***@host" in json.loads((tmp_path / "p" / "partition.json").read_text())["command"]
    assert leaks(tmp_path / "p") == [] and SECRET not in r.output

    args = ["eval", "--model", f"m={policy}", "--data", str(eval_dir), "--backend", "scripted", "--samples", "1",
            "--base-url", url, "--no-plots", "--out", str(tmp_path / "e")]
    monkeypatch.setattr(sys, "argv", ["curriculum", *args])
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "***@host" in json.loads((tmp_path / "e" / "eval_config.json").read_text())["command"]
    assert leaks(tmp_path / "e") == [] and SECRET not in r.output


# -- the console --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_train_prints_its_config_with_the_hub_token_masked(tmp_path):
    args = ["train", "recipe=rag-rl-min-max", f"data.shards={tmp_path / 'none'}", f"grpo.hub_token={SECRET}"]
    r = CliRunner().invoke(app, [*args, "--print-config"])
    assert r.exit_code == 0, r.output
    assert "hub_token: '***'" in r.output and SECRET not in r.output
    try:
        import trl  # noqa: F401
    except ImportError:
        return
    r = CliRunner().invoke(app, [*args, "--dry-run"])
    assert SECRET not in r.output and "hub_token: '***'" in r.output, r.output


@pytest.mark.parametrize("args", [
    ["build", "-d", "musique", "-i", f"http://u:{SECRET}@host/x.json?y=1", "--n", "5"],
    ["build", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--distractors", "bm25", "--index",
     f"http://u:{SECRET}@host/idx", "--n", "5"],
    ["index", "-d", "musique", "-i", f"https://u:{SECRET}@host/x.jsonl?a=b#c"],
    ["inspect", f"https://u:{SECRET}@host:8080/x.jsonl"],
])
def test_errors_that_echo_a_url_mask_its_credentials(shared_data, tmp_path, args):
    r = run(*args, "-o", tmp_path / "o") if args[0] != "inspect" else run(*args)
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "***@host" in errors[0], r.output
    assert SECRET not in r.output


def test_log_lines_pass_the_masking_rule_whoever_logs_them(caplog):
    from rag_curriculum._cli.common import configure_logging

    configure_logging()
    assert logging.getLogger("httpx2").getEffectiveLevel() == logging.WARNING  # no line per request
    record = logging.LogRecord("some.library", logging.INFO, __file__, 1, "POST %s -> %d",
                               (f"http://u:{SECRET}@host/v1?x=1", 200), None)
    assert MaskingFilter().filter(record) and record.getMessage() == "POST http://***@host/v1?x=1 -> 200"


class _Server:
    """An OpenAI-compatible chat server on 127.0.0.1 answering every request with n choices."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                n = req.get("n", 1)
                body = json.dumps({
                    "id": "c", "object": "chat.completion", "created": 0, "model": req["model"],
                    "choices": [{"index": j, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": f"Final answer: a{j}"}}
                                for j in range(n)],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_the_http_clients_log_lines_do_not_show_base_url_credentials(max_dir, tmp_path):
    """A real `curriculum partition --backend openai` process: its stderr (the HTTP client logs at INFO a line per
    request naming the URL) holds no credential, and its files none either."""
    pytest.importorskip("openai")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    with _Server() as server:
        url = f"http://u:{SECRET}@127.0.0.1:{server.port}/v1"
        done = subprocess.run(
            [sys.executable, "-m", "rag_curriculum.cli", "partition", str(max_dir), "--backend", "openai",
             "--model", "tiny", "--base-url", url, "--pass-at", "2", "--max-tokens", "8", "--no-progress",
             "--allow-identical-samples", "--out", str(tmp_path / "p")],
            capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stderr + done.stdout, done.stderr
    assert "HTTP Request" not in done.stderr
    assert leaks(tmp_path / "p") == []
