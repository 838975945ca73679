"""memcore.evaldata and `memcore data prepare`: layout, offline preparation, clear errors."""

from __future__ import annotations

import filecmp
import json
import zipfile

import pytest

from memcore import evaldata
from memcore.cli import main
from memcore.evaldata import LOCOMO_DEV, DataUnavailableError


def _downloads(folder, conversations=LOCOMO_DEV + ("conv-99",)):
    """Tiny stand-ins for locomo10.json and scifact.zip, in the downloads' own formats."""
    folder.mkdir(parents=True, exist_ok=True)
    convs = [{"sample_id": c, "qa": [{"question": f"q of {c}?", "evidence": ["D1:1"]}],
              "conversation": {"speaker_a": "A"}} for c in conversations]
    (folder / "locomo10.json").write_text(json.dumps(convs), "utf-8")
    with zipfile.ZipFile(folder / "scifact.zip", "w") as z:
        z.writestr("scifact/corpus.jsonl", '{"_id": "1", "title": "t", "text": "x"}\n')
        z.writestr("scifact/queries.jsonl", '{"_id": "7", "text": "q"}\n')
        z.writestr("scifact/qrels/test.tsv", "query-id\tcorpus-id\tscore\n7\t1\t1\n")
        z.writestr("scifact/qrels/train.tsv", "query-id\tcorpus-id\tscore\n")
    return folder


def test_prepare_from_the_downloads_writes_the_layout(tmp_path, capsys):
    src = _downloads(tmp_path / "dl")
    dest = tmp_path / "data"
    assert main(["data", "prepare", str(dest), "--from", str(src)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"export MEMCORE_SHARED={dest.resolve()}"
    assert evaldata.missing(dest) == ["minilm-reference"]   # copied only, never downloaded
    dev = json.loads((dest / "data/locomo/locomo_dev.json").read_text("utf-8"))
    assert [c["sample_id"] for c in dev] == list(LOCOMO_DEV)  # the held-out conv-99 is left out
    assert (dest / "data/scifact/qrels/test.tsv").read_text() == "query-id\tcorpus-id\tscore\n7\t1\t1\n"
    # complete datasets are left alone
    assert evaldata.prepare(dest, source=src) == []


def test_prepare_refuses_bad_downloads(tmp_path):
    src = _downloads(tmp_path / "dl", conversations=("conv-26",))
    with pytest.raises(DataUnavailableError, match="conv-30"):
        evaldata.prepare(tmp_path / "d", ["locomo"], source=src)
    (src / "scifact.zip").write_bytes(b"not a zip")
    with pytest.raises(DataUnavailableError, match="scifact.zip"):
        evaldata.prepare(tmp_path / "d", ["scifact"], source=src)
    with pytest.raises(DataUnavailableError, match="locomo10.json"):
        evaldata.prepare(tmp_path / "d", ["locomo"], source=tmp_path)  # neither form
    with pytest.raises(DataUnavailableError, match="--from"):
        evaldata.prepare(tmp_path / "d", ["minilm-reference"])               # not downloadable
    with pytest.raises(ValueError, match="unknown dataset"):
        evaldata.prepare(tmp_path / "d", ["nope"])


def test_failed_download_says_how_to_prepare_offline():
    with pytest.raises(DataUnavailableError, match="--from SRC") as err:
        evaldata._download("http://127.0.0.1:9/locomo10.json")   # nothing listens on port 9
    assert isinstance(err.value, OSError) and "locomo10.json" in str(err.value)


def test_cli_error_is_one_line(tmp_path, capsys):
    assert main(["data", "prepare", str(tmp_path / "d"), "--from", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memcore data: error:") and len(err.strip().splitlines()) == 1


def test_skip_reason_names_the_data_its_source_and_the_command(tmp_path):
    reason = evaldata.describe(tmp_path, ["locomo", "scifact"])
    for needle in ("LoCoMo", "snap-research/locomo", "SciFact", "BEIR", "memcore data prepare DIR",
                   "MEMCORE_SHARED", str(tmp_path)):
        assert needle in reason, reason


@pytest.mark.data("locomo", "scifact", "minilm-reference")
def test_prepare_copies_a_prepared_folder(shared, tmp_path):
    dest = tmp_path / "copy"
    assert evaldata.prepare(dest, source=shared) == list(evaldata.DATASETS)
    for ds in evaldata.DATASETS.values():
        for rel in ds.files:
            assert filecmp.cmp(shared / rel, dest / rel, shallow=False), rel
