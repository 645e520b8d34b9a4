"""agentgym's envs inside other RL stacks, one module per stack, each an optional extra:

- ``agentgym.integrations.openenv`` (``pip install 'agentgym-rs[openenv]'``): an OpenEnv
  ``Environment`` per native env and ``agentgym openenv-serve``, every WebSocket session on one
  pool, their calls gathered into batched steps;
- ``agentgym.integrations.skyrl`` (``[skyrl]``): a SkyRL-Gym ``BaseTextEnv`` per env,
  registered by one call;
- ``agentgym.integrations.trl`` (``[trl]``): an ``environment_factory`` per env family with the
  family's actions as tools, and a ``rollout_func`` that runs agentgym's own episodes for
  ``GRPOTrainer`` with every rollout stepped in one batch;
- ``agentgym.integrations.verl`` (``[verl]``, in a virtual environment of its own: verl pins
  transformers below agentgym's): a verl ``AgentLoopBase`` running agentgym's Thought/Action
  episodes token-in/token-out;
- ``agentgym.integrations.tasks``: the dataset rows each stack reads (``agentgym export-tasks``).

Nothing in agentgym's core imports these modules; each imports its stack on import and says
which install command is missing when it is absent (``docs/integrations/``).
"""
