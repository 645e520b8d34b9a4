"""agentgym: high-throughput multi-turn RL for LLM agents.

Subpackages: ``agentgym.envs`` (the Rust env multiplexer), ``agentgym.transport``,
``agentgym.learner``, ``agentgym.engines``, ``agentgym.agent``, ``agentgym.actor``.
Importing ``agentgym`` itself loads nothing heavy (no torch).
"""

__version__ = "0.1.0"
