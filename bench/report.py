"""Writing a run's results: ``<out>/<suite>-<UTC timestamp>.{json,md,png}``.

Every file carries the environment (date, commit, CPU, cores, package versions, threads) so a
number can always be traced to where and how it was measured.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Sequence

from bench.env import repo_root

__all__ = ["default_out_dir", "markdown_table", "env_markdown", "write_run", "fmt"]


def default_out_dir() -> Path:
    """``bench/results`` in the source checkout."""
    return repo_root() / "bench" / "results"


def fmt(value, digits: int = 2) -> str:
    """A table cell: numbers rounded, None/NaN as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A GitHub markdown table; the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def env_markdown(env: dict) -> str:
    """One paragraph naming where and how the run was made."""
    pk = env.get("packages", {})
    versions = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
    return (f"Measured {env.get('date')} on {env.get('cpu')} ({env.get('cores')} cores, "
            f"load average at start {env.get('loadavg_at_start')}), commit "
            f"`{env.get('commit') or 'unknown'}`, Python {env.get('python')}, "
            f"threads pinned to {env.get('threads')}. Packages: {versions}.")


def write_run(out_dir: str | Path, suite: str, payload: dict, markdown: str,
              plot: Callable[[Path], None] | None = None) -> dict:
    """Write the JSON payload, the markdown report and (optionally) a PNG plot.

    Parameters
    ----------
    out_dir : path
        Created if missing.
    suite : str
        ``tick``, ``locomo`` or ``beir``; the file stem is ``<suite>-<YYYYmmddTHHMMSSZ>``.
    payload : dict
        Must hold ``payload["env"]["date"]`` (ISO 8601).
    markdown : str
    plot : callable(path), optional
        Draws the PNG at the given path; skipped with a note when matplotlib is missing.

    Returns
    -------
    dict of str to Path: the files written (``json``, ``md`` and maybe ``png``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = payload["env"]["date"].replace("-", "").replace(":", "").split("+")[0] + "Z"
    stem = out / f"{suite}-{stamp}"
    files = {"json": stem.with_suffix(".json"), "md": stem.with_suffix(".md")}
    files["json"].write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    if plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            plot(stem.with_suffix(".png"))
            files["png"] = stem.with_suffix(".png")
            markdown += f"\n\n![{suite}]({files['png'].name})\n"
        except ImportError:
            markdown += "\n\n(no plot: matplotlib is not installed; pip install -e \".[bench]\")\n"
    files["md"].write_text(markdown.rstrip() + "\n", encoding="utf-8")
    return files
