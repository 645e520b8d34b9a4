"""Token-in/token-out chat turns.

The conversation is kept as the exact token stream the model sees. Generated tokens are appended
as sampled (loss mask 1, behaviour log-probs); every environment turn is appended as the chat
template's *delta*: the tokens the template puts between the end of the model's reply and the
start of the next reply (closing the assistant message, the user message with the observation,
the generation prompt). History is never re-tokenized, so the learner trains on the very tokens
that were sampled, even when re-tokenizing their text would give different ids.

The delta is rendered from a short fixed conversation once per environment turn; for templates
whose rendering of earlier messages does not depend on later ones (ChatML and most chat templates)
the stream equals ``apply_chat_template`` over the whole conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.agent.prompts import initial_messages
from agentgym.agent.stops import cut_text, tokens_to_keep

_PROBE_SYSTEM = "\x00system\x00"
_PROBE_USER = "\x00user\x00"
_PROBE_REPLY = "\x00reply\x00"


@dataclass
class TokenTrace:
    """The token stream of one episode with its per-token training fields."""

    tokens: list[int] = field(default_factory=list)
    """Token ids of the whole conversation."""
    logprobs: list[float] = field(default_factory=list)
    """Behaviour log-prob per token (0 for prompt and environment tokens)."""
    loss_mask: list[int] = field(default_factory=list)
    """1 for tokens the policy generated, 0 otherwise."""
    turn_versions: list[int] = field(default_factory=list)
    """Policy version of each generated turn."""
    prompt_len: int = 0
    """Tokens before the first generated token."""

    def extend_context(self, tokens: Sequence[int]) -> None:
        """Append tokens the policy did not generate (mask 0)."""
        if not self.turn_versions:
            self.prompt_len += len(tokens)
        self.tokens.extend(tokens)
        self.logprobs.extend([0.0] * len(tokens))
        self.loss_mask.extend([0] * len(tokens))

    def extend_generated(
        self, tokens: Sequence[int], logprobs: Sequence[float], version: int
    ) -> None:
        """Append one sampled turn exactly as sampled (mask 1)."""
        if len(tokens) != len(logprobs):
            raise ValueError(f"{len(tokens)} tokens but {len(logprobs)} logprobs")
        self.tokens.extend(tokens)
        self.logprobs.extend(float(x) for x in logprobs)
        self.loss_mask.extend([1] * len(tokens))
        self.turn_versions.append(int(version))

    @property
    def num_turns(self) -> int:
        """Number of generated turns."""
        return len(self.turn_versions)

    def __len__(self) -> int:
        return len(self.tokens)

    def trajectory_fields(self) -> dict[str, Any]:
        """The token fields of `agentgym.transport.wire.Trajectory`, as numpy arrays."""
        return {
            "tokens": np.asarray(self.tokens, dtype=np.int32),
            "logprobs": np.asarray(self.logprobs, dtype=np.float32),
            "loss_mask": np.asarray(self.loss_mask, dtype=np.uint8),
            "turn_versions": np.asarray(self.turn_versions, dtype=np.int32),
            "prompt_len": self.prompt_len,
            "num_turns": self.num_turns,
        }


class ChatCodec:
    """Turns chat messages into token ids with a tokenizer's chat template, turn by turn."""

    def __init__(self, tokenizer: Any) -> None:
        """Probe the template of `tokenizer` once (what closes an assistant message)."""
        self.tokenizer = tokenizer
        self._base = [
            {"role": "system", "content": _PROBE_SYSTEM},
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_REPLY},
        ]
        self._base_text = self.render(self._base, add_generation_prompt=False)
        end = self._base_text.rfind(_PROBE_REPLY)
        if end < 0:
            raise ValueError("the chat template does not render assistant content verbatim")
        self.reply_suffix = self._base_text[end + len(_PROBE_REPLY) :]
        """Text the template puts after an assistant message's content (ChatML: <|im_end|>\\n)."""

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        """The template's text for `messages`."""
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of template text (special tokens recognised, none added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """Opening prompt: `messages` rendered with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_delta(self, observation: str, last_token: int | None) -> list[int]:
        """Tokens between the end of a reply and the next reply, for a user turn `observation`.

        last_token: the reply's final sampled token. When it is the template's own closing
        token (ChatML's <|im_end|>) it is not repeated; otherwise (a reply cut by the token
        budget) the full closing text is inserted so the stream stays well formed.
        """
        with_user = self._base + [{"role": "user", "content": observation}]
        text = self.render(with_user, add_generation_prompt=True)
        if not text.startswith(self._base_text):
            raise ValueError("the chat template re-renders earlier messages; no delta exists")
        closing = self.reply_suffix
        if last_token is not None:
            last_text = self.tokenizer.convert_ids_to_tokens(last_token)
            if last_token in self.tokenizer.all_special_ids and closing.startswith(last_text):
                closing = closing[len(last_text) :]
        return self.encode(closing + text[len(self._base_text) :])

    def decode_reply(self, tokens: Sequence[int]) -> str:
        """Text of generated tokens without special tokens (what the action parser reads)."""
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


class Conversation:
    """One episode's chat as messages (for people) and as a `TokenTrace` (for training)."""

    def __init__(self, codec: ChatCodec, messages: list[dict[str, str]]) -> None:
        """Start from opening `messages` (usually `initial_messages(env, first_observation)`)."""
        self.codec = codec
        self.messages = [dict(m) for m in messages]
        self.trace = TokenTrace()
        self.trace.extend_context(codec.prompt_tokens(self.messages))
        self._awaiting_reply = True

    @classmethod
    def start(cls, codec: ChatCodec, env: str, observation: str) -> Conversation:
        """A conversation opened with env's instruction and its first observation."""
        return cls(codec, initial_messages(env, observation))

    @property
    def tokens(self) -> list[int]:
        """The whole stream so far: the next prompt for the engine."""
        return self.trace.tokens

    def add_reply(
        self,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        version: int,
        stop: Sequence[str] = (),
    ) -> str:
        """Append a sampled reply, cut after its first stop string (``agentgym.agent.stops``:
        the tokens after the one that completes it are dropped); returns its text for the
        action parser."""
        if not self._awaiting_reply:
            raise RuntimeError("add_reply twice without an observation in between")
        if stop:
            keep = tokens_to_keep(self.codec.decode_reply, token_ids, stop)
            token_ids, logprobs = token_ids[:keep], logprobs[:keep]
        self.trace.extend_generated(token_ids, logprobs, version)
        text = cut_text(self.codec.decode_reply(token_ids), stop)
        self.messages.append({"role": "assistant", "content": text})
        self._last_token = token_ids[-1] if token_ids else None
        self._awaiting_reply = False
        return text

    def add_observation(self, observation: str) -> None:
        """Append an environment turn (an observation or a corrective message) as template delta."""
        if self._awaiting_reply:
            raise RuntimeError("add_observation before the model replied")
        self.trace.extend_context(self.codec.observation_delta(observation, self._last_token))
        self.messages.append({"role": "user", "content": observation})
        self._awaiting_reply = True
