"""Entry point of the benchmark harness: ``memcore bench tick|locomo|beir|scale|postgres|faults [options]``.

Also runnable from a checkout without installing the command: ``python -m bench.harness tick``.
Every suite takes ``--quick`` (a smoke-sized run), ``--data PATH`` (the shared data folder;
default ``$MEMCORE_SHARED``, else ``<repo>/../shared``) and ``--out DIR`` (default
``bench/results``), and writes ``<suite>-<UTC timestamp>.{json,md,png}`` there.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["build_parser", "main"]


def build_parser(prog: str = "memcore bench") -> argparse.ArgumentParser:
    from bench import faults, namespaces, postgres, quality, scale, tick

    parser = argparse.ArgumentParser(prog=prog, description="memcore's benchmark harness")
    sub = parser.add_subparsers(dest="suite", required=True,
                                metavar="{tick,locomo,beir,scale,postgres,namespaces,faults}")
    suites = {
        "tick": ("tick-budget latency and RSS, memcore vs the OM1 stack, FAISS and NumPy",
                 tick.add_arguments, tick.run),
        "locomo": ("LoCoMo turn retrieval, the paper's recall accuracy at 5/10/25 per category",
                   quality.add_locomo_arguments, quality.run_locomo),
        "beir": ("BEIR SciFact test: nDCG@10, recall@10/100", quality.add_beir_arguments,
                 quality.run_beir),
        "scale": ("one namespace of 1e5..1e7 memories: open, first search, hybrid/similarity "
                  "p50/p99, RSS, disk, ingest, beside FAISS flat and HNSW", scale.add_arguments,
                  scale.run),
        "postgres": ("the PostgreSQL + pgvector backend beside the embedded store: put/search "
                     "latency, writer processes, LoCoMo R@10", postgres.add_arguments,
                     postgres.run),
        "namespaces": ("N namespaces x M memories in one store: ingest, open, descriptors, "
                       "search/get latency, namespaces(), disk, RSS, beside LangGraph's "
                       "InMemoryStore", namespaces.add_arguments, namespaces.run),
        "faults": ("fault campaign (issue 27): SIGKILL rounds on LongTermMemory and "
                   "SemanticMemory, damage to every file kind, each case classified detected, "
                   "harmless or silent", faults.add_arguments, faults.run),
    }
    for name, (help_, add, fn) in suites.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--quick", action="store_true",
                       help="a small run for smoke tests (tick: < 2 minutes)")
        p.add_argument("--data", default=None,
                       help="the shared data folder (default $MEMCORE_SHARED, else <repo>/../shared)")
        p.add_argument("--out", default=None, help="where to write results (default bench/results)")
        add(p)
        p.set_defaults(func=fn)
    return parser


def main(argv=None, prog: str = "memcore bench") -> int:
    """Parse ``argv`` (e.g. ``["tick", "--quick"]``), run the suite, return its exit status."""
    args = build_parser(prog).parse_args(argv)
    if args.data is not None:
        from bench.datasets import data_root

        try:
            data_root(args.data)
        except FileNotFoundError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main(prog="python -m bench.harness"))
