"""Turning a model reply into one environment action, with AgentGym's rules.

A reply must contain exactly one line that starts with ``Action:`` (case-insensitive, leading
spaces allowed). The action is the rest of that line, or the next non-empty line when the label
stands alone (AgentGym's ``Action:\\n<action>`` layout). Zero or several such lines, or an action
that is empty once sanitised, give a corrective observation instead, and the environment is not
called for that turn.

An env family with its own reply grammar (the search env's ``<search>``/``<answer>`` tags) parses
replies with it instead (``EnvFamily.parse_reply``).

Sanitising follows the env family's registry entry (``agentgym.envs.families``): BabyAI and
TextCraft actions keep only letters, digits, commas and spaces, are lower-cased and have their
whitespace collapsed (AgentGym's TextCraft client strips the same characters; its "look" becomes
"inventory"). Other environments only get surrounding quotes and backticks removed and whitespace
collapsed, because their actions use brackets and symbols (WebShop's ``search[...]``, SciWorld's
object names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym.envs.families import family

_ACTION_LINE = re.compile(
    r"^[ \t]*\**[ \t]*action[ \t]*\**[ \t]*:[ \t]*\**(.*)$", re.IGNORECASE | re.MULTILINE
)
_STRICT_DROP = re.compile(r"[^a-z0-9, ]+")
_SPACES = re.compile(r"\s+")

NO_ACTION_MESSAGE = (
    "Your reply has no 'Action:' line, so nothing happened. Reply with 'Thought: ...' and then "
    "one line 'Action: <action>'."
)
MANY_ACTIONS_MESSAGE = (
    "Your reply has more than one 'Action:' line, so nothing happened. Give exactly one action "
    "per turn."
)
EMPTY_ACTION_MESSAGE = (
    "The action after 'Action:' is empty, so nothing happened. Write the action on the Action line."
)


@dataclass(frozen=True)
class ParsedAction:
    """The outcome of parsing one reply: an action to send, or a corrective observation."""

    action: str | None
    """The sanitised action for the environment; None when the reply was rejected."""
    error: str | None = None
    """The corrective observation to show the model instead of calling the environment."""

    @property
    def ok(self) -> bool:
        """True when `action` should be sent to the environment."""
        return self.action is not None


def parse_action(reply: str, env: str) -> ParsedAction:
    """Extract the single action of `reply` for environment `env` (see the module docstring;
    a family with its own grammar, such as search's tags, parses the reply itself)."""
    own_grammar = family(env).parse_reply
    if own_grammar is not None:
        action, error = own_grammar(reply)
        return ParsedAction(action, error)
    matches = list(_ACTION_LINE.finditer(reply))
    if not matches:
        return ParsedAction(None, NO_ACTION_MESSAGE)
    if len(matches) > 1:
        return ParsedAction(None, MANY_ACTIONS_MESSAGE)
    raw = matches[0].group(1).strip() or _next_nonempty_line(reply, matches[0].end())
    action = sanitize_action(raw, env)
    if not action:
        return ParsedAction(None, EMPTY_ACTION_MESSAGE)
    return ParsedAction(action)


def sanitize_action(raw: str, env: str) -> str:
    """Normalise an action string the way environment `env` expects it."""
    entry = family(env)
    if entry.strict_actions:
        text = _SPACES.sub(" ", _STRICT_DROP.sub("", raw.lower())).strip()
        return entry.aliases.get(text, text)
    return _SPACES.sub(" ", raw.strip().strip("`'\"").strip()).strip()


def _next_nonempty_line(text: str, start: int) -> str:
    for line in text[start:].splitlines():
        if line.strip():
            return line.strip()
    return ""
