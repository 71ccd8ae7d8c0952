"""The VERITAS judge over real HTTP, through the toolkit's OpenAI-compatible backend (the paper's setting: a reward
model served behind an API):

- a small OpenAI-compatible chat server on 127.0.0.1 (a free port) answering each prompt as ``lexical_judge`` does,
  ``n`` choices per request: the prompts it receives are the paper's, verbatim; k-vote asks ``n=k``; the cache
  stops a second request;
- ``transformers serve`` of the tiny random model (a real model behind a real server, started and stopped by its
  process group): every verdict is what its reply reads as, an unreadable reply is a judge failure scored with the
  documented value, and a second judge on the same cache sends nothing."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("openai")

from rag_curriculum.methods.veritas._reward import (  # noqa: E402
    INFO_THINK_PROMPT,
    THINK_SEARCH_PROMPT,
    VeritasJudge,
    VeritasReward,
    lexical_judge,
    read_label,
    trajectory_pairs,
)

TRAJ = (
    "<think>Who directed Jaws?</think><search>Jaws director</search>\n\n<information>Doc 1(Title: Jaws) Jaws "
    "was directed by Steven Spielberg.</information>\n\n<think>So the director is Spielberg.</think><search>"
    "Spielberg birthplace</search>\n\n<information>Doc 1(Title: Spielberg) Born in Cincinnati, Ohio."
    "</information>\n\n<think>I guess Ohio then.</think><answer>Cincinnati</answer>"
)


class JudgeServer:
    """POST /v1/chat/completions: ``n`` choices, each ``lexical_judge``'s reply to the last message."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(req)
                n = req.get("n", 1)
                replies = lexical_judge(req["messages"], n, req.get("seed") or 0)
                body = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": req["model"],
                        "choices": [
                            {
                                "index": j,
                                "finish_reason": "stop",
                                "logprobs": None,
                                "message": {"role": "assistant", "content": replies[j]},
                            }
                            for j in range(n)
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                    }
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_judge_over_http_with_votes_and_cache(tmp_path):
    with JudgeServer() as server:
        spec = {
            "backend": "openai",
            "model": "veritas-rm",
            "cache_dir": str(tmp_path / "cache"),
            "votes": 3,
            "temperature": 1.0,
            "backend_args": {"base_url": server.url, "api_key": "EMPTY"},
        }
        reward = VeritasReward(judge=spec, think_search=True)
        b = reward.score(TRAJ, ["Cincinnati"])
        # info 1 -> "So the director is Spielberg." shares "spielberg": 1; info 2 -> "I guess Ohio then." shares
        # "ohio": 1; think 1 / "Jaws director": 1 ("jaws"); think 2 / "Spielberg birthplace": 1 ("spielberg")
        assert (b.info_think, b.think_search, b.em, b.think_answer) == (1.0, 1.0, 1.0, 0.0)
        assert b.total == pytest.approx(0.9 + 0.05)
        assert len(server.requests) == 4 and {r["n"] for r in server.requests} == {3}
        assert {r["model"] for r in server.requests} == {"veritas-rm"}
        sent = {r["messages"][-1]["content"] for r in server.requests}
        want = {
            (INFO_THINK_PROMPT if p.kind == "info_think" else THINK_SEARCH_PROMPT).replace(
                "{input_string}", p.input_string()
            )
            for p in trajectory_pairs(TRAJ)
        }
        assert sent == want
        # a second reward on the same cache: no request
        again = VeritasReward(judge=spec, think_search=True).score(TRAJ, ["Cincinnati"])
        assert again == b and len(server.requests) == 4


@pytest.fixture(scope="module")
def tserve(tiny_model_dir, tmp_path_factory) -> Iterator[str]:
    """`transformers serve` of the tiny model on 127.0.0.1: its /v1 URL."""
    from support.servers import free_port, server_process

    pytest.importorskip("fastapi", reason="transformers serve needs its serving extra (the dev extra)")
    exe = Path(sys.executable).parent / "transformers"
    if not exe.exists():
        pytest.fail(f"no transformers CLI beside {sys.executable}")
    port = free_port()
    log = tmp_path_factory.mktemp("veritas-serve") / "serve.log"
    argv = [
        str(exe),
        "serve",
        str(tiny_model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--log-level",
        "warning",
    ]
    with server_process(
        argv,
        f"http://127.0.0.1:{port}/health",
        log,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"},
    ):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_model_served_as_the_judge(tserve, tiny_model_dir, tmp_path):
    spec = {
        "backend": "openai",
        "model": str(tiny_model_dir),
        "cache_dir": str(tmp_path / "cache"),
        "max_tokens": 4,
        "backend_args": {
            "base_url": tserve,
            "api_key": "EMPTY",
            "concurrency": 2,
            "disable_server_defaults": False,
            "max_n_per_request": 1,
        },
    }
    judge = VeritasJudge(**spec)
    pairs = trajectory_pairs(TRAJ)
    verdicts = judge.judge(pairs)
    assert judge.calls == 4 and not any(v.cached for v in verdicts)
    for v in verdicts:  # whatever the random model wrote, the verdict is what it reads as
        assert len(v.replies) == 1 and v.votes == (read_label(v.replies[0]),)
        assert v.score == (None if v.votes[0] is None else float(v.votes[0]))
    # the reward scores failed pairs with judge_failure_value; a fresh judge on the same cache sends nothing
    reward = VeritasReward(judge=VeritasJudge(**spec), judge_failure_value=0.25, think_search=True)
    b = reward.score(TRAJ, ["Cincinnati"])
    it = [
        0.25 if v.score is None else v.score
        for v, p in zip(verdicts, pairs, strict=True)
        if p.kind == "info_think"
    ]
    assert b.info_think == pytest.approx(sum(it) / 2) and reward._judge.calls == 0
    assert b.judge_failures == sum(v.failed for v in verdicts)
