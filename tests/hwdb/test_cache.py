"""The parsed-data cache (hwdb/cache.py): what it returns is what parsing gives, a changed file or a
damaged cache is parsed again, and an estimate is the same with the cache and without it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mechsim.hwdb import cache, loader
from mechsim.hwdb.prices import PriceBook, load_prices, parse_book

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh cache folder for this test; this process's bundle forgotten before and after."""
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_DIR, str(d))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    cache.reset()
    yield d
    cache.reset()


def _parse(raw: bytes) -> dict:
    return tomllib.loads(raw.decode())


class Counting:
    """A parse / build function that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a):
        self.calls += 1
        return self.fn(*a)


def test_database_from_the_cache_equals_the_parsed_one(folder):
    loader.default_db.cache_clear()
    try:
        first = loader.default_db()            # built, then written
        loader.default_db.cache_clear()
        again = loader.default_db()            # read back
    finally:
        loader.default_db.cache_clear()
    fresh = loader.load_db(loader.DEFAULT_DATA_DIR)
    assert (folder / "hwdb.pickle").is_file()
    assert again is not first
    for db in (first, again):
        assert db.gpus == fresh.gpus and db.systems == fresh.systems and db.nics == fresh.nics
        assert db.cpus == fresh.cpus and db.sources == fresh.sources and db.index == fresh.index
        assert list(db.gpus) == list(fresh.gpus)
    for key, gpu in fresh.gpus.items():   # hashes agree: GPU objects key the simulator's caches
        assert hash(again.gpus[key]) == hash(gpu) and hash(again.gpus[key].specs) == hash(gpu.specs)
        assert again.gpus[key].peak_flops("bf16") == gpu.peak_flops("bf16")


def test_database_is_read_back_without_parsing(folder, monkeypatch):
    loader.default_db.cache_clear()
    try:
        loader.default_db()
        loader.default_db.cache_clear()

        def refuse(*a, **k):
            raise AssertionError("parsed again although no file changed")

        monkeypatch.setattr(loader, "load_db", refuse)
        assert "h100_sxm" in loader.default_db().gpus
    finally:
        loader.default_db.cache_clear()


def test_price_book_from_the_cache_equals_the_parsed_one(folder):
    load_prices.cache_clear()
    try:
        load_prices()
        load_prices.cache_clear()
        again = load_prices()
    finally:
        load_prices.cache_clear()
    assert (folder / "prices.pickle").is_file()
    assert isinstance(again, PriceBook) and again == parse_book()


def test_object_rebuilt_when_a_file_changes_even_at_the_same_size(folder, tmp_path):
    data = tmp_path / "d.toml"
    data.write_text("a = 1\n")
    build = Counting(lambda: _parse(data.read_bytes()))
    assert cache.cached_object("t", [data], build, dict) == {"a": 1}
    assert cache.cached_object("t", [data], build, dict) == {"a": 1}
    assert build.calls == 1
    stat = data.stat()
    data.write_text("a = 2\n")                      # same size
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))   # and the same time stamp
    assert cache.cached_object("t", [data], build, dict) == {"a": 2}
    assert build.calls == 2


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage", "other_pickle", "wrong_type"])
def test_damaged_object_cache_is_rebuilt(folder, tmp_path, damage):
    data = tmp_path / "d.toml"
    data.write_text("a = 1\nb = 'x'\n")
    build = Counting(lambda: _parse(data.read_bytes()))
    cache.cached_object("t", [data], build, dict)
    stored = folder / "t.pickle"
    blob = stored.read_bytes()
    if damage == "flip":   # one byte of the stored value: the file still unpickles, its digest fails
        payload = pickle.loads(blob)[1]
        i = blob.index(payload) + len(payload) // 2
        blob = blob[:i] + bytes([blob[i] ^ 0x01]) + blob[i + 1:]
    broken = {"flip": blob, "truncate": blob[: len(blob) // 2], "empty": b"", "garbage": b"\x80\x05not a pickle",
              "other_pickle": pickle.dumps(["something", "else"]),
              "wrong_type": pickle.dumps(cache._pack(cache.files_key([data]), ["not", "a", "dict"]))}[damage]
    stored.write_bytes(broken)
    assert cache.cached_object("t", [data], build, dict) == {"a": 1, "b": "x"}
    assert build.calls == 2
    assert cache.cached_object("t", [data], build, dict) == {"a": 1, "b": "x"}   # and written again
    assert build.calls == 2


def test_parsed_toml_is_a_fresh_copy_and_follows_the_bytes(folder, tmp_path):
    path = tmp_path / "f.toml"
    parse = Counting(_parse)
    raw = b"[t]\nx = [1, 2]\n"
    one = cache.parsed_toml(path, raw, parse)
    one["t"]["x"].append(3)                        # a caller changing its copy
    cache.reset()                                  # a new process: the bundle read from disk
    assert cache.parsed_toml(path, raw, parse) == {"t": {"x": [1, 2]}}
    assert parse.calls == 1
    assert cache.parsed_toml(path, b"[t]\nx = [1, 5]\n", parse) == {"t": {"x": [1, 5]}}
    assert parse.calls == 2


@pytest.mark.parametrize("content", [b"", b"junk", None])
def test_damaged_bundle_is_parsed_again(folder, tmp_path, content):
    path, raw = tmp_path / "f.toml", b"x = 1\n"
    parse = Counting(_parse)
    cache.parsed_toml(path, raw, parse)
    bundle = folder / cache.BUNDLE
    if content is None:   # one entry's stored bytes changed: its digest fails
        env, entries = pickle.loads(bundle.read_bytes())
        key, payload, check = entries[os.path.abspath(path)]
        entries[os.path.abspath(path)] = (key, pickle.dumps({"x": 2}), check)
        bundle.write_bytes(pickle.dumps((env, entries)))
    else:
        bundle.write_bytes(content)
    cache.reset()
    assert cache.parsed_toml(path, raw, parse) == {"x": 1}
    assert parse.calls == 2


def test_parse_errors_are_not_stored(folder, tmp_path):
    path = tmp_path / "bad.toml"
    for _ in range(2):
        with pytest.raises(tomllib.TOMLDecodeError):
            cache.parsed_toml(path, b"x = = 1", _parse)
    assert os.path.abspath(path) not in cache._load_bundle(folder)


def test_off_and_unwritable(tmp_path, monkeypatch):
    data = tmp_path / "d.toml"
    data.write_text("a = 1\n")
    monkeypatch.setenv(cache.ENV_OFF, "1")
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "off"))
    cache.reset()
    build = Counting(lambda: _parse(data.read_bytes()))
    assert cache.cached_object("t", [data], build, dict) == {"a": 1}
    assert cache.parsed_toml(data, data.read_bytes(), _parse) == {"a": 1}
    assert not (tmp_path / "off").exists()
    monkeypatch.delenv(cache.ENV_OFF)
    blocker = tmp_path / "file"
    blocker.write_text("")                           # the cache folder's parent is a file
    monkeypatch.setenv(cache.ENV_DIR, str(blocker / "cache"))
    cache.reset()
    assert cache.cached_object("t", [data], build, dict) == {"a": 1}
    assert cache.parsed_toml(data, data.read_bytes(), _parse) == {"a": 1}
    cache.reset()


@pytest.mark.parametrize("args", [
    ["--model", "llama3-70b", "--hw", "h100", "--mode", "train", "--mbs", "1", "--seq", "4096"],
    ["--model", "llama3-8b", "--hw", "h200", "--mode", "decode", "--batch", "8", "--context", "4096"],
])
def test_estimate_is_the_same_with_and_without_the_cache(tmp_path, args):
    env = {**os.environ, cache.ENV_DIR: str(tmp_path / "cache")}
    env.pop(cache.ENV_OFF, None)
    cmd = [sys.executable, "-m", "mechsim.cli", "estimate", *args, "--json"]

    def run(extra: dict) -> dict:
        done = subprocess.run(cmd, cwd=ROOT, env={**env, **extra}, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    cold = run({})                                   # writes the cache
    assert (tmp_path / "cache" / "hwdb.pickle").is_file() and (tmp_path / "cache" / cache.BUNDLE).is_file()
    warm = run({})                                   # reads it
    off = run({cache.ENV_OFF: "1"})
    threads = run({cache.ENV_OFF: "1", "OPENBLAS_NUM_THREADS": "2"})   # the CLI's one BLAS thread changes nothing
    assert cold == warm == off == threads


def test_object_built_while_a_file_changed_is_not_stored(folder, tmp_path):
    data = tmp_path / "d.toml"
    data.write_text("a = 1\n")

    def build_and_edit():
        value = _parse(data.read_bytes())
        data.write_text("a = 3\n")                   # edited while the object was being built
        return value

    assert cache.cached_object("t", [data], build_and_edit, dict) == {"a": 1}
    assert not (folder / "t.pickle").exists()
