"""A bounded load test on loopback: 32 streams of 64 tokens at once through the official async `openai` client
against a real `python -m engine serve` (the starter model, CPU). Every stream must arrive whole - opened,
64 tokens or a stop, a finish reason, usage, [DONE] - and equal, token for token, the same request served
alone at temperature 0; the server must still answer afterwards. Two different prompts are interleaved so
the batch mixes sequences of different lengths."""
from __future__ import annotations

import asyncio

import pytest

from tests.server.serving import ServerProcess

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.golden
STREAMS, TOKENS = 32, 64
PROMPTS = ("Write a short story about a lighthouse keeper.",
           "List some facts about the planets of the solar system, one per line, in order from the sun.")


async def _stream(client, model: str, prompt: str) -> dict:
    text, finish, usage, chunks = [], [], None, 0
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=TOKENS, temperature=0,
        stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    return {"text": "".join(text), "finish": finish, "usage": usage, "chunks": chunks}


async def _run(base: str) -> tuple[dict, list[dict], list]:
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", timeout=300, max_retries=0) as client:
        model = (await client.models.list()).data[0].id
        alone = {p: await _stream(client, model, p) for p in PROMPTS}
        together = await asyncio.gather(*(_stream(client, model, PROMPTS[i % len(PROMPTS)])
                                          for i in range(STREAMS)))
        after = (await client.models.list()).data
    return alone, together, after


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = ServerProcess(smollm2_path, "--max-num-seqs", str(STREAMS), "--max-pending", str(STREAMS + 8))
    yield srv
    srv.stop()


def test_32_streams_each_equal_to_the_request_alone(server):
    alone, together, after = asyncio.run(_run(server.base))
    for ref in alone.values():
        assert ref["usage"].completion_tokens > 8 and ref["finish"] in (["length"], ["stop"]), ref
    for i, got in enumerate(together):
        ref = alone[PROMPTS[i % len(PROMPTS)]]
        assert got["finish"] == ref["finish"], f"stream {i}"
        assert got["usage"].completion_tokens == ref["usage"].completion_tokens, f"stream {i}"
        assert got["usage"].prompt_tokens == ref["usage"].prompt_tokens, f"stream {i}"
        assert got["text"] == ref["text"], f"stream {i} differs from the same request alone"
    assert after and server.alive()
    assert server.log().count("-> length") + server.log().count("-> stop") >= STREAMS + len(PROMPTS)
