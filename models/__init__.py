"""Package data of memcore's models: one folder per model with ``manifest.json``.

Each manifest records the model file's sha256 and size, its dim, max_seq_len, pooling,
normalisation and licence; the folder also holds the tokenizer and a NOTICE. Model weights are
not shipped here (they come from their own packages or a path).
"""

from __future__ import annotations

import json
from importlib import resources

__all__ = ["manifest", "resource"]


def resource(model: str, filename: str):
    """A file of a model's folder, as an :mod:`importlib.resources` Traversable.

    Parameters
    ----------
    model : str
        Folder name, e.g. ``"all-minilm-l6-v2"``.
    filename : str
        E.g. ``"tokenizer.json"``.

    Examples
    --------
    >>> resource("all-minilm-l6-v2", "tokenizer.json").is_file()
    True
    """
    return resources.files(__name__).joinpath(model, filename)


def manifest(model: str) -> dict:
    """The parsed ``manifest.json`` of a model folder (a fresh dict on every call).

    Raises
    ------
    FileNotFoundError
        If the folder or its manifest does not exist.

    Examples
    --------
    >>> manifest("all-minilm-l6-v2")["dim"]
    384
    """
    return json.loads(resource(model, "manifest.json").read_text(encoding="utf-8"))
