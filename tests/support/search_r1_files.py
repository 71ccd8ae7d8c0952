"""Files in the layouts Search-R1 users have on disk, written the way Search-R1's own scripts write them (read
from PeterGriffinJin/Search-R1 at a14dc3a; the steps restated here, none of its code copied):

* ``write_search_r1_parquet``: ``scripts/data_process/nq_search.py`` / ``qa_search_train_merge.py``: FlashRAG's
  question rows (``id``, ``question``, ``golden_answers``) mapped with ``datasets.Dataset.map(fn,
  with_indices=True)``, which keeps the original columns and adds ``data_source``, ``prompt`` (one user message,
  ``make_prefix``'s text), ``ability`` ("fact-reasoning"), ``reward_model`` (``{"style": "rule",
  "ground_truth": {"target": golden_answers}}``) and ``extra_info`` (``{"split", "index"}``), the question
  stripped with a "?" appended; then ``Dataset.to_parquet``. A merged file concatenates several sets.
* ``write_search_r1_corpus``: wiki-18's layout, ``{"id": "0", "contents": "\\"Title\\"\\ntext"}`` per line.
* ``search_r1_documents``: what Search-R1's ``retrieval_server.py`` returns as a hit's ``document`` for a corpus
  line: the line's JSON object as it is (its dense path: ``datasets.load_dataset("json")`` row ``corpus[i]``).
* ``search_r1_passages_string``: its client's ``_passages2string`` (``Doc {i}(Title: {first line}) {rest}``).

The questions and answers come from the real samples in ``../shared/data``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

#: ``make_prefix(dp, template_type="base")`` of Search-R1's data scripts (the typo "your want" is theirs).
PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)


def flashrag_rows(source: str, n: int) -> list[dict[str, Any]]:
    """FlashRAG-layout question rows (``id``, ``question``, ``golden_answers``) from a real sample: HotpotQA's
    train file or MuSiQue's train file (answer + aliases)."""
    if source == "hotpotqa":
        recs = json.loads((DATA / "hotpotqa" / "hotpot_train_v1.1.sample100.json").read_text())[:n]
        return [{"id": f"train_{i}", "question": r["question"], "golden_answers": [r["answer"]]}
                for i, r in enumerate(recs)]
    if source == "musique":
        lines = (DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl").read_text().splitlines()[:n]
        recs = [json.loads(x) for x in lines]
        return [{"id": r["id"], "question": r["question"],
                 "golden_answers": [r["answer"], *(r.get("answer_aliases") or [])]} for r in recs]
    raise ValueError(source)


def write_search_r1_parquet(path: Path, sets: Sequence[tuple[str, int]], split: str = "train") -> Path:
    """A Search-R1 data file: for each (data_source, n), the first n questions of that real sample, mapped as
    Search-R1's data script maps FlashRAG's rows, the sets concatenated in order (its merge script)."""
    import datasets

    parts = []
    for source, n in sets:
        def fn(example: dict[str, Any], idx: int, source: str = source) -> dict[str, Any]:
            q = example["question"].strip()
            if q[-1] != "?":
                q += "?"
            example["question"] = q
            return {"data_source": source, "prompt": [{"role": "user", "content": PREFIX.format(question=q)}],
                    "ability": "fact-reasoning",
                    "reward_model": {"style": "rule", "ground_truth": {"target": example["golden_answers"]}},
                    "extra_info": {"split": split, "index": idx}}
        parts.append(datasets.Dataset.from_list(flashrag_rows(source, n)).map(fn, with_indices=True))
    ds = datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(path))
    return path


def write_search_r1_corpus(path: Path, passages: Sequence[tuple[str, str]], *, first_id: int = 0,
                           id_format: str = "{}") -> Path:
    """A corpus in wiki-18's layout: ``{"id": "<n>", "contents": "\\"<title>\\"\\n<text>"}`` per line."""
    with open(path, "w", encoding="utf-8") as f:
        for i, (title, text) in enumerate(passages, first_id):
            f.write(json.dumps({"id": id_format.format(i), "contents": f'"{title}"\n{text}'}) + "\n")
    return path


def search_r1_documents(path: Path) -> list[dict[str, Any]]:
    """What Search-R1's retrieval server returns as the ``document`` of each corpus line (its row, as read)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def search_r1_passages_string(hits: Sequence[dict[str, Any]]) -> str:
    """Search-R1's client (``_passages2string``) on one query's hits (``{"document": {...}, "score"}``): title = the
    first line of the document's ``contents`` as it is, text = the rest."""
    out = ""
    for i, doc in enumerate(hits):
        content = doc["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        out += f"Doc {i + 1}(Title: {title}) {text}\n"
    return out
