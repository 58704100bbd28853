"""Stores by URL and chunk keys, as the C++ side names and seals them."""

import pytest

import kvcodec


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
