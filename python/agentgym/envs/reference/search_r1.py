"""Answer scoring as Search-R1 publishes it (``verl/utils/reward_score/qa_em.py``, after SQuAD's
evaluation script), and how its rollout reads a reply (``search_r1/llm_agent/generation.py``),
written from those definitions as the oracle for the native search env
(``tests/envs/test_search_rewards.py``).

- a reply: cut after its first ``</search>``, else its first ``</answer>``; the action is the
  first ``<(search|answer)>(.*?)</\1>`` of what is left (across lines), its content stripped;

- normalise: lower-case, drop ``string.punctuation``, replace ``\\b(a|an|the)\\b`` by a space,
  collapse whitespace with ``str.split``;
- exact match: the normalised answer equals a normalised gold answer;
- substring match: a normalised gold answer occurs in the normalised answer;
- F1: SQuAD's token F1, best over the gold answers, where yes/no/noanswer only match themselves.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)


def reply_action(reply: str) -> tuple[str, str] | None:
    """The (tag, stripped content) Search-R1 reads from ``reply``, or None for an invalid one."""
    for close in ("</search>", "</answer>"):
        if close in reply:
            reply = reply.split(close)[0] + close
            break
    match = _TAG.search(reply)
    return None if match is None else (match.group(1), match.group(2).strip())


def normalize_answer(text: str) -> str:
    """Search-R1's ``normalize_answer``."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, gold: list[str]) -> float:
    """1.0 when the normalised answer equals a normalised gold answer."""
    a = normalize_answer(answer)
    return float(any(normalize_answer(g) == a for g in gold))


def substring_match(answer: str, gold: list[str]) -> float:
    """1.0 when a normalised gold answer occurs in the normalised answer."""
    a = normalize_answer(answer)
    return float(any(normalize_answer(g) in a for g in gold))


def token_f1(answer: str, gold: list[str]) -> float:
    """The best SQuAD token F1 of the answer over the gold answers."""
    return max((_f1(normalize_answer(answer), normalize_answer(g)) for g in gold), default=0.0)


def _f1(prediction: str, truth: str) -> float:
    special = ("yes", "no", "noanswer")
    if (prediction in special or truth in special) and prediction != truth:
        return 0.0
    pred, true = prediction.split(), truth.split()
    same = sum((Counter(pred) & Counter(true)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return 2 * precision * recall / (precision + recall)
