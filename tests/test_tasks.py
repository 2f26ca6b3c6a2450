"""Task loaders on the paper's splits, sha256 checks, missing splits and the pinned download (mocked)."""

from __future__ import annotations

import shutil

import httpx
import pytest
import respx

from metaharness.errors import InputError
from metaharness.tasks import TASK_NAMES, get_task
from metaharness.tasks.text.splits import DataError, upstream_url

SIZES = {"lawbench": (200, 50), "symptom2disease": (200, 50), "uspto": (50, 30)}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("METAHARNESS_DATA_DIR", raising=False)
    monkeypatch.setenv("METAHARNESS_CACHE_DIR", str(tmp_path / "cache"))


def test_task_names():
    assert TASK_NAMES == ("lawbench", "symptom2disease", "uspto")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_loads_train_and_val(shared_data_dir, name):
    task = get_task(name, data_dir=shared_data_dir)
    train, val = task.load("train"), task.load("val")
    assert (len(train), len(val)) == SIZES[name]
    assert len({e.id for e in train + val}) == len(train) + len(val)
    assert all(e.input and e.target for e in train + val)
    assert task.splits == ("train", "val", "test")
    assert "primary" in task.score("", val[0])
    assert task.description


def test_gold_answers_score_one(shared_data_dir):
    for name in TASK_NAMES:
        task = get_task(name, data_dir=shared_data_dir)
        for example in task.load("val"):
            assert task.score(example.target, example)["primary"] == 1.0, (name, example.id)


def test_lawbench_target_drops_the_prefix(shared_data_dir):
    example = get_task("lawbench", data_dir=shared_data_dir).load("train")[0]
    assert example.raw["answer"].startswith("罪名:")
    assert example.target == example.raw["answer"].removeprefix("罪名:")
    assert example.input.startswith("事实:")


def test_environment_variable_names_the_folder(shared_data_dir, monkeypatch):
    monkeypatch.setenv("METAHARNESS_DATA_DIR", str(shared_data_dir))
    assert len(get_task("uspto").load("val")) == 30


def test_checksum_mismatch_is_an_error(shared_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(shared_data_dir, copy)
    with (copy / "uspto" / "val.jsonl").open("a") as handle:
        handle.write('{"question": "x", "target": "y"}\n')
    with pytest.raises(DataError, match="sha256"):
        get_task("uspto", data_dir=copy).load("val")


def test_missing_split_is_an_error(shared_data_dir):
    with pytest.raises(DataError, match="test.jsonl is missing"):
        get_task("symptom2disease", data_dir=shared_data_dir).load("test")


def test_unknown_task_and_split():
    with pytest.raises(InputError, match="Unknown task"):
        get_task("mmlu")
    with pytest.raises(InputError, match="Unknown split"):
        get_task("uspto").load("dev")


@respx.mock
def test_download_verifies_the_pinned_sum(shared_data_dir, tmp_path):
    good = (shared_data_dir / "uspto" / "val.jsonl").read_bytes()
    respx.get(upstream_url("uspto/val.jsonl")).mock(return_value=httpx.Response(200, content=good))
    assert len(get_task("uspto").load("val")) == 30
    assert (tmp_path / "cache" / "data").is_dir()
    assert len(get_task("uspto").load("val")) == 30  # from the cache: no second request
    assert respx.calls.call_count == 1


@respx.mock
def test_download_with_wrong_content_is_refused():
    respx.get(upstream_url("uspto/train.jsonl")).mock(
        return_value=httpx.Response(200, content=b'{"question": "tampered", "target": "C"}\n')
    )
    with pytest.raises(DataError, match="sha256"):
        get_task("uspto").load("train")


@respx.mock
def test_test_split_sum_is_recorded_on_first_download(tmp_path):
    rows = b'{"question": "Context: x\\nInput: CCO\\nAnswer: ", "target": "CC.O"}\n'
    respx.get(upstream_url("uspto/test.jsonl")).mock(return_value=httpx.Response(200, content=rows))
    assert [e.target for e in get_task("uspto").load("test")] == ["CC.O"]
    cached = next((tmp_path / "cache").rglob("uspto/test.jsonl"))
    assert "uspto/test.jsonl" in (cached.parent.parent / "SHA256SUMS").read_text()
    cached.write_bytes(rows + rows)
    with pytest.raises(DataError, match="sha256"):
        get_task("uspto").load("test")


@respx.mock
def test_split_missing_upstream_is_an_error():
    respx.get(upstream_url("uspto/test.jsonl")).mock(return_value=httpx.Response(404))
    with pytest.raises(DataError, match="404"):
        get_task("uspto").load("test")
