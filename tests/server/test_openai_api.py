"""The official `openai` client against a real `python -m engine serve` (SmolLM2, CPU) on loopback."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.server.serving import ServerProcess

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.golden
HELLO = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = ServerProcess(smollm2_path)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="anything", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_models_lists_the_loaded_model(client, smollm2_path):
    models = client.models.list().data
    assert [m.id for m in models] == [smollm2_path.stem]


def test_chat_whole_and_streamed_agree_with_usage(client, model):
    whole = client.chat.completions.create(model=model, messages=HELLO, max_tokens=12, temperature=0)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens > 5 and 0 < whole.usage.completion_tokens <= 12
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens

    chunks = list(client.chat.completions.create(model=model, messages=HELLO, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == \
        [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_max_tokens_ends_with_length(client, model):
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to 50."}],
                                       max_tokens=5, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5


def test_completions_whole_and_streamed(client, model):
    whole = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert whole.choices[0].text and whole.usage.completion_tokens <= 8
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if c.choices)
    assert streamed == whole.choices[0].text


def test_stop_string_cuts_the_reply(client, model):
    full = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0).choices[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[: full.index(stop)]


def test_seed_reproduces_sampled_text(client, model):
    def sample(seed):
        return client.chat.completions.create(model=model, messages=HELLO, max_tokens=16, temperature=1.0,
                                              top_p=0.95, seed=seed, extra_body={"top_k": 50, "min_p": 0.01}).choices[0].message.content
    first = sample(1234)
    assert sample(1234) == first
    assert any(sample(s) != first for s in (1, 2, 3))


def test_unsupported_options_are_refused_clearly(client, model):
    with pytest.raises(openai.BadRequestError, match="response_format"):
        client.chat.completions.create(model=model, messages=HELLO, response_format={"type": "json_object"})
    with pytest.raises(openai.BadRequestError, match="presence_penalty.*repetition_penalty"):
        client.chat.completions.create(model=model, messages=HELLO, presence_penalty=0.5)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4o", messages=HELLO)


def test_client_disconnect_aborts_and_frees_kv_blocks(server, model):
    before = httpx.get(server.base + "/health").json()
    body = {"model": model, "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 4000, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.base + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in got)
        during = httpx.get(server.base + "/health").json()
        assert during["live_requests"] == 1 and during["kv_blocks_free"] < before["kv_blocks_free"]
    after = _health_once_idle(server, 20)
    assert after["live_requests"] == 0 and after["pending"] == 0
    assert after["kv_blocks_free"] == before["kv_blocks_free"]
    assert "client gone" in server.log()


def _health_once_idle(server, timeout_s: float) -> dict:
    """/health once no request is live or pending, or the last answer after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        health = httpx.get(server.base + "/health").json()
        if (health["live_requests"] == 0 and health["pending"] == 0) or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


def test_a_whole_reply_is_aborted_when_its_client_gives_up(server, model):
    """Without streaming nothing is written until the end, so only asking the client notices that it left: the
    tokens come faster than the poll, and the reply must not run on to max_tokens for nobody."""
    before = httpx.get(server.base + "/health").json()
    body = {"model": model, "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 4000, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base + "/v1/completions", json=body, timeout=httpx.Timeout(60, read=2.0))
    after = _health_once_idle(server, 10)
    assert after["live_requests"] == 0 and after["pending"] == 0
    assert after["kv_blocks_free"] == before["kv_blocks_free"]
    assert "client gone, aborted" in server.log()


def test_a_bad_sampling_value_names_its_parameter(server, model):
    for field, value in (("temperature", -1), ("top_p", 0), ("seed", -1), ("stop", [""]), ("top_k", -3)):
        r = httpx.post(server.base + "/v1/chat/completions", timeout=30,
                       json={"model": model, "messages": HELLO, "max_tokens": 2, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_a_lone_surrogate_in_the_content_is_a_clear_400(server, model):
    raw = '{"messages": [{"role": "user", "content": "hi \\ud800 there"}], "max_tokens": 3}'
    r = httpx.post(server.base + "/v1/chat/completions", content=raw.encode(), timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "U+D800" in r.json()["error"]["message"], r.text
    assert "TypeError" not in r.text


def test_tools_the_template_cannot_show_and_a_forced_tool_choice_are_refused(client, model, server):
    """SmolLM2's template never reads `tools`: taking them would answer as if the model had seen them."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError, match="does not read 'tools'"):
        client.chat.completions.create(model=model, messages=HELLO, tools=[tool], max_tokens=2)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}, 123):
        r = httpx.post(server.base + "/v1/chat/completions", timeout=30,
                       json={"model": model, "messages": HELLO, "max_tokens": 2, "tools": [tool], "tool_choice": choice})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text
    # "none" keeps the tools out of the prompt, so any template takes the request
    plain = client.chat.completions.create(model=model, messages=HELLO, max_tokens=2, temperature=0)
    unused = client.chat.completions.create(model=model, messages=HELLO, max_tokens=2, temperature=0, tools=[tool],
                                            tool_choice="none")
    assert unused.usage.prompt_tokens == plain.usage.prompt_tokens
