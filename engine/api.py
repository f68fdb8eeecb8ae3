"""The engine's public vocabulary: requests in, events out. Plain frozen dataclasses, no behaviour.

The app and the CLI speak only these types to the engine. Events for one request arrive in this order:
zero or more `PromptProgress` (only when the request asks for them), zero or more `TextDelta`, then
exactly one `Finished` (also on abort and on error).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal, get_args

FinishReason = Literal["stop", "length", "abort", "error"]
Role = Literal["system", "user", "assistant"]
ReasoningEffort = Literal["low", "medium", "high"]
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)

_request_ids = itertools.count(1)


TOP_LOGITS_MAX = 64        # SamplingParams.top_logits above this reports this many pairs (every backend)


def new_request_id() -> str:
    return f"req-{next(_request_ids)}"


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. temperature 0 means greedy (all other knobs then ignored, except penalties)."""

    temperature: float = 0.7
    top_k: int = 40             # 0 disables
    top_p: float = 0.95         # 1.0 disables
    min_p: float = 0.05         # 0.0 disables
    repetition_penalty: float = 1.0   # 1.0 disables; applied to tokens already in prompt + output
    max_tokens: int = 512
    seed: int | None = None     # None: a fresh random seed per request
    stop: tuple[str, ...] = ()  # stop strings; the text up to (not including) the match is emitted
    top_logits: int = 0         # report the first step's top-K (id, logit) pairs in Finished (K <= TOP_LOGITS_MAX)

    def validate(self) -> SamplingParams:
        """Raises InvalidRequestError naming the bad field (rules: engine.sampling.check_params); returns self."""
        from engine.sampling import check_params

        check_params(self)
        return self

    @staticmethod
    def greedy(max_tokens: int = 64, **kw) -> SamplingParams:
        return SamplingParams(**{"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **kw},
                              max_tokens=max_tokens)


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class GenerateRequest:
    """Exactly one of `messages` (rendered through the model's chat template), `prompt` (raw text) or
    `prompt_token_ids` (ids as they are, for checks against references made from ids)."""

    messages: tuple[ChatMessage, ...] | None = None
    prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = field(default_factory=new_request_id)
    # Chat-template switches, passed to templates that read them (ModelInfo.template_options says which);
    # None leaves the template's own default.
    enable_thinking: bool | None = None
    reasoning_effort: ReasoningEffort | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    # OpenAI-style tool schemas (JSON values) handed to the chat template as `tools`; None: no tools.
    tools: tuple | None = None
    # True: PromptProgress events while a long prompt is processed (consumers that do not ask never see one).
    report_progress: bool = False
    # A `messages` prompt too long for the context: "stop" (fail), "drop_oldest" (leave out the oldest turns,
    # keep the system prompt) or "rolling" (leave out the oldest messages); engine.context_fit.
    context_overflow: Literal["stop", "drop_oldest", "rolling"] = "stop"
    # True: the last message is an assistant reply cut short; the model goes on writing it (the template
    # renders the messages before it with the generation prompt, then the reply's text follows as it is).
    continue_final_message: bool = False

    def __post_init__(self):
        given = [x is not None for x in (self.messages, self.prompt, self.prompt_token_ids)]
        if sum(given) != 1:
            raise ValueError("GenerateRequest needs exactly one of messages, prompt or prompt_token_ids")
        if self.continue_final_message and not (self.messages and self.messages[-1].role == "assistant"):
            raise ValueError("continue_final_message needs messages ending with the assistant reply to continue")


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    time_to_first_token_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    total_time_s: float = 0.0


@dataclass(frozen=True)
class TextDelta:
    request_id: str
    text: str                     # the answer; may be "" while a multi-byte character is incomplete
    token_ids: tuple[int, ...]
    reasoning: str = ""           # the reply's thinking (engine.reasoning), never part of `text`


@dataclass(frozen=True)
class Finished:
    request_id: str
    reason: FinishReason
    usage: Usage
    prompt_token_ids: tuple[int, ...] = ()
    output_token_ids: tuple[int, ...] = ()
    first_top_logits: tuple[tuple[int, float], ...] = ()
    error: str | None = None      # set when reason == "error": what happened and what to do
    error_type: str = ""          # the engine.errors class of that error (e.g. "ContextOverflowError"), if any
    turns_left_out: int = 0       # earlier turns the context overflow policy left out of the prompt
    system_prompt_left_out: bool = False   # ... and whether it left out the system prompt ("rolling")


@dataclass(frozen=True)
class PromptProgress:
    """The prompt is being processed (prefill, before the first token): `processed` of `total` tokens are
    in the KV cache. Sent after each prefill chunk that does not finish the prompt."""

    request_id: str
    processed: int
    total: int


Event = TextDelta | Finished | PromptProgress


@dataclass(frozen=True)
class ModelInfo:
    """What the app shows about a loaded (or inspected) model."""

    path: str
    name: str
    architecture: str
    file_size: int
    quantization: str             # e.g. "Q4_K_M", "Q4_1", or the dominant tensor type
    parameters: int
    context_length: int           # the model's trained maximum
    has_chat_template: bool       # False: plain completion mode only (e.g. gemma base)
    backend: str = "cpu"          # where it runs: "cpu", "cuda:<device name>", "hip:<device name>"
    async_scheduling: bool = False
    async_reason: str = ""      # why async scheduling is on or off (diagnostics, status bar)
    template_options: tuple[str, ...] = ()   # GenerateRequest switches the chat template reads
    template_notice: str = ""     # non-empty: the model's chat template was refused; a plain format is used
    max_context: int = 0          # tokens one request may hold as loaded (the context setting, capped at
                                  # context_length); 0 when only inspected
    kv_cache_type: str = ""       # the KV cache's element type as loaded, engine.model.arch.KV_CACHE_TYPES
                                  # ("f32", "f16": GPU only); "" when only inspected or served remotely
    prefill_chunk: int = 0        # prompt tokens one step takes as loaded (engine.core.setup.DEFAULT_PREFILL_CHUNK);
                                  # 0 when only inspected or served remotely
    prefill_note: str = ""        # non-empty: why the step is shorter than the device's default (free GPU memory)


@dataclass(frozen=True)
class LoadProgress:
    fraction: float               # 0..1
    message: str


def estimate_memory(path: str, context: int, backend: Literal["cpu", "gpu"] = "cpu", num_seqs: int | None = None,
                    kv_cache_type: str | None = None):
    """engine.model.arch.MemoryEstimate of loading the GGUF at `path` with `context` tokens (capped at its
    trained length) on `backend`: weights, KV cache and recurrent state as the engine allocates them (one
    formula, engine.model.arch.memory_estimate). `num_seqs`: sequences whose recurrent state is kept (default:
    what the Engine batches). `kv_cache_type`: the Engine's setting (default: the Engine's default; the CPU
    keeps "f32" whatever it is).
    Reads the header only; raises EngineError for a file that is not a model."""
    from engine.gguf import open_gguf
    from engine.model.config import ModelConfig

    with open_gguf(path) as gguf:
        config = ModelConfig.from_metadata(gguf.metadata)
        return estimate_from_header(config, gguf.tensors.values(), context, backend, num_seqs, kv_cache_type)


def estimate_from_header(config, tensors, context: int, backend: Literal["cpu", "gpu"] = "cpu",
                         num_seqs: int | None = None, kv_cache_type: str | None = None):
    """estimate_memory from a header read before (its ModelConfig and TensorInfos): no file is touched, so the
    GUI thread may ask it (the model library keeps what its scan read)."""
    from engine.core.setup import DEFAULT_MAX_NUM_SEQS
    from engine.model.arch import DEFAULT_KV_CACHE_TYPE, memory_estimate

    return memory_estimate(config, context, backend, tensors, DEFAULT_MAX_NUM_SEQS if num_seqs is None else num_seqs,
                           kv_cache_type or DEFAULT_KV_CACHE_TYPE)
