"""Cutting a sampled reply after its first stop string (``EnvFamily.stop``).

The cut is made on tokens, so the trajectory keeps exactly the tokens that were sampled up to
the stop: the reply keeps its tokens up to the one whose text completes the first stop string
(that token included) and drops the rest with their log-probs. The text the env sees ends with
the stop string itself; characters that the last kept token carries beyond it (a token such as
``</answer>\\n``) stay in the trajectory but not in the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def first_stop_end(text: str, stops: Sequence[str]) -> int | None:
    """The end (exclusive) of the stop string that ends first in ``text``, or None."""
    ends = [at + len(stop) for stop in stops if stop and (at := text.find(stop)) >= 0]
    return min(ends, default=None)


def tokens_to_keep(
    decode: Callable[[Sequence[int]], str], token_ids: Sequence[int], stops: Sequence[str]
) -> int:
    """How many leading tokens of a reply to keep: the fewest whose text holds a stop string,
    or all of them when none does (``decode``: token ids -> text). Decodes O(log n) prefixes;
    an engine that stopped at the string needs two."""
    n = len(token_ids)
    if first_stop_end(decode(token_ids), stops) is None:
        return n
    if n == 1 or first_stop_end(decode(token_ids[: n - 1]), stops) is None:
        return n
    low, high = 0, n - 1  # the text of `high` tokens holds a stop; that of `low` tokens does not
    while high - low > 1:
        mid = (low + high) // 2
        if first_stop_end(decode(token_ids[:mid]), stops) is None:
            low = mid
        else:
            high = mid
    return high


def cut_text(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the end of its first stop string (all of it when it holds none)."""
    end = first_stop_end(text, stops)
    return text if end is None else text[:end]
