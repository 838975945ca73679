"""Smoke test of the fault campaign (bench/faults.py): a few SIGKILL rounds and damage
cases, and the classifier shown able to fail: a store that verifies clean but serves a wrong
value is *silent*, a damaged checkpoint file is *detected*."""

from __future__ import annotations

import shutil

import numpy as np

from bench import faults


def test_a_few_kill_rounds_lose_nothing(tmp_path):
    lt = faults.ltm_kill_rounds(str(tmp_path / "ltm"), 3, 5, 0, log=lambda m: None)
    sm = faults.sm_kill_rounds(str(tmp_path / "sm"), 1, 5, log=lambda m: None)
    assert lt["failures"] == [] and sm["lost"] == []
    assert sm["acked"] > 0 and len(lt["times"]) == 3


def test_the_classifier_tells_silent_from_detected(tmp_path):
    src = str(tmp_path / "src")
    model, deleted = faults.build_source(src)
    assert faults.classify(shutil.copytree(src, tmp_path / "ok"), model, deleted)["verdict"] \
        == "harmless"
    # a valid store with one acknowledged memory changed: verify() is clean, a read is wrong
    silent = str(tmp_path / "silent")
    shutil.copytree(src, silent)
    with faults._ltm(silent) as s:
        s.put("ns", "c2", "not what was acknowledged", vector=faults.vec(2))
    r = faults.classify(silent, model, deleted)
    assert r["verdict"] == "silent" and any("c2" in w for w in r["wrong"])
    # a flipped bit in a checkpoint file: its CRC reports it
    case = faults.damage_case(src, str(tmp_path / "d"), _file(src, "keyhash."), "bitflip",
                              np.random.default_rng(0), model, deleted)
    assert case["verdict"] == "detected" and case["kind"] == "checkpoint:keyhash"


def test_the_report_has_a_row_per_file_kind_and_damage(tmp_path):
    # 21 cases: one per file kind (rowcheck.<g>.u8 made it 21)
    res = faults.campaign(2, 21, 3, big_every=0, scratch=str(tmp_path), log=lambda m: None)
    res.update(date="d", commit="c", command="cmd", load_before="0", load_after="0")
    text = faults.render(res)
    assert "| **all** | | **21** |" in text and "## Silent cases" in text
    assert {r["kind"] for r in res["damage"]} >= {"log", "vectors", "memcore.json"}


def _file(root, prefix):
    from pathlib import Path
    return str(next(p for p in sorted(Path(root).rglob(prefix + "*"))).relative_to(root))
