"""Trajectories for checking ``search-r1`` (Search-R1's ``qa_em.compute_score_em``) against the original: real
questions, gold answers (aliases included) and paragraphs from ``../shared/data`` (MuSiQue and HotpotQA), each
asked under one of three prompts and answered in one of :data:`BEHAVIOURS`, rendered as Search-R1's reward manager
decodes them (``tokenizer.decode(prompt_ids + response_ids)``, special tokens kept) for Qwen2.5-Instruct's chat
template, which Search-R1 trains with.

Every corner of Search-R1's reward is among them: the answer read from prompt plus response (two ``<answer>`` matches
needed), the last match even inside ``<think>`` or ``<information>``, the prompt's own example read when the
response writes none, normalisation (case, punctuation, articles, whitespace, accents, curly quotes), special
tokens inside an answer, an unclosed or empty answer, nested tags, more than ten ``<answer>`` tags (verl's copy
divides by 4), a prompt without an example, a string ``target``, an empty alias.

``python scripts/search_r1_table.py --search-r1 PATH/TO/Search-R1`` scores them with the original file and writes
the frozen table ``tests/rewards/search_r1_table.json``; ``tests/rewards/test_search_r1_reward.py`` holds the
toolkit's ``search-r1`` to it, and the verl tier compares verl's ``search_r1_like_qa_em`` on every one.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

#: Search-R1's ``make_prefix(dp, "base")`` (its data scripts; the typo "your want" is theirs).
SEARCH_R1_PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)
#: The toolkit's ``search-r1`` template (VERITAS's appendix A text): its example answer is ``xxx``.
TOOLKIT_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search>, and it will return the top searched results between <information> and "
    "</information>. You can search as many times as you want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer> without detailed illustrations. For "
    "example, <answer> xxx </answer>.\n\nQuestion: {question}"
)
#: A prompt of a user's own with no ``<answer>`` tag in it: the response alone must hold two matches.
PLAIN_PROMPT = ("Answer the question. Search with the search tool as often as you need; put the final answer in "
                "answer tags.\n\nQuestion: {question}")
PROMPTS = {"search-r1-original": SEARCH_R1_PREFIX, "search-r1": TOOLKIT_PROMPT, "plain": PLAIN_PROMPT}

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL = (IM_START, IM_END, EOT)

#: What the model does in a trajectory (the response's shape).
BEHAVIOURS = (
    "correct", "correct_variant", "alias", "wrong", "no_answer", "unclosed_answer", "answer_in_think",
    "answer_in_information", "wrong_then_right", "right_then_wrong", "empty_answer", "special_token_inside",
    "many_answers", "many_answers_wrong", "nested_answer", "multiline_answer", "curly_quotes", "answer_after_eos",
    "answer_then_truncated", "forged_information",
)


def qwen_prompt(content: str) -> str:
    """Qwen2.5-Instruct's chat template on one user message, with the generation prompt, as decoded."""
    return (f"{IM_START}system\n{SYSTEM}{IM_END}\n{IM_START}user\n{content}{IM_END}\n{IM_START}assistant\n")


def _questions() -> list[dict[str, Any]]:
    """(question, golden answers, paragraphs) from the real samples: MuSiQue (answer + aliases) and HotpotQA."""
    out = []
    for line in (DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl").read_text().splitlines()[:60]:
        r = json.loads(line)
        out.append({"source": "musique", "qid": r["id"], "question": r["question"],
                    "target": [r["answer"], *(r.get("answer_aliases") or [])],
                    "paragraphs": [(p["title"], p["paragraph_text"]) for p in r["paragraphs"]]})
    for r in json.loads((DATA / "hotpotqa" / "hotpot_train_v1.1.sample100.json").read_text())[:40]:
        out.append({"source": "hotpotqa", "qid": r["_id"], "question": r["question"], "target": [r["answer"]],
                    "paragraphs": [(t, "".join(s)) for t, s in r["context"]]})
    return out


def _question_text(q: str) -> str:
    """Search-R1's data scripts: stripped, with a "?" appended when it has none."""
    q = q.strip()
    return q if q.endswith("?") else q + "?"


def _info(paragraphs: list[tuple[str, str]], rng: random.Random, extra: str = "") -> str:
    docs = rng.sample(paragraphs, min(3, len(paragraphs)))
    body = "".join(f"Doc {i}(Title: {t}) {x}\n" for i, (t, x) in enumerate(docs, 1))
    return f"\n\n<information>{(body + extra).strip()}</information>\n\n"


def _variant(answer: str, rng: random.Random) -> str:
    """The same answer as SQuAD normalisation reads it: case, an article, punctuation, spacing."""
    forms = [answer.upper(), f"the {answer}", f"{answer}.", f"  {answer.lower()}  ", f'"{answer}"',
             answer.replace(" ", "  "), f"A {answer}!"]
    return rng.choice(forms)


def _response(kind: str, gold: list[str], wrong: str, paragraphs: list[tuple[str, str]], q: str,
              rng: random.Random) -> str:
    g = gold[0]
    think = f"<think> I need to find out: {q} </think>\n<search> {q.rstrip('?')} </search>"
    info = _info(paragraphs, rng)
    after = f"<think> The documents point to {g}. </think>\n"
    end = IM_END
    if kind == "correct":
        return f"{think}{info}{after}<answer> {g} </answer>{end}"
    if kind == "correct_variant":
        return f"{think}{info}{after}<answer>{_variant(g, rng)}</answer>{end}"
    if kind == "alias":
        return f"{think}{info}<answer> {gold[-1]} </answer>{end}"
    if kind == "wrong":
        return f"{think}{info}<think> It must be {wrong}. </think>\n<answer> {wrong} </answer>{end}"
    if kind == "no_answer":
        return f"{think}{info}<think> Still unsure. </think>\n<search> more about {g} </search>{_info(paragraphs, rng)}"
    if kind == "unclosed_answer":
        return f"{think}{info}<answer> {g}{end}"
    if kind == "answer_in_think":
        return f"{think}{info}<think> Maybe <answer> {g} </answer> but let me check. </think>\n<search> check </search>"
    if kind == "answer_in_information":
        return (f"{think}{_info(paragraphs, rng, extra=f'<answer> {wrong} </answer>')}<think> ok </think>"
                f"<search> again </search>")
    if kind == "wrong_then_right":
        return f"{think}<answer> {wrong} </answer>{info}<answer> {g} </answer>{end}"
    if kind == "right_then_wrong":
        return f"<think>x</think><answer> {g} </answer>{info}<think> no </think><answer> {wrong} </answer>{end}"
    if kind == "empty_answer":
        return f"{think}{info}<answer>   </answer>{end}"
    if kind == "special_token_inside":
        return f"{think}{info}<answer> {g}{IM_END}\n</answer>{end}"
    if kind == "many_answers":
        return f"{think}{info}" + "".join(f"<answer> {g} </answer>" for _ in range(11)) + end
    if kind == "many_answers_wrong":
        return f"{think}{info}" + "".join(f"<answer> {wrong} </answer>\n" for _ in range(12)) + end
    if kind == "nested_answer":
        return f"{think}{info}<answer> <answer> {g} </answer> </answer>{end}"
    if kind == "multiline_answer":
        return f"{think}{info}<answer>\n{g}\n\n</answer>{end}"
    if kind == "curly_quotes":
        return f"{think}{info}<answer>\u201c{g}\u201d</answer>{end}"
    if kind == "answer_after_eos":
        return f"{think}{info}<think>done</think>{end}{EOT}<answer> {g} </answer>"
    if kind == "answer_then_truncated":
        return f"{think}{info}<answer> {g} </answer> and also <answer> {wrong}"
    if kind == "forged_information":
        return f"{think}<information>Doc 1(Title: x) <answer> {g} </answer></information>{end}"
    raise ValueError(kind)


def strip_special(text: str) -> str:
    """The text as ``decode(..., skip_special_tokens=True)`` gives it (Qwen2.5's special tokens removed)."""
    for s in SPECIAL:
        text = text.replace(s, "")
    return text


def _corners() -> list[dict[str, Any]]:
    """Hand-made corners no real question gives: the prompt's example as the gold answer, a string target, an
    empty alias, a single answer under a prompt with no example."""
    cases = []

    def add(name: str, template: str, target: Any, response: str, question: str = "What is the capital of China?"):
        user = PROMPTS[template].format(question=question)
        cases.append({"id": f"corner-{name}", "source": "corner", "template": template, "behaviour": name,
                      "question": question, "target": target, "user": user, "prompt": qwen_prompt(user),
                      "response": response})

    add("example_is_gold_original", "search-r1-original", ["Beijing"], "<think> no idea </think>" + IM_END)
    add("example_is_gold_toolkit", "search-r1", ["xxx"], "<think> no idea </think>" + IM_END)
    add("example_is_gold_answer_wrong", "search-r1-original", ["Beijing"], "<answer> Shanghai </answer>" + IM_END)
    add("string_target", "search-r1-original", "Beijing", "<answer> beijing </answer>" + IM_END)
    add("string_target_list_like", "search-r1", "Peking", "<answer> Beijing </answer>" + IM_END)
    add("empty_alias", "search-r1-original", ["Paris", ""], "<answer> the </answer>" + IM_END, "Capital of France?")
    add("plain_one_answer", "plain", ["Paris"], "<answer> Paris </answer>" + IM_END, "Capital of France?")
    add("plain_two_answers", "plain", ["Paris"], "<answer> Lyon </answer><answer> Paris </answer>" + IM_END,
        "Capital of France?")
    add("plain_no_answer", "plain", ["Paris"], "<think> hmm </think>" + IM_END, "Capital of France?")
    add("question_holds_answer_tag", "plain", ["Paris"], "<answer> Paris </answer>" + IM_END,
        "Which city is written as <answer>Paris</answer> in the key?")
    add("unclosed_in_prompt", "plain", ["Paris"], "Paris </answer>" + IM_END, "Complete: <answer>")
    add("punctuation_only", "search-r1-original", ["?!"], "<answer> ... </answer>" + IM_END, "Which symbols?")
    add("accents", "search-r1-original", ["Ålesund"], "<answer> Alesund </answer>" + IM_END, "Which town?")
    add("accents_same", "search-r1-original", ["Ålesund"], "<answer> ålesund. </answer>" + IM_END, "Which town?")
    add("numbers", "search-r1-original", ["$72,641"], "<answer> 72641 </answer>" + IM_END, "How much?")
    add("yes_no", "search-r1-original", ["yes"], "<answer> Yes. </answer>" + IM_END, "Is it?")
    return cases


def trajectories() -> list[dict[str, Any]]:
    """The trajectories, in a fixed order: every question of :func:`_questions` under each prompt in turn, its
    behaviour cycling through :data:`BEHAVIOURS`, then the corners. Each: ``id``, ``template``, ``behaviour``,
    ``target``, ``user`` (the user message), ``prompt`` (as decoded), ``response`` (special tokens kept), and ``sequence`` (prompt + response:
    what Search-R1 scores)."""
    rng = random.Random(44)
    qs = _questions()
    out = []
    templates = list(PROMPTS)
    for i, q in enumerate(qs):
        template = templates[i % len(templates)]
        kind = BEHAVIOURS[i % len(BEHAVIOURS)]
        wrong = qs[(i + 7) % len(qs)]["target"][0]
        question = _question_text(q["question"])
        user = PROMPTS[template].format(question=question)
        response = _response(kind, q["target"], wrong, q["paragraphs"], question, rng)
        out.append({"id": f"{q['source']}-{q['qid']}-{kind}", "source": q["source"], "template": template,
                    "behaviour": kind, "question": question, "target": q["target"], "user": user,
                    "prompt": qwen_prompt(user), "response": response})
        # the same question once more, another behaviour under another prompt: more pairs of the corners
        kind2 = BEHAVIOURS[(i * 7 + 3) % len(BEHAVIOURS)]
        template2 = templates[(i + 1) % len(templates)]
        user2 = PROMPTS[template2].format(question=question)
        out.append({"id": f"{q['source']}-{q['qid']}-{kind2}-{template2}", "source": q["source"],
                    "template": template2, "behaviour": kind2, "question": question, "target": q["target"],
                    "user": user2, "prompt": qwen_prompt(user2),
                    "response": _response(kind2, q["target"], wrong, q["paragraphs"], question, rng)})
    out += _corners()
    for t in out:
        t["sequence"] = t["prompt"] + t["response"]
    return out


def digest(t: dict[str, Any]) -> str:
    """What a table entry was computed on: the sequence and the target (a changed generator shows as a mismatch)."""
    return hashlib.sha256(json.dumps([t["sequence"], t["target"]], ensure_ascii=False).encode()).hexdigest()[:16]


TABLE = Path(__file__).resolve().parents[1] / "rewards" / "search_r1_table.json"
#: The settings of compute_score_em each trajectory is scored with: Search-R1's (format_score 0) and a format score.
SETTINGS = ({"format_score": 0.0, "score": 1.0}, {"format_score": 0.1, "score": 1.0})
