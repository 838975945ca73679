"""The evaluation data folder: what it holds, where it comes from, and how to prepare it.

memcore's quality tests and benchmarks read public evaluation data by path from one folder,
``$MEMCORE_SHARED`` (default: ``shared/`` beside the checkout). Nothing of it ships with
memcore. ``memcore data prepare DIR`` fills ``DIR`` with it:

- ``locomo``: ``data/locomo/locomo_dev.json``, 6 of the 10 LoCoMo conversations (conv-26, 30,
  41, 42, 43, 44) from ``data/locomo10.json`` of github.com/snap-research/locomo
  (Maharana et al., ACL 2024; CC BY-NC 4.0).
- ``scifact``: ``data/scifact/`` in BEIR format (``corpus.jsonl``, ``queries.jsonl``,
  ``qrels/test.tsv``, ``qrels/train.tsv``) from BEIR's public ``scifact.zip`` (CC BY-NC 2.0).
- ``minilm-reference``: ``reference/minilm-fp32/`` (``texts.json``, ``embeddings.npy``), fp32
  sentence-transformers all-MiniLM-L6-v2 vectors of 230 texts; made by memcore's developers
  with PyTorch, so only copied (``--from``), never downloaded.

Examples
--------
>>> missing(Path("/nonexistent"), ["locomo"])
['locomo']
"""

from __future__ import annotations

import io
import json
import os
import shutil
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from memcore.errors import InvalidArgumentError, MemcoreError

__all__ = ["DATASETS", "ENV", "DataUnavailableError", "data_root", "missing", "describe", "prepare"]

#: The environment variable naming the evaluation data folder.
ENV = "MEMCORE_SHARED"

#: The LoCoMo conversations memcore evaluates on (the rest of locomo10.json is held out).
LOCOMO_DEV = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44")


class DataUnavailableError(MemcoreError, OSError):
    """Evaluation data cannot be downloaded or is not where it should be; the message says what to do."""


@dataclass(frozen=True)
class Dataset:
    """One dataset of the folder: the files it consists of (relative paths) and its origin."""

    name: str
    files: tuple[str, ...]
    what: str
    source: str
    url: str | None


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("locomo", ("data/locomo/locomo_dev.json",),
            "LoCoMo conversations (6 of 10)",
            "github.com/snap-research/locomo data/locomo10.json, CC BY-NC 4.0",
            "https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json"),
    Dataset("scifact", ("data/scifact/corpus.jsonl", "data/scifact/queries.jsonl",
                        "data/scifact/qrels/test.tsv", "data/scifact/qrels/train.tsv"),
            "BEIR SciFact",
            "BEIR (allenai/scifact), CC BY-NC 2.0",
            "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip"),
    Dataset("minilm-reference", ("reference/minilm-fp32/texts.json",
                                 "reference/minilm-fp32/embeddings.npy"),
            "fp32 all-MiniLM-L6-v2 reference embeddings",
            "fp32 sentence-transformers outputs made by memcore's developers", None),
)}


def data_root(default: str | os.PathLike | None = None) -> Path:
    """``$MEMCORE_SHARED`` if set, else ``default`` (the caller's ``<checkout>/../shared``).

    The folder may not exist; :func:`missing` says what is absent.
    """
    value = os.environ.get(ENV) or default
    if value is None:
        raise DataUnavailableError(f"no evaluation data folder: set {ENV} (see `memcore data prepare --help`)")
    return Path(value)


def _names(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        raise InvalidArgumentError(f"unknown dataset(s) {unknown}; known: {', '.join(DATASETS)}")
    return names


def missing(root: Path, names: Iterable[str] = DATASETS) -> list[str]:
    """The datasets among ``names`` with a file absent under ``root``, in the given order."""
    return [n for n in _names(names) if not all((root / f).is_file() for f in DATASETS[n].files)]


def describe(root: Path, names: Sequence[str]) -> str:
    """One sentence for a user: which data is absent, where it comes from, how to get it."""
    names = _names(names)
    parts = "; ".join(f"{DATASETS[n].what} ({DATASETS[n].files[0]}; source: {DATASETS[n].source})"
                      for n in names)
    how = "DIR" if all(DATASETS[n].url for n in names) else "DIR --from FOLDER_THAT_HAS_IT"
    return f"needs {parts}, not found under {root}: run `memcore data prepare {how}`, `export {ENV}=DIR`"


# ------------------------------------------------------------------ preparing

def _download(url: str, opener: Callable = urllib.request.urlopen) -> bytes:
    try:
        with opener(url, timeout=60) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as err:
        name = url.rsplit("/", 1)[-1]
        raise DataUnavailableError(
            f"could not download {url} ({getattr(err, 'reason', err)}); without network, fetch "
            f"{name} elsewhere, put it in a folder SRC and run `memcore data prepare DIR --from SRC`"
        ) from err


def _raw(ds: Dataset, source: Path | None, opener: Callable) -> bytes | None:
    """The dataset's download: ``source/<file name>`` when given and present, else fetched.

    None when ``source`` is given but holds neither the prepared files nor the download.
    """
    if source is not None:
        local = source / ds.url.rsplit("/", 1)[-1]
        return local.read_bytes() if local.is_file() else None
    return _download(ds.url, opener)


def _write_locomo(raw: bytes, dest: Path) -> None:
    try:
        conversations = {c["sample_id"]: c for c in json.loads(raw)}
    except (ValueError, TypeError, KeyError) as err:
        raise DataUnavailableError(f"locomo10.json is not LoCoMo JSON ({err})") from err
    absent = [c for c in LOCOMO_DEV if c not in conversations]
    if absent:
        raise DataUnavailableError(f"locomo10.json lacks conversation(s) {absent}")
    out = dest / DATASETS["locomo"].files[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([conversations[c] for c in LOCOMO_DEV], ensure_ascii=False), "utf-8")


def _write_scifact(raw: bytes, dest: Path) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            for rel in DATASETS["scifact"].files:
                inner = "scifact/" + rel.removeprefix("data/scifact/")
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(inner))
    except (zipfile.BadZipFile, KeyError) as err:
        raise DataUnavailableError(f"scifact.zip is not BEIR's SciFact archive ({err})") from err


_WRITERS = {"locomo": _write_locomo, "scifact": _write_scifact}


def prepare(dest: str | os.PathLike, names: Iterable[str] | None = None, *,
            source: str | os.PathLike | None = None,
            opener: Callable = urllib.request.urlopen) -> list[str]:
    """Fill ``dest`` with the datasets ``names`` (see the module docstring for the layout).

    Parameters
    ----------
    dest : path
        The folder to fill (created); later point ``$MEMCORE_SHARED`` at it.
    names : iterable of str, optional
        Keys of :data:`DATASETS`; by default every dataset that can be downloaded, plus
        ``minilm-reference`` when ``source`` holds it.
    source : path, optional
        A local folder instead of the network: either already prepared (its files are copied)
        or holding the downloads themselves (``locomo10.json``, ``scifact.zip``).
    opener : callable, default urllib.request.urlopen
        Opens a URL (for a proxy or a test).

    Returns
    -------
    list of str
        The datasets written; those already complete in ``dest`` are left alone.

    Raises
    ------
    DataUnavailableError
        If a download fails (the message says how to prepare offline), a download is not what
        it should be, or ``source`` holds neither form of a dataset.
    InvalidArgumentError
        If a name is unknown.
    """
    dest = Path(dest)
    src = Path(source) if source is not None else None
    if src is not None and not src.is_dir():
        raise DataUnavailableError(f"--from folder {src} does not exist")
    if names is None:
        names = [n for n, ds in DATASETS.items()
                 if ds.url is not None or (src is not None and not missing(src, [n]))]
    written = []
    for name in missing(dest, names):
        ds = DATASETS[name]
        if src is not None and not missing(src, [name]):
            for rel in ds.files:
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / rel, dest / rel)
        elif ds.url is None:
            raise DataUnavailableError(
                f"{ds.what} cannot be downloaded ({ds.source}); "
                + (f"{src} lacks {', '.join(ds.files)}" if src else "pass --from a folder holding it"))
        else:
            raw = _raw(ds, src, opener)
            if raw is None:
                raise DataUnavailableError(
                    f"{src} holds neither {ds.files[0]} nor {ds.url.rsplit('/', 1)[-1]} ({ds.url})")
            _WRITERS[name](raw, dest)
        written.append(name)
    return written
