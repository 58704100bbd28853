"""Stores by URL and chunk keys, as the C++ side names and seals them."""

import json

import pytest

import kvcodec

from conftest import CALIBRATION, MODEL, cli


@pytest.mark.parametrize("url", ["mem://", "dir"])
def test_put_get_exists_delete(tmp_path, url):
    store = kvcodec.Store("dir://" + str(tmp_path) if url == "dir" else url)
    name = kvcodec.chunk_object_name(bytes(range(16)), "quant", "8")
    assert name == bytes(range(16)).hex() + ".quant.8"
    assert not store.exists(name)
    with pytest.raises(kvcodec.NotFoundError):
        store.get(name)
    store.put(name, b"\x00payload\xff")
    assert store.exists(name)
    assert store.get(name) == b"\x00payload\xff"
    store.delete(name)
    assert not store.exists(name)


def test_objects_are_sealed_with_the_secret(tmp_path):
    url = "dir://" + str(tmp_path)
    kvcodec.Store(url, secret="s1").put("a.raw.fp16", b"abc")
    with pytest.raises(kvcodec.Error):
        kvcodec.Store(url, secret="s2").get("a.raw.fp16")
    assert kvcodec.Store(url, secret="s1").get("a.raw.fp16") == b"abc"


def test_bad_urls_raise():
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.Store("ftp://x")


def test_chunk_keys_name_whole_prefixes():
    model = bytes(16)
    tokens = list(range(1000))
    keys = kvcodec.chunk_keys(model, tokens, 256)
    assert len(keys) == 3 and all(len(k) == 16 for k in keys)
    assert kvcodec.chunk_keys(model, tokens[:512], 256) == keys[:2]
    changed = kvcodec.chunk_keys(model, [7] + tokens[1:], 256)
    assert all(a != b for a, b in zip(changed, keys))  # a key covers every token before it
    assert kvcodec.chunk_keys("ff" * 16, tokens, 256) != keys
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.chunk_keys(b"short", tokens)


def test_kvcodec_run_reuses_chunks_stored_from_python(tmp_path):
    """A sequence's KV stored by store_chunks is what `kvcodec run` finds, fetches and continues from:
    the same keys, objects and manifests as the C++ side writes."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text((MODEL.parent / "eval.txt").read_text(encoding="utf-8")[:2600], encoding="utf-8")
    info = json.loads(cli("tokenize", "--model", MODEL, "--json", prompt).stdout)
    tokens = info["tokens"]
    assert len(tokens) > 2 * 256 + 1
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(map(str, tokens)) + "\n")
    cli("encode", "--model", MODEL, "--token-file", ids, "--codec", "raw", "-o", tmp_path / "kv.kvc")
    k, v = kvcodec.decode((tmp_path / "kv.kvc").read_bytes())

    store = kvcodec.Store("dir://" + str(tmp_path / "store"))
    cal = kvcodec.Calibration.load(CALIBRATION)
    assert cal.model == info["model"]["fingerprint"]
    written = kvcodec.store_chunks(store, k, v, tokens, calibration=cal, rungs=[("raw", "fp16"), ("kvtc", "16")])
    assert written["chunks"] == len(tokens) // 256 and written["bytes"] > 0
    kvtc_objects = [kvcodec.chunk_object_name(key, "kvtc", "16") for key in kvcodec.chunk_keys(cal.model, tokens)]
    assert all(store.exists(name) for name in kvtc_objects)

    def run(*extra):
        return json.loads(cli("run", prompt, "--model", MODEL, "--store", store.url, "-n", 8, "--no-store", "--json",
                              *extra).stdout)

    reusable = (len(tokens) - 1) // 256  # run always prefills the last token
    fresh = run("--no-reuse")
    # A floor only raw fp16 is inside (every lossy rung's profiled top-1 agreement is below 1): on
    # a busy machine a slow-looking local read would otherwise let the planner take the smaller
    # kvtc chunks, and what is fetched would depend on the load.
    fast = run("--min-top1", "1")
    assert fast["reused_tokens"] == reusable * 256 and fast["chunks_fetched"] == reusable, fast["fallback"]
    assert not fast["damaged"]
    # raw fp16 is the stored KV bit for bit: the continuation is the one recomputing gives.
    assert fast["variants"] == ["raw/fp16"] * reusable
    assert fast["text"] == fresh["text"]
    # On a slow link the planner takes the kvtc chunks Python encoded.
    slow = run("--link-gbps", "0.01")
    assert slow["chunks_fetched"] == reusable and set(slow["variants"]) == {"kvtc/16"}, slow
