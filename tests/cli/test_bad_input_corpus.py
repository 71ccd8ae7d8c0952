"""The command line's bad-input corpus: over 250 bad values across every command, each refused with exit 2 (a usage
error) or 1 (a failure while running), one error line and no traceback, no output folder left, every input
unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN
from support.cli_runs import one_error, run
from support.servers import busy_port

#: Placeholders: {MAX} a shard directory, {EVAL} an evaluation set, {IDX} a BM25 index, {TRAIN} MuSiQue's shared
#: sample, {OUT} where an output would go (must not appear), {FILE} a text file, {EMPTY} an empty file, {JUNK}
#: binary junk named .jsonl, {TRUNC} a truncated JSON file, {DIR} an empty folder, {MISSING} a path that is not,
#: {PART} a finished partition, {RUN} a finished evaluation. Dense: {ENC} a tiny
#: sentence-transformers encoder, {CORPUS} a corpus of 20 lines, {FLAT} an inner-product flat FAISS index of as many
#: vectors, {NANIDX} the same with a NaN and an infinity, {L1IDX} one of metric L1, {BADENC} an encoder folder with a
#: broken config.json, {MOVED} a dense index whose encoder folder was moved away.
BASES = {
    "build": ["build", "-d", "musique", "-i", "{TRAIN}", "-o", "{OUT}", "--n", "3", "--no-progress"],
    "index": ["index", "-d", "musique", "-i", "{TRAIN}", "-o", "{OUT}", "--depth", "5", "--no-progress"],
    "partition": ["partition", "{MAX}", "--backend", "scripted", "--model", "scripted_answers:ok", "-o", "{OUT}",
                  "--no-progress"],
    "eval": ["eval", "--model", "m=scripted_answers:ok", "--data", "{EVAL}", "--backend", "scripted", "--no-plots",
             "-o", "{OUT}", "--no-progress"],
    "serve": ["serve", "--index", "{IDX}"],
    "index --kind dense": ["index", "--kind", "dense", "--encoder", "{ENC}", "--corpus", "{CORPUS}", "-o", "{OUT}",
                           "--device", "cpu", "--no-progress"],
    "index --import-faiss": ["index", "--kind", "dense", "--encoder", "{ENC}", "--import-faiss", "{FLAT}", "--corpus",
                             "{CORPUS}", "-o", "{OUT}", "--device", "cpu", "--no-progress"],
    "serve dense": ["serve", "--index", "{MOVED}", "--port", str(busy_port())],
    "index --engine ray": ["index", "--kind", "dense", "--encoder", "{ENC}", "--corpus", "{CORPUS}", "-o", "{OUT}",
                           "--device", "cpu", "--no-progress", "--engine", "ray"],
    "inspect": ["inspect", "{TRAIN}"],
    "profile": ["profile", "-d", "musique", "-i", "{TRAIN}", "--n", "2", "--levels", "1,2", "--backend", "scripted",
                "--model", "scripted_answers:ok", "-o", "{OUT}", "--no-progress"],
    "train": ["train", "recipe=rag-rl-min-max", "data.shards={MAX}", "--print-config"],
    "train --dry-run": ["train", "recipe=cpu-tiny", "data.shards={MAX}", "--dry-run"],
    "partition-merge": ["partition-merge", "{PART}", "-o", "{OUT}"],
    "eval compare": ["eval", "compare", "{RUN}", "-o", "{OUT}/t.md"],
    "warm-start": ["warm-start", "{MAX}", "--out", "{OUT}"],
    "warm-start --agent": ["warm-start", "{MAX}", "--out", "{OUT}", "--agent", "search-r1", "--retriever", "{IDX}",
                           "--retriever-retries", "0"],  # an unreachable server said at once

    "build hotpotqa": ["build", "-d", "hotpotqa", "-i", "{HOTPOT}", "-o", "{OUT}", "--n", "3", "--no-progress"],
    "eval transformers": ["eval", "--model", "m=x", "--data", "{EVAL}", "--backend", "transformers", "--no-plots",
                          "-o", "{OUT}", "--no-progress"],
}
INT, FLOAT = ("abc", "-7", "1.5", "99999999999999999999"), ("abc", "-1", "1e999", "nan")
OPTIONS = {  # option: the bad values tried (each a case)
    "build": {"--K": INT, "--n": ("abc", "-5", "0", "1.5"), "--seed": INT, "--max-distractors": INT[:3],
              "--top-k": INT[:3], "--index-base": ("abc", "-3", "7"), "--batch-prompts": INT[:3],
              "--rows-per-shard": INT[:3] + ("0",), "--unanswerable-fraction": ("abc", "-0.1", "1.5", "nan"),
              "--workers": ("abc", "-2"), "--schedule": ("linar", ""), "--order": ("nosuch",),
              "--setting": ("distracter", ""), "--split": ("nosuch",), "--distractors": ("nosuch",),
              "--tail": ("chop",), "--leakage": ("nosuch",), "--on-error": ("ignore",), "--template": ("nosuch",),
              "-d": ("nosuch", ""), "--pieces": ("nosuch", "1:2:3"), "--abstention-answer": ("",),
              "--tokenizer": ("{MISSING}",), "--index": ("{MISSING}", "{FILE}", "{DIR}"),
              "--eval-set": ("{MISSING}", "{FILE}"), "-i": ("{MISSING}", "{EMPTY}", "{JUNK}", "{TRUNC}", "{DIR}")},
    "index": {"--k1": FLOAT, "--b": FLOAT + ("1.5",), "--delta": ("abc", "-1"), "--depth": INT[:3] + ("0",),
              "--threads": ("abc", "-3"), "--method": ("nosuch",), "--stopwords": ("klingon",),
              "--backend": ("nosuch",), "--on-error": ("ignore",), "-d": ("nosuch",),
              "--corpus": ("{MISSING}", "{JUNK}", "{DIR}"), "-i": ("{MISSING}", "{EMPTY}", "{JUNK}", "{DIR}"),
              "--kind": ("dense", "hybrid", "nosuch"), "--max-memory": ("8GB",), "--encoder": ("{ENC}",),
              "--engine": ("ray", "nosuch")},
    # Every bad dense value refused in one line (exit 2 before any model loads)
    "index --kind dense": {"--max-memory": ("abc", "nan", "-1GB", "1e400GB", "0"), "--device": ("bogus", ""),
                           "--encoder": ("{MISSING}", "{DIR}", "{FILE}", "{BADENC}"), "--faiss": ("Bogus",),
                           "--compress": ("IVF4,Flat",), "--import-faiss": ("{NANIDX}", "{L1IDX}", "{MISSING}",
                                                                           "{FILE}")},
    "index --import-faiss": {"--compress": ("Bogus", ""), "--import-faiss": ("{NANIDX}", "{L1IDX}"),
                             "--faiss": ("HNSW8",), "--max-memory": ("1GB",), "--engine": ("ray",)},
    # The Ray Data encoding's options; a cluster that cannot be reached (refused in seconds)
    "index --engine ray": {"--ray-address": ("127.0.0.1:9", ""), "--num-workers": ("abc", "0", "-1"),
                           "--cpus-per-worker": ("abc", "0", "-1"), "--gpus-per-worker": ("abc", "-1"),
                           "--engine": ("nosuch",), "--import-faiss": ("{FLAT}",)},
    # A dense index whose encoder moved, refused before "serving ..." is printed
    "serve dense": {"--encoder": ("{MISSING}", "{DIR}", "{FILE}", "{BADENC}"), "--device": ("bogus",),
                    "--engine": ("nosuch",), "--index": ("{MOVED}",)},
    "partition": {"--n": INT, "--K": INT, "--pass-at": INT + ("0", "2000"), "--temperature": FLOAT,
                  "--top-p": FLOAT + ("0", "1.5"), "--max-tokens": INT + ("0",), "--seed": INT,
                  "--correct-f1": FLOAT + ("0", "2"), "--chunk-size": INT + ("0",), "--chunks-per-call": INT[:3],
                  "--num-shards": INT[:3] + ("0",), "--shard-index": ("abc", "-1", "1.5", "5"),
                  "--max-chunks": ("abc", "-1", "0"), "--backend": ("nosuch", ""), "--engine": ("nosuch",),
                  "--num-workers": ("abc", "-1"), "--gpus-per-worker": ("abc", "-1"),
                  "--cpus-per-worker": ("abc", "-1"), "--chunk-retries": ("abc", "-1"),
                  "--backend-arg": ("novalue", "nosuch=1", "=1", "delay=abc"), "--model": ("scripted_answers:nosuch",
                                                                                          "nosuchmod:fn", "{TRUNC}"),
                  "--concurrency": ("abc",), "--batch-size": ("abc",)},
    "eval": {"--samples": INT + ("0",), "--temperature": FLOAT, "--top-p": FLOAT + ("0",), "--max-tokens": INT,
             "--seed": INT, "--limit": INT[:3] + ("0",), "--chunk-size": INT[:3] + ("0",),
             "--index-base": ("abc", "-1"), "--template": ("nosuch",), "--backend": ("nosuch",),
             "--stats": ("{MISSING}", "{FILE}", "{DIR}"), "--data": ("{MISSING}", "{FILE}", "{DIR}", "{TRAIN}"),
             "--backend-arg": ("novalue", "nosuch=1"), "--judge-arg": ("novalue",),
             "--model": ("m=scripted_answers:nosuch", "=x", "m="), "--agent": ("nosuch",),
             "--faithfulness": ("nosuch",), "--engine": ("nosuch",), "--best-of": ("abc", "-1"),
             "--top-k": ("abc",), "--max-turns": ("abc",)},
    "serve": {"--port": ("abc", "-5", "99999999"), "--workers": ("abc", "-1", "1000"), "--max-batch": ("abc", "0"),
              "--max-topk": ("abc", "0"), "--default-topk": ("abc", "0"), "--max-body-bytes": ("abc", "10"),
              "--max-query-chars": ("abc", "0"), "--threads": ("abc", "-1")},
    # a model's pass rate per level: bad levels, sizes and inputs refused before anything is written
    "profile": {"--levels": ("0", "abc", "99", "", "1,,2"), "--samples": INT + ("0",), "--group-size": INT[:3] + ("0",),
                "--temperature": FLOAT, "--correct-f1": FLOAT + ("2",), "--n": ("abc", "-5", "0"),
                "-d": ("nosuch",), "-i": ("{MISSING}", "{EMPTY}", "{JUNK}", "{DIR}"), "--backend": ("nosuch",),
                "--chunk-size": INT[:3] + ("0",), "--reward": ("nosuch", "rag-rl:x", "rag-rl,"),
                "--recipe": ("nosuch",), "--max-spread": FLOAT},  # (a model that fails to load keeps OUT/input, built for the rerun)
    "inspect": {"--dataset": ("nosuch",), "--on-error": ("ignore", ""), "": ("{MISSING}", "{EMPTY}", "{JUNK}",
                                                                              "{TRUNC}")},
    "train": {"": ("recipe=nosuch", "sead=1", "batch.prompts_per_step=abc",
                   "batch.prompts_per_step=-2", "rewards.0.name=nosuch", "rewards.0.weight=abc",
                   "data.order_policy=nosuch", "model.dtype=float7", "run.resume=", "data.max_rows=-1",
                   "data.max_rows=abc", "adaptive.controller=nosuch", "adaptive.controller=nosuchmod:Cls",
                   "dynamic.enabled=true dynamic.metric=nosuch", "=1", "data.shards=", "model.name_or_path={MISSING}/m")},
    # What the real run refuses before its model loads, the dry run refuses too
    "train --dry-run": {"": ("batch.prompts_per_step=16", "data.max_rows=1", "run.resume=last", "run.resume={MISSING}",
                             "batch.prompts_per_step=512 +agent.retriever={IDX}")},
    "partition-merge": {"--correct-f1": ("abc", "-1", "2"), "--shards": ("{MISSING}",), "": ("{MISSING}",
                                                                                              "{DIR}")},
    "eval compare": {"--section": ("nosuch",), "": ("{MISSING}", "{DIR}", "{FILE}")},
    # Every bad value refused before a model is made or a folder written
    "warm-start": {"--rows": INT + ("0",), "--copies": INT + ("0",), "--epochs": FLOAT + ("0",),
                   "--plain": FLOAT + ("1",), "--learning-rate": FLOAT, "--seed": INT[:2] + INT[3:],
                   "--hidden-size": INT, "--layers": ("abc", "0", "99999999999999999999"),
                   "--model": ("{MISSING}", "{FILE}", "{DIR}"), "--agent": ("nosuch", "search-r1"),
                   "--retriever": ("{IDX}", "{MISSING}"), "--top-k": INT[:3] + ("0",), "--template": ("nosuch",)},
    # a search agent's warm start: a retriever that cannot answer is refused before anything is written
    "warm-start --agent": {"--retriever": ("{MISSING}", "{DIR}", "{FILE}", "http://127.0.0.1:9"),
                           "--template": ("nosuch", "search-tools")},
    # A paragraph whose sentences are a string; an input that holds no question, a JSONL file
    # cut short; a corpus id reused by another passage; the body limits of serve; a
    # model folder that is not there, with the Hub off
    "build hotpotqa": {"-i": ("{HPSTRING}",)},
    "build --n all": {"-i": ("{EMPTYLIST}", "{CUTJSONL}")},
    "index --corpus": {"--corpus": ("{DUPCORPUS}",)},
    "serve --body": {"--body-timeout": FLOAT + ("0",), "--min-body-rate": ("abc", "0", "-5", "1.5")},
    "eval transformers": {"--model": ("m=nosuchdir/sub", "m={MISSING}/m", "m=./nosuchdir")},
}
BASES["build --n all"] = [*BASES["build"][:-3], "--n", "all", "--no-progress"]
BASES["index --corpus"] = ["index", "--corpus", "{FILE}", "-o", "{OUT}", "--no-progress"]
BASES["serve --body"] = BASES["serve"]
# What is not a shard directory, and a repository id the Hub would refuse, before any network
BASES["push"] = ["push", "{MAX}", "me/curriculum", "--dry-run"]
BASES["push repo"] = BASES["push"]
OPTIONS["push"] = {"": ("{MISSING}", "{FILE}", "{DIR}", "{IDX}", "{PART}", "{RUN}")}
OPTIONS["push repo"] = {"": ("me/bad name", "", "a/b/c", "me/x..y")}


def corpus_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for command, options in OPTIONS.items():
        for option, values in options.items():
            for value in values:
                args = [*BASES[command]]
                if option == "":  # a positional value or an override: replaces the base's own where it has one
                    if command in ("inspect", "partition-merge", "push"):
                        args[1] = value
                    elif command in ("eval compare", "push repo"):
                        args[2] = value
                    else:
                        args += value.split(" ")
                elif option in args:  # an option of the base: its value replaced
                    args[args.index(option) + 1] = value
                else:
                    args += [option, value]
                cases.append((f"{command} {option} {value!r}", args))
    return cases


CORPUS = corpus_cases()
#: Cases that fail while the command runs (exit 1) although their value is not a path: a file's contents disagree
#: with the value, or a required setting was left empty.
EXIT_1 = {"build --split 'nosuch'", "build --pieces 'nosuch'", "build --pieces '1:2:3'", "train  'data.shards='",
          "train --dry-run  'batch.prompts_per_step=16'", "train --dry-run  'data.max_rows=1'",
          "train --dry-run  'run.resume=last'", "warm-start --agent --retriever 'http://127.0.0.1:9'",
          "index --engine ray --ray-address '127.0.0.1:9'"}
#: Path-valued cases that are usage errors (exit 2): a model reference that is neither a folder nor a Hub id.
EXIT_2 = {"train  'model.name_or_path={MISSING}/m'", "warm-start --retriever '{IDX}'",
          "warm-start --retriever '{MISSING}'", "index --encoder '{ENC}'", "index --engine ray --import-faiss '{FLAT}'",
          "eval transformers --model 'm={MISSING}/m'"}
CLICK = ("Invalid value", "No such option", "Missing argument", "Missing option")


def test_the_corpus_covers_every_command_with_250_cases():
    assert len(CORPUS) >= 250 and len({name for name, _ in CORPUS}) == len(CORPUS)
    from rag_curriculum.cli import COMMANDS

    commands = set(COMMANDS) - {"globalrag", "verl"}  # (groups of commands for scripts, not a user's input)
    covered = {name.split(" -")[0].split("  ")[0] for name, _ in CORPUS}
    assert commands - {"recipes", "validate"} <= covered | {"eval compare"}, commands - covered


@pytest.fixture(scope="module")
def corpus_paths(tmp_path_factory, max_dir, eval_dir, script) -> dict[str, Path]:
    import os

    root = tmp_path_factory.mktemp("corpus")
    for args in (["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", root / "idx", "--depth", 5, "--no-progress"],
                 ["partition", max_dir, "--backend", "scripted", "--model", "scripted_answers:ok", "-o", root / "part",
                  "--no-progress", "--pass-at", 2],
                 ["eval", "--model", "m=scripted_answers:ok", "--data", eval_dir, "--backend", "scripted", "--no-plots",
                  "-o", root / "run", "--no-progress"]):
        r = run(*args)
        assert r.exit_code == 0, r.output
    (root / "f.txt").write_text("mine")
    (root / "empty.jsonl").write_text("")
    (root / "junk.jsonl").write_bytes(os.urandom(300))
    (root / "trunc.json").write_text('{"a": [1, 2')
    (root / "dir").mkdir()

    hotpot = json.loads(HOTPOT_TRAIN.read_text())[:4]
    hotpot[1]["context"][0][1] = "".join(hotpot[1]["context"][0][1])  # a paragraph's sentences as one string
    (root / "hotpot-string.json").write_text(json.dumps(hotpot))
    (root / "empty-list.json").write_text("[]")
    lines = MUSIQUE_TRAIN.read_bytes().splitlines(keepends=True)[:3]
    (root / "cut.jsonl").write_bytes(b"".join(lines)[:-300])  # the last line cut short
    (root / "dup-corpus.jsonl").write_text('{"id": "1", "contents": "A\\nalpha"}\n{"id": "2", "contents": "B\\nbeta"}\n'
                                           '{"id": "1", "contents": "C\\ngamma"}\n')
    return {"MAX": max_dir, "EVAL": eval_dir, "IDX": root / "idx", "PART": root / "part", "RUN": root / "run",
            "TRAIN": MUSIQUE_TRAIN, "FILE": root / "f.txt", "EMPTY": root / "empty.jsonl",
            "JUNK": root / "junk.jsonl", "TRUNC": root / "trunc.json", "DIR": root / "dir",
            "MISSING": root / "missing", "HOTPOT": HOTPOT_TRAIN, "HPSTRING": root / "hotpot-string.json",
            "EMPTYLIST": root / "empty-list.json", "CUTJSONL": root / "cut.jsonl",
            "DUPCORPUS": root / "dup-corpus.jsonl", **_dense_paths(root)}


def _dense_paths(root: Path) -> dict[str, Path]:
    """The dense cases' inputs (placeholders above), or paths that are not there without the dense extra (those
    cases then fail as their missing inputs do)."""
    import shutil

    out = {k: root / "no-dense" / k for k in ("ENC", "CORPUS", "FLAT", "NANIDX", "L1IDX", "BADENC", "MOVED")}
    try:
        import faiss
        import numpy as np
        from support.tiny_model import build_tiny_encoder
    except ImportError:
        return out
    from conftest import SHARED_DATA

    enc = build_tiny_encoder(root / "enc", SHARED_DATA)
    corpus = root / "corpus.jsonl"
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:2]]
    paragraphs = [p for r in lines for p in r["paragraphs"]][:20]
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": f"{p['title']}\n{p['paragraph_text']}"}) + "\n"
                              for i, p in enumerate(paragraphs)))
    x = np.random.default_rng(0).standard_normal((len(paragraphs), 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for name, index, vecs in (("flat", faiss.IndexFlatIP(32), x), ("l1", faiss.IndexFlat(32, faiss.METRIC_L1), x),
                              ("nan", faiss.IndexFlatIP(32), np.where(np.eye(len(x), 32, 3) > 0, np.nan, x))):
        index.add(np.ascontiguousarray(vecs, dtype=np.float32))
        faiss.write_index(index, str(root / f"{name}.index"))
    shutil.copytree(enc, root / "badenc")
    (root / "badenc" / "config.json").write_text("{")
    shutil.copytree(enc, root / "enc-moving")
    r = run("index", "--kind", "dense", "--encoder", root / "enc-moving", "--import-faiss", root / "flat.index",
            "--corpus", corpus, "-o", root / "moved", "--device", "cpu", "--no-progress")
    assert r.exit_code == 0, r.output
    (root / "enc-moving").rename(root / "enc-moved")
    return {"ENC": enc, "CORPUS": corpus, "FLAT": root / "flat.index", "NANIDX": root / "nan.index",
            "L1IDX": root / "l1.index", "BADENC": root / "badenc", "MOVED": root / "moved"}


def _state(paths: dict[str, Path]) -> dict[str, tuple[int, int]]:
    """Every input file's size and modification time (a change to any input shows)."""
    out = {}
    for p in map(Path, paths.values()):
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file() and not f.name.endswith(".lock"):
                st = f.stat()
                out[str(f)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name, args", CORPUS, ids=[name for name, _ in CORPUS])
def test_bad_input(name, args, corpus_paths, tmp_path):
    """Each case: exit 2 (a usage error) or 1 (a failure while running), one error line and no traceback, no
    output folder left, every input unchanged."""
    out = tmp_path / "out"
    before = _state(corpus_paths)
    r = run(*[a.format(OUT=out, **corpus_paths) for a in args])
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit), (r.output, r.exception)
    if any(c in r.output for c in CLICK):  # refused by click while parsing: its own one-message box
        assert r.exit_code == 2, r.output
        assert r.output.count("Error") == 1, r.output
    else:
        path_valued = "{" in name
        code = 1 if name in EXIT_1 else 2 if name in EXIT_2 else 1 if path_valued else 2
        line = one_error(r, code=code)
        assert len(line) < 600, line
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert _state(corpus_paths) == before
