"""The ``memcore`` command line: one argparse subparser per command.

``main(argv=None) -> int`` parses, dispatches to the subcommand's ``func`` and returns its exit
status (0 success, 1 error, 2 usage). The store and demo commands live in
:mod:`memcore.commands`; the benchmark harness adds ``bench``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from memcore import __version__
from memcore.commands import add_commands, add_global_options, report_error

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one JSON object on stderr when ``json_errors``."""

    json_errors = False

    def error(self, message: str):  # type: ignore[override]
        if not self.json_errors:
            super().error(message)
        command = self.prog.removeprefix("memcore").strip() or "memcore"
        sys.exit(report_error(command, message, 2, as_json=True))


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered.

    With ``json_errors`` a usage error is one JSON object on stderr (``--json`` was given).
    """
    parser_class = type("Parser", (_Parser,), {"json_errors": json_errors})
    parser = parser_class(
        prog="memcore", description="Long-term semantic memory for agents and robots.")
    parser.add_argument("--version", action="version", version=f"memcore {__version__}")
    add_global_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_commands(subparsers)
    _add_bench(subparsers)
    _add_models(subparsers)
    _add_data(subparsers)
    return parser


def _add_data(subparsers) -> None:
    """``memcore data prepare DIR [--from SRC] [--only NAME ...]``: the evaluation data folder."""
    from memcore.evaldata import DATASETS, ENV

    p = subparsers.add_parser("data", help="prepare the evaluation data the benchmarks read")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    b = sub.add_parser(
        "prepare", help="download LoCoMo and SciFact into a folder",
        description=f"Download the public evaluation data (LoCoMo from snap-research/locomo, "
                    f"SciFact from BEIR) into DIR, then print the `export {ENV}=DIR` that points "
                    f"the tests and benchmarks at it. Complete datasets are left alone.")
    b.add_argument("dir", metavar="DIR", help="folder to fill (created)")
    b.add_argument("--from", dest="source", metavar="SRC",
                   help="a local folder instead of the network: a prepared folder, or one "
                        "holding locomo10.json and scifact.zip")
    b.add_argument("--only", nargs="+", choices=list(DATASETS), metavar="NAME",
                   help=f"only these datasets ({', '.join(DATASETS)})")
    b.set_defaults(func=_run_data_prepare, command="data")


def _run_data_prepare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from memcore import evaldata
    from memcore.errors import MemcoreError

    dest = Path(args.dir).resolve()
    try:
        written = evaldata.prepare(dest, args.only, source=args.source)
    except (MemcoreError, OSError) as err:
        print(f"memcore data: error: {err}", file=sys.stderr)
        return 1
    for name in written:
        print(f"prepared {name}: {dest / evaldata.DATASETS[name].files[0]}")
    absent = evaldata.missing(dest)
    if absent:
        print(f"not prepared: {', '.join(absent)} ({evaldata.describe(dest, absent)})", file=sys.stderr)
    print(f"export {evaldata.ENV}={dest}")
    return 0


def _add_models(subparsers) -> None:
    """``memcore models build [--variant V | --all] [--force]``: derive MiniLM variants now."""
    from memcore.models.variants import DEFAULT_VARIANT, VARIANTS

    p = subparsers.add_parser("models", help="build the cached MiniLM model variants")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="derive a variant from the packaged model and cache it",
                       description="Derive a MiniLM variant from the packaged int8 model (once; "
                                   "later runs verify the cached file's sha256).")
    b.add_argument("--variant", choices=VARIANTS, default=DEFAULT_VARIANT,
                   help=f"default: {DEFAULT_VARIANT}")
    b.add_argument("--all", action="store_true", help="build every variant")
    b.add_argument("--force", action="store_true", help="rebuild even if a valid build is cached")
    b.set_defaults(func=_run_models_build, command="models")
    ls = sub.add_parser("list", help="show the variants, their self-checks and the default's "
                                     "cached choice on this machine (builds and measures nothing)")
    ls.set_defaults(func=_run_models_list, command="models")


def _run_models_build(args: argparse.Namespace) -> int:
    from memcore.errors import MemcoreError
    from memcore.models import variants

    names = variants.VARIANTS if args.all else (args.variant,)
    try:
        for name in names:
            print(f"{name}\t{variants.build(name, force=args.force)}")
    except (MemcoreError, ImportError) as err:
        print(f"memcore: error: {err}", file=sys.stderr)
        return 1
    return 0


def _run_models_list(args: argparse.Namespace) -> int:
    from memcore.models import manifest, variants

    choice = variants.read_choice(manifest("all-minilm-l6-v2")["sha256"])
    timings = choice["timings_ms"] if choice else {}
    for name in variants.VARIANTS:
        built = variants.is_built(name)
        path = variants.build(name) if built else None     # built: a sha256 check only
        verdict = variants.read_verdict(path) if path is not None and name != "packaged" else None
        check = ("-" if verdict is None else
                 f"{'passed' if verdict['passed'] else 'FAILED'} (mean cos "
                 f"{verdict['mean_cosine']:.4f}, min {verdict['min_cosine']:.4f})")
        ms = f"{timings[name]:.2f} CPU ms" if name in timings else "-"
        mark = "*" if choice and choice["variant"] == name else " "
        print(f"{mark} {name:16s} {'built' if built else 'not built':9s} {ms:14s} {check}")
    if choice:
        print(f"* the default embedder's graph on this machine ({choice['cpu']}, onnxruntime "
              f"{choice['onnxruntime']}), cached in {variants.choice_path()}")
    else:
        print("no cached choice for this machine yet: the first MiniLMEmbedder().load() measures")
    return 0


BENCH_SUITES = ("tick", "locomo", "beir", "scale", "postgres", "namespaces", "faults")


def _add_bench(subparsers) -> None:
    """``memcore bench tick|locomo|beir [options]``: the harness in the checkout's ``bench/``."""
    p = subparsers.add_parser(
        "bench", help="run the benchmark harness (from a source checkout)",
        description="Run memcore's benchmark harness: tick latency (tick), LoCoMo retrieval "
                    "(locomo), BEIR SciFact (beir), store scale (scale), many namespaces "
                    "(namespaces), the PostgreSQL backend (postgres) or the fault campaign "
                    "(faults). `memcore bench SUITE --help` lists a "
                    "suite's options (--quick, --data PATH, --out DIR, ...).")
    p.add_argument("suite", choices=BENCH_SUITES)
    p.add_argument("options", nargs=argparse.REMAINDER, help="the suite's options")
    p.set_defaults(func=_run_bench, command="bench")


def _run_bench(args: argparse.Namespace) -> int:
    """Import ``bench.harness`` from the source checkout holding this package and run it."""
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / "bench" / "harness.py").is_file():
        print(f"memcore: error: the benchmark harness is not installed with the package; run "
              f"`memcore bench` from a source checkout (no bench/harness.py under {root})",
              file=sys.stderr)
        return 1
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    harness = importlib.import_module("bench.harness")
    return int(harness.main([args.suite, *args.options]))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Examples
    --------
    >>> main(["namespaces", "--store", "memcore-data"])  # doctest: +SKIP
    0
    """
    logging.basicConfig(level=logging.WARNING, format="memcore: %(levelname)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(json_errors="--json" in argv)
    args = parser.parse_args(_json_after_command(parser, argv))
    try:
        return int(args.func(args))
    except BrokenPipeError:                 # e.g. `memcore export - | head -1`: not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())    # Python would flush into the closed pipe at exit
        return 0


def _json_after_command(parser: argparse.ArgumentParser, argv: list) -> list:
    """``memcore --json stats`` means ``memcore stats --json``: ``--json`` may stand before the
    command like ``--store``."""
    commands = next(a.choices for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction))
    at = next((i for i, tok in enumerate(argv) if tok in commands), None)
    if at is None or "--json" not in argv[:at]:
        return argv
    before = [tok for tok in argv[:at] if tok != "--json"]
    return before + [argv[at], "--json"] + argv[at + 1:]


if __name__ == "__main__":
    sys.exit(main())
