"""Agent turns: per-env instructions, action parsing, token-in/token-out conversations; policies
without a model (``baselines``) and expert demos as chat records (``demos``)."""

from agentgym.agent.parsing import ParsedAction, parse_action, sanitize_action
from agentgym.agent.prompts import initial_messages, instruction_for
from agentgym.agent.turns import ChatCodec, Conversation, TokenTrace

__all__ = [
    "ChatCodec",
    "Conversation",
    "ParsedAction",
    "TokenTrace",
    "initial_messages",
    "instruction_for",
    "parse_action",
    "sanitize_action",
]
