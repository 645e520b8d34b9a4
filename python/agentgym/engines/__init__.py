"""Inference engines: the `Engine` protocol and its transformers and vLLM backends.

Backends import torch/transformers/vllm lazily: ``from agentgym.engines.hf import HFEngine``.
"""

from agentgym.engines.base import Engine, FinishReason, Generation, SamplingParams

__all__ = ["Engine", "FinishReason", "Generation", "SamplingParams"]
