"""The OpenAI-compatible backend over real HTTP, against a small local server (127.0.0.1, a free port) that
serves /v1/chat/completions with `n` choices, fails on demand, and records what it was sent."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai")

from rag_curriculum.generation import BACKENDS, GenerationError, PromptTooLongError, SamplingConfig  # noqa: E402
from rag_curriculum.generation._openai_backend import OpenAIBackend  # noqa: E402
from rag_curriculum.generation.runner import RunMismatchError, read_completions, run_chunks  # noqa: E402


class Server:
    """A tiny OpenAI-compatible chat server. Behaviour by the last message's content:
    ``fail503:K`` answers 503 to the first K requests for it, ``ratelimit`` 429 (Retry-After: 0) once,
    ``toolong`` a vLLM-style 400 context-length error, ``bad`` a plain 400; anything else succeeds."""

    def __init__(self, api_key: str = "secret", delay: float = 0.0, n_cap: int | None = None,
                 strict: bool = False, greedy: bool = False) -> None:
        self.api_key = api_key
        self.delay = delay
        self.n_cap = n_cap
        self.strict = strict  # like `transformers serve`: 422 {"detail": ...} for fields it does not know
        self.greedy = greedy  # ... and the same completion for every sample unless "do_sample" is sent
        self.requests: list[dict] = []
        self.failures: dict[str, int] = {}
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, obj: dict, headers: dict | None = None) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"detail": "Not Found"})
                if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._send(401, {"error": {"message": "bad key", "type": "auth"}})
                with server.lock:
                    server.requests.append(req)
                    server.active += 1
                    server.max_active = max(server.max_active, server.active)
                try:
                    if server.delay:
                        time.sleep(server.delay)
                    return self._answer(req)
                finally:
                    with server.lock:
                        server.active -= 1

            def _answer(self, req: dict) -> None:
                content = req["messages"][-1]["content"]
                if server.strict:
                    unexpected = set(req) - KNOWN_FIELDS
                    if unexpected:
                        return self._send(422, {"detail": f"Unexpected fields in the request: {unexpected}"})
                if content.startswith("fail503:"):
                    with server.lock:
                        seen = server.failures.get(content, 0)
                        server.failures[content] = seen + 1
                    if seen < int(content.split(":")[1]):
                        return self._send(503, {"error": {"message": "overloaded"}})
                if content == "ratelimit":
                    with server.lock:
                        seen = server.failures.get(content, 0)
                        server.failures[content] = seen + 1
                    if not seen:
                        return self._send(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
                if content == "toolong":
                    return self._send(400, {"object": "error", "message": "This model's maximum context length "
                                            "is 32 tokens. However, you requested 900 tokens (100 in the messages, "
                                            "800 in the completion).", "type": "BadRequestError", "code": 400})
                if content == "bad":
                    return self._send(400, {"error": {"message": "temperature must be <= 2"}})
                n = req.get("n", 1)
                if server.n_cap and n > server.n_cap:
                    n = server.n_cap
                if server.greedy and not req.get("do_sample"):
                    text = [f"{content}|greedy"] * n
                else:
                    text = [f"{content}|seed={req.get('seed')}|t={req['temperature']}|j={j}" for j in range(n)]
                choices = [{"index": j, "finish_reason": "stop", "logprobs": None,
                            "message": {"role": "assistant", "content": text[j]}}
                           for j in reversed(range(n))]  # out of order: the client must sort by index
                self._send(200, {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": req["model"],
                                 "choices": choices,
                                 "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


KNOWN_FIELDS = {"model", "messages", "n", "temperature", "top_p", "max_tokens", "seed", "stream", "do_sample"}


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def backend(server: Server, **kw) -> OpenAIBackend:
    kw.setdefault("api_key", "secret")
    kw.setdefault("backoff", 0.01)
    return OpenAIBackend("tiny-model", base_url=server.url, **kw)


def test_registered_and_lazy():
    assert BACKENDS.get("openai") is OpenAIBackend


def test_n_choices_per_prompt_in_order_with_explicit_sampling():
    with Server() as srv:
        b = backend(srv)
        s = SamplingConfig(n=3, temperature=0.7, top_p=0.9, max_tokens=20, seed=1)
        out = b.generate([msgs("a"), msgs("b")], s, seeds=[11, 22])
        b.close()
    assert out == [[f"a|seed=11|t=0.7|j={j}" for j in range(3)], [f"b|seed=22|t=0.7|j={j}" for j in range(3)]]
    assert len(srv.requests) == 2
    for r in srv.requests:
        assert (r["n"], r["temperature"], r["top_p"], r["max_tokens"], r["model"]) == (3, 0.7, 0.9, 20, "tiny-model")
        assert r["messages"][0] == {"role": "system", "content": "sys"}
        # the server's generation_config defaults (e.g. Qwen2.5's top-k 20) must not apply to omitted fields
        assert (r["top_k"], r["min_p"], r["repetition_penalty"]) == (-1, 0.0, 1.0)


def test_sampling_extensions_can_be_left_out_for_strict_servers():
    with Server() as srv:
        backend(srv, disable_server_defaults=False).generate([msgs("a")], SamplingConfig(n=1))
        backend(srv, extra_body={"top_k": 5}).generate([msgs("a")], SamplingConfig(n=1))
    assert not {"top_k", "min_p", "repetition_penalty"} & set(srv.requests[0])
    assert srv.requests[1]["top_k"] == 5 and srv.requests[1]["min_p"] == 0.0


def test_without_seeds_no_seed_is_sent():
    with Server() as srv:
        out = backend(srv).generate([msgs("a")], SamplingConfig(n=1))
    assert out == [["a|seed=None|t=1.0|j=0"]] and "seed" not in srv.requests[0]


def test_requests_run_concurrently_up_to_the_limit():
    with Server(delay=0.15) as srv:
        b = backend(srv, concurrency=4)
        t = time.perf_counter()
        out = b.generate([msgs(f"p{i}") for i in range(12)], SamplingConfig(n=2), seeds=list(range(12)))
        took = time.perf_counter() - t
    assert [o[0].split("|")[0] for o in out] == [f"p{i}" for i in range(12)]
    assert srv.max_active == 4
    assert took < 12 * 0.15 / 2  # far from sequential


def test_server_errors_are_retried_with_backoff():
    with Server() as srv:
        b = backend(srv, max_retries=3)
        out = b.generate([msgs("fail503:2"), msgs("ratelimit"), msgs("ok")], SamplingConfig(n=2),
                         seeds=[1, 2, 3])
    assert out[0] == ["fail503:2|seed=1|t=1.0|j=0", "fail503:2|seed=1|t=1.0|j=1"]
    assert out[1][0].startswith("ratelimit|") and b.retries == 3
    assert srv.failures == {"fail503:2": 3, "ratelimit": 2}


def test_retries_give_up_with_a_clear_error():
    with Server() as srv:
        b = backend(srv, max_retries=1)
        with pytest.raises(GenerationError, match=r"after 2 attempt\(s\)"):
            b.generate([msgs("fail503:5")], SamplingConfig(n=1))
    assert srv.failures["fail503:5"] == 2


def test_unreachable_server_is_an_error_after_retries():
    with Server() as srv:
        url = srv.url
    b = OpenAIBackend("m", base_url=url, max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(GenerationError, match="is the server up"):
        b.generate([msgs("a")], SamplingConfig(n=1))


def test_client_errors_are_not_retried():
    with Server() as srv:
        with pytest.raises(GenerationError, match="HTTP 401.*api-key"):
            backend(srv, api_key="wrong").generate([msgs("a")], SamplingConfig(n=1))
        b = backend(srv)
        with pytest.raises(GenerationError, match="refused"):
            b.generate([msgs("bad")], SamplingConfig(n=1))
        assert b.retries == 0


def test_context_length_errors_mark_the_prompt_too_long():
    with Server() as srv:
        b = backend(srv)
        with pytest.raises(PromptTooLongError) as e:
            b.generate([msgs("a"), msgs("toolong"), msgs("c")], SamplingConfig(n=2), seeds=[1, 2, 3])
    assert e.value.indices == [1]
    assert e.value.results[0][0].startswith("a|") and e.value.results[1] is None and e.value.results[2][1].endswith(
        "j=1")


def test_n_is_split_for_servers_that_cap_it():
    with Server(n_cap=2) as srv:
        with pytest.raises(GenerationError, match="max_n_per_request"):
            backend(srv).generate([msgs("a")], SamplingConfig(n=5))
        b = backend(srv, max_n_per_request=2)
        out = b.generate([msgs("a")], SamplingConfig(n=5), seeds=[100])
    assert len(out[0]) == 5
    assert [r["n"] for r in srv.requests[-3:]] == [2, 2, 1]
    assert [r["seed"] for r in srv.requests[-3:]] == [100, 102, 104]


def test_split_requests_draw_the_samples_one_request_would():
    """vLLM gives the j-th of a request's n samples the seed ``seed + j`` (``ParentRequest``), so the parts of a
    split request must start at ``seed + samples so far``: overlapping seeds would repeat samples (a question's
    k samples would not be independent, and pass@k would be biased)."""
    with Server(n_cap=3) as srv:
        backend(srv, max_n_per_request=3).generate([msgs("a")], SamplingConfig(n=8), seeds=[1000])
        split = srv.requests[:]
    with Server() as srv:
        backend(srv).generate([msgs("a")], SamplingConfig(n=8), seeds=[1000])
        whole = srv.requests[:]

    def sample_seeds(requests):
        return [r["seed"] + j for r in requests for j in range(r["n"])]

    assert sample_seeds(whole) == list(range(1000, 1008))
    assert sample_seeds(split) == sample_seeds(whole)  # the same 8 samples, none twice


def test_the_runner_streams_over_http_and_resumes(tmp_path):
    ids = [f"q{i}" for i in range(10)]
    prompts = [msgs(f"p{i}") if i != 3 else msgs("toolong") for i in range(10)]
    s = SamplingConfig(n=2, seed=5)
    with Server(delay=0.02) as srv:
        rep = run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=backend(srv, concurrency=3), sampling=s,
                         fingerprint={"model": "tiny-model"}, chunk_size=4)
        n_req = len(srv.requests)
        again = run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=backend(srv), sampling=s,
                           fingerprint={"model": "tiny-model"}, chunk_size=4)
    assert rep.complete and rep.generated_chunks == 3 and rep.skipped == 1
    assert again.generated_chunks == 0 and len(srv.requests) == n_req
    t = read_completions(tmp_path / "w", ids=ids)
    comps = t.column("completions").to_pylist()
    seeds = t.column("seed").to_pylist()
    assert comps[3] is None and t.column("skipped").to_pylist()[3] == "prompt_too_long"
    assert comps[7] == [f"p7|seed={seeds[7]}|t=1.0|j={j}" for j in range(2)]


@pytest.mark.parametrize("kw", [dict(concurrency=0), dict(max_retries=-1), dict(max_n_per_request=0)])
def test_bad_settings(kw):
    with pytest.raises(ValueError):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", **kw)


# -- refusals: the server's own words and the option that fixes it --------------------------------------------------
def test_a_refusal_shows_the_servers_detail_and_the_fix():
    with Server(strict=True) as srv:
        with pytest.raises(GenerationError) as e:  # the default request carries top_k, min_p, repetition_penalty
            backend(srv).generate([msgs("a")], SamplingConfig(n=1))
        msg = str(e.value)
        assert "HTTP 422" in msg and "Unexpected fields in the request" in msg and "'top_k'" in msg
        assert "--backend-arg disable_server_defaults=false" in msg
        with pytest.raises(GenerationError) as e:  # a field of extra_body
            backend(srv, disable_server_defaults=False, extra_body={"frobnicate": 1}).generate(
                [msgs("a")], SamplingConfig(n=1))
        assert "'frobnicate'" in str(e.value) and "--backend-arg extra_body" in str(e.value)
        out = backend(srv, disable_server_defaults=False).generate([msgs("a")], SamplingConfig(n=1))
        assert out == [["a|seed=None|t=1.0|j=0"]]
        with pytest.raises(GenerationError, match=r"HTTP 404: Not Found .*--base-url.*--model"):
            OpenAIBackend("m", base_url=srv.url[:-3], api_key="secret").generate([msgs("a")], SamplingConfig(n=1))
        with pytest.raises(GenerationError, match=r"HTTP 401: bad key .*--api-key"):
            backend(srv, api_key="wrong").generate([msgs("a")], SamplingConfig(n=1))
        with pytest.raises(GenerationError, match=r"HTTP 400: temperature must be <= 2"):
            backend(srv, disable_server_defaults=False).generate([msgs("bad")], SamplingConfig(n=1))


def test_a_server_that_ignores_n_is_named_with_the_working_option():
    with Server(n_cap=1) as srv:
        with pytest.raises(GenerationError) as e:
            backend(srv).generate([msgs("a")], SamplingConfig(n=4))
    assert "asked for n=4 completions, got 1" in str(e.value)
    assert "--backend-arg max_n_per_request=1" in str(e.value) and "--max-n-per-request" not in str(e.value)


def _cli_flags() -> dict[str, set[str]]:
    from typer.main import get_command

    from rag_curriculum.cli import app

    root = get_command(app)
    out = {}
    for name, cmd in (("partition", root.commands["partition"]), ("eval", root.commands["eval"].commands["run"])):
        out[name] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    return out


def test_every_hint_names_options_that_exist():
    """Each ``--flag`` a hint names is an option of both `curriculum partition` and `curriculum eval`; each
    ``--backend-arg KEY=`` is an option of the backend's constructor (the identical-samples error included)."""
    import inspect
    import re

    from rag_curriculum.generation import IdenticalSamplesError
    from rag_curriculum.generation._openai_backend import HINTS
    from rag_curriculum.generation.runner import _IdenticalCheck

    check = _IdenticalCheck(OpenAIBackend("m", base_url="http://127.0.0.1:9/v1"), SamplingConfig(n=4),
                            allow=False, total_questions=8)
    with pytest.raises(IdenticalSamplesError) as e:
        check.offer(0, _chunk([["x"] * 4] * 8))
    texts = [*HINTS.values(), str(e.value)]
    flags = _cli_flags()
    params = set(inspect.signature(OpenAIBackend.__init__).parameters)
    named_flags, named_args = set(), set()
    for t in texts:
        named_flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", t))
        named_args |= set(re.findall(r"--backend-arg '?([A-Za-z_]+)=", t))
    assert {"--backend-arg", "--api-key", "--base-url", "--model", "--allow-identical-samples",
            "--overwrite"} <= named_flags
    assert {"disable_server_defaults", "max_n_per_request", "extra_body", "max_retries"} <= named_args
    for command, known in flags.items():
        assert named_flags <= known, (command, named_flags - known)
    assert named_args <= params, named_args - params


def _chunk(completions):
    import pyarrow as pa

    from rag_curriculum.generation.runner import CHUNK_SCHEMA

    n = len(completions)
    return pa.table({"position": list(range(n)), "id": [f"q{i}" for i in range(n)], "seed": [None] * n,
                     "skipped": [None] * n, "completions": completions}, schema=CHUNK_SCHEMA)


@pytest.mark.slow
def test_a_server_that_decodes_greedily_is_stopped_with_the_way_to_turn_sampling_on(tmp_path):
    from rag_curriculum.generation import IdenticalSamplesError
    from rag_curriculum.generation._openai_backend import TRANSFORMERS_SERVE_SAMPLING

    ids = [f"q{i}" for i in range(10)]
    prompts = [msgs(f"p{i}") for i in range(10)]
    s = SamplingConfig(n=3, temperature=0.8, seed=1)
    with Server(greedy=True) as srv:
        with pytest.raises(IdenticalSamplesError) as e:
            run_chunks(tmp_path / "w", ids=ids, prompts=prompts, backend=backend(srv), sampling=s,
                       fingerprint={"m": 1}, chunk_size=5)
        assert "10 of 10 questions got 3 identical samples at temperature 0.8" in str(e.value)
        assert json.dumps(TRANSFORMERS_SERVE_SAMPLING) in str(e.value) and "--allow-identical-samples" in str(e.value)
        assert not list((tmp_path / "w").glob("chunk-*"))
        rep = run_chunks(tmp_path / "w2", ids=ids, prompts=prompts, sampling=s, fingerprint={"m": 1}, chunk_size=5,
                         backend=backend(srv, extra_body={"do_sample": True}))
    assert rep.complete and all(len(set(c)) == 3 for c in read_completions(tmp_path / "w2").column("completions")
                                .to_pylist())


# -- what the completions depend on -----------------------------------------------------------------------------------
def test_describe_records_every_option_that_can_change_a_completion_and_no_secret():
    from rag_curriculum.generation import backend_identity

    args = dict(base_url="http://127.0.0.1:9/v1", api_key="sk-secret", concurrency=7, max_retries=2, timeout=5.0,
                max_n_per_request=2, disable_server_defaults=False, extra_body={"do_sample": True})
    d = OpenAIBackend("served-model", **args).describe()
    assert d == {"backend": "openai", "model": "served-model",
                 "options": {"disable_server_defaults": False, "extra_body": {"do_sample": True},
                             "max_n_per_request": 2}}
    assert d == backend_identity("openai", "served-model", args)  # before building it: the same
    assert "sk-secret" not in json.dumps(d)
    assert backend_identity("openai", "served-model", {}) == {
        "backend": "openai", "model": "served-model", "options": {"disable_server_defaults": True}}


@pytest.mark.slow
def test_a_partition_with_other_request_settings_in_the_same_out_is_refused(tmp_path, shared_data):
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.partition import PartitionConfig, PartitionError, partition

    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 8, K=2)], schedule="max",
                                 out=str(tmp_path / "max"), seed=0), command="test")
    with Server() as srv:
        def go(**args):
            cfg = PartitionConfig(shards=str(tmp_path / "max"), out=str(tmp_path / "p"), backend="openai",
                                  model="tiny-model", samples=2, max_tokens=8, chunk_size=4,
                                  backend_args={"base_url": srv.url, "api_key": "secret", **args})
            return partition(cfg)

        assert go(extra_body={"a": 1}).complete
        n = len(srv.requests)
        assert go(extra_body={"a": 1}, concurrency=3, max_retries=1).complete  # speed options: the same run
        assert len(srv.requests) == n  # nothing generated again
        for other in (dict(extra_body={"a": 2}), dict(extra_body={"a": 1}, disable_server_defaults=False),
                      dict(extra_body={"a": 1}, max_n_per_request=1)):
            with pytest.raises((PartitionError, RunMismatchError), match="other settings.*generation"):
                go(**other)
        assert len(srv.requests) == n


def test_requests_under_way_are_abandoned_when_the_call_fails():
    """After an error the other requests of the call retry no more, and their threads (daemon) never hold the
    process: a closed client under a thread still reading would otherwise block it until the timeout."""
    with Server(delay=0.05) as srv:
        b = backend(srv, concurrency=4, max_retries=1000, backoff=0.02, max_backoff=0.02)
        with pytest.raises(GenerationError, match="temperature must be <= 2"):
            b.generate([msgs("fail503:100000"), msgs("fail503:100000"), msgs("bad"), msgs("x")],
                       SamplingConfig(n=1))
        b.close()
        time.sleep(0.3)
        n = len(srv.requests)
        time.sleep(0.5)
        assert len(srv.requests) == n  # nothing retried after the failure
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("openai-backend"))
    with pytest.raises(GenerationError, match="closed"):
        b.generate([msgs("a")], SamplingConfig(n=1))


@pytest.mark.parametrize("url", ["http://u:pa#SECRET@127.0.0.1:8000/v1", "http://u:pa?SECRET@127.0.0.1:8000/v1",
                                 "http://u:pa/SECRET@127.0.0.1:8000/v1"])
def test_a_base_url_whose_password_ends_its_authority_is_refused_masked(url):
    from rag_curriculum.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--base-url http://\*\*\*@127.0.0.1:8000/v1: its port is not a number"):
        OpenAIBackend("m", base_url=url)
