"""Command-line entry points (console scripts declared in ``pyproject.toml``)."""
