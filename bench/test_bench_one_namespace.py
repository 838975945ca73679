"""``python -m bench.one_namespace`` (bench/one_namespace.py): a smoke run. A first write of
more than ``PACK_MAX`` rows goes to a directory of its own whether the pack is on or off: the
same files, a format-2 store header."""

from __future__ import annotations

from bench import one_namespace
from memcore.stores import long_pack


def test_smoke_one_namespace_writes_the_same_files_with_the_pack_on_and_off():
    on, off = (one_namespace.run_one(pack, 1500, 5) for pack in ("1", "0"))
    assert on["dirs"] == off["dirs"] and len(on["dirs"]) == 1
    assert not on["dirs"][0].startswith("n-_pack") and 1500 > long_pack.PACK_MAX
    assert on["version"] == off["version"] == 2
    assert on["p50_ms"] > 0 and off["open_s"] > 0
