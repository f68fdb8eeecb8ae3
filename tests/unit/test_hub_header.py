"""Remote GGUF headers read with HTTP Range requests through the bounded parser, and the fit verdicts made
from them with the engine's memory estimate (engine.hub.client / verdict), against a loopback fake hub."""
from __future__ import annotations

import time

import pytest

from engine.errors import DownloadError, InvalidModelError
from engine.gguf import open_gguf, parse_header
from engine.hub import HubClient, HubUnreachableError, Machine, current_machine, fit_verdict
from engine.hub.client import FIRST_HEADER_READ
from engine.hub.verdict import planned_needs
from engine.model.arch import memory_estimate
from engine.model.config import ModelConfig
from tests.fake_hub import FakeHub, header_only_gguf
from tests.unit.gguf_builder import V, minimal_model

GIB = 1 << 30
BIG_MACHINE = Machine(ram_free=64 * GIB, gpu_free=24 * GIB, gpu_name="Test GPU")


def test_parse_header_matches_open_gguf_and_refuses_a_cut_prefix(tmp_path):
    data = minimal_model().build()
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    with open_gguf(path) as g:
        head = parse_header(data[:g.data_offset], len(data))
        assert head.data_offset == g.data_offset
        assert dict(head.metadata).keys() == dict(g.metadata).keys()
        assert {n: (t.offset, t.shape) for n, t in head.tensors.items()} == \
               {n: (t.offset, t.shape) for n, t in g.tensors.items()}
    with pytest.raises(InvalidModelError):                                 # cut short: the caller reads more
        parse_header(data[:100], len(data))
    with pytest.raises(InvalidModelError, match="past the end|ends before"):
        parse_header(data[:head.data_offset], head.data_offset + 10)      # tensor data cannot fit


def _file(hub: FakeHub, client: HubClient, repo: str, name: str):
    return next(f for f in client.repo_files(repo) if f.filename == name)


def test_large_header_read_in_more_than_one_range_and_verdicts_from_the_engine_estimate():
    notes = [f"note-{i:06d}-" + "x" * 20 for i in range(60_000)]         # ~2.3 MB of strings: > the first read
    big_vocab = minimal_model(general__notes=(V.ARRAY, (V.STRING, notes))).build()
    huge, huge_size = header_only_gguf()
    odd = minimal_model(general__architecture=(V.STRING, "rwkv7")).build()
    with FakeHub() as hub:
        hub.add("t/models-GGUF", "vocab-Q8_0.gguf", big_vocab)
        hub.add("t/models-GGUF", "huge-Q4_K_M.gguf", huge, size=huge_size, sha256="0" * 64)
        hub.add("t/models-GGUF", "rwkv-Q4_0.gguf", odd)
        client = HubClient(endpoint=hub.endpoint)

        head = client.read_header(_file(hub, client, "t/models-GGUF", "vocab-Q8_0.gguf"))
        assert len(head.metadata["general.notes"]) == len(notes)
        assert len(hub.ranges) >= 2 and hub.ranges[0] == f"bytes=0-{FIRST_HEADER_READ - 1}"

        huge_file = _file(hub, client, "t/models-GGUF", "huge-Q4_K_M.gguf")
        assert huge_file.size > 30 * GIB
        head = client.read_header(huge_file)
        # ~40 GiB of Q4_K: neither the 24 GB GPU nor 32 GB of RAM holds it (the CPU keeps it quantized, so
        # 64 GB of RAM would)
        verdict = fit_verdict(head, Machine(ram_free=32 * GIB, gpu_free=24 * GIB, gpu_name="Test GPU"))
        config = ModelConfig.from_metadata(head.metadata)
        assert verdict.fit == "too_large" and verdict.architecture == "llama"
        assert fit_verdict(head, BIG_MACHINE).fit == "cpu"
        assert (verdict.gpu_bytes, verdict.cpu_bytes) == planned_needs(config, list(head.tensors.values()), 4096)
        assert verdict.gpu_bytes > memory_estimate(config, 4096, "gpu", head.tensors.values()).total   # + scratch
        assert "Does not fit on Test GPU" in verdict.words and "does not fit there either" in verdict.words
        assert fit_verdict(head, Machine(ram_free=64 * GIB, gpu_free=80 * GIB, gpu_name="H")).fit == "gpu"

        verdict = fit_verdict(client.read_header(_file(hub, client, "t/models-GGUF", "rwkv-Q4_0.gguf")),
                              BIG_MACHINE)
        assert verdict.fit == "unsupported" and "rwkv7" in verdict.words


def test_hostile_remote_header_is_refused_by_the_parser():
    data = bytearray(minimal_model().build())
    data[16:24] = (1 << 40).to_bytes(8, "little")          # n_kv: far more than the file could hold
    with FakeHub() as hub:
        hub.add("t/bad-GGUF", "bad-Q4_0.gguf", bytes(data))
        client = HubClient(endpoint=hub.endpoint)
        with pytest.raises(InvalidModelError, match="n_kv|count"):
            client.read_header(client.repo_files("t/bad-GGUF")[0])


def test_unreachable_hub_is_one_sentence_at_once():
    with FakeHub() as hub:
        endpoint = hub.endpoint
    start = time.monotonic()
    with pytest.raises(HubUnreachableError, match="cannot be reached.*retry"):
        HubClient(endpoint=endpoint).search("qwen")
    assert time.monotonic() - start < 10


def test_current_machine_asks_the_probe():
    machine = current_machine()
    assert machine.ram_free > 0 and (machine.gpu_free is None or machine.gpu_name)


def test_a_server_ignoring_range_is_refused_without_reading_the_body():
    huge, huge_size = header_only_gguf()
    with FakeHub() as hub:
        hub.add("t/huge-GGUF", "huge-Q4_K_M.gguf", huge, size=huge_size, sha256="0" * 64)
        hub.ignore_range = True                                   # it would send ~40 GB
        client = HubClient(endpoint=hub.endpoint)
        start = time.monotonic()
        with pytest.raises(DownloadError, match="did not honour a range request"):
            client.read_header(client.repo_files("t/huge-GGUF")[0])
        assert time.monotonic() - start < 10
