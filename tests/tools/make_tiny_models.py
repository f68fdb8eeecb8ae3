"""Write tiny random-weight GGUF models (llama, qwen2, qwen3, gemma3) and their golden logits.

Run in a venv that has torch + transformers (the committed test does not need them):

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 transformers gguf numpy tokenizers
    /tmp/torchvenv/bin/python tests/tools/make_tiny_models.py            # writes tests/golden/data/

Each model is laid out the way llama.cpp's convert_hf_to_gguf.py lays out the real architecture:
- llama: q/k rows PERMUTED (so the interleaved "normal" rope applies to the file's weights);
- qwen2 / qwen3 / gemma3: q/k unpermuted, neox rope;
- gemma3: every norm weight stored as (1 + w) where transformers keeps w; embeddings scaled by
  sqrt(n_embd) at run time; the sliding/global layer pattern is not in the file (llama.cpp and
  transformers both use "every 6th layer is global"), the local rope base is 10000 (not in the file).

The reference ("golden") is transformers in float32 with eager attention, run on weights
DEQUANTIZED from the file we just wrote, so it is exact math on the numbers an engine reads.
Golden files hold the last prompt positions' logits and a greedy continuation with its logits.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

DATA_DIR = Path(__file__).resolve().parents[1] / "golden" / "data"
PROMPT_LEN = 24        # longer than gemma3's sliding window (8) so both layer kinds differ
GREEDY_STEPS = 8
LAST_POSITIONS = 4     # prompt positions whose full logits are stored
MIN_MARGIN = 0.25      # prompts are chosen so every greedy step beats the runner-up by this much
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@dataclass(frozen=True)
class Spec:
    name: str                  # file stem
    arch: str                  # gguf general.architecture
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    tied: bool
    quant: dict = field(default_factory=dict)   # tensor-name suffix -> type ("*" = default matrix type)
    file_type: int = 0         # general.file_type (llama_ftype): 0 F32, 3 Q4_1, 7 Q8_0, 15 Q4_K_M
    rope_base: float = 10000.0
    eps: float = 1e-5
    sliding_window: int = 0
    context: int = 256


SPECS = [
    Spec("llama-f32", "llama", 64, 2, 4, 2, 16, 96, tied=True, rope_base=100000.0),
    Spec("llama-q4_1", "llama", 64, 2, 4, 2, 16, 96, tied=True, file_type=3, rope_base=100000.0,
         quant={"*": Q.Q4_1, "attn_v": Q.Q5_0, "ffn_down": Q.Q5_0, "token_embd": Q.Q8_0}),
    Spec("qwen2-f32", "qwen2", 64, 2, 4, 2, 16, 96, tied=True, rope_base=1000000.0, eps=1e-6),
    Spec("qwen2-q8_0", "qwen2", 64, 2, 4, 2, 16, 96, tied=True, file_type=7, rope_base=1000000.0, eps=1e-6,
         quant={"*": Q.Q8_0, "ffn_gate": Q.Q4_0, "ffn_up": Q.Q4_0, "ffn_down": Q.Q4_0}),
    # head_dim 32 with 4 heads over hidden 64: q is 128 wide, wider than the residual
    Spec("qwen3-f32", "qwen3", 64, 2, 4, 2, 32, 96, tied=False, rope_base=1000000.0, eps=1e-6),
    # hidden 256 so every matrix (ne[0] = 256) can be a K-quant, like a real Q4_K_M file
    Spec("qwen3-q4_k_m", "qwen3", 256, 2, 4, 2, 64, 256, tied=False, file_type=15, rope_base=1000000.0,
         eps=1e-6, quant={"*": Q.Q4_K, "attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "output": Q.Q6_K}),
    # 6 layers: layers 0-4 sliding (window 8), layer 5 global; q is 64 wide over a 32-wide residual
    Spec("gemma3-f32", "gemma3", 32, 6, 4, 2, 16, 64, tied=True, rope_base=1000000.0, eps=1e-6,
         sliding_window=8),
    # like gemma-3-270m Q4_K_M: Q5_0/Q8_0 where ne[0] = 64, K-quants where ne[0] = 256; MQA
    Spec("gemma3-q4_k_m", "gemma3", 64, 6, 4, 1, 64, 256, tied=True, file_type=15, rope_base=1000000.0,
         eps=1e-6, sliding_window=8,
         quant={"*": Q.Q5_0, "attn_v": Q.Q8_0, "token_embd": Q.Q8_0, "attn_output": Q.Q4_K,
                "ffn_down": "Q6_K/Q5_K"}),
]


# ---------------------------------------------------------------- tokenizers (valid, tiny)

CORPUS = (
    "The quick brown fox jumps over the lazy dog. Halo Chat runs small language models on your own "
    "computer, with its own inference engine. A model reads the prompt, then writes one token at a time. "
    "Hello world! How are you today? I am fine, thank you. The weather is nice and the sun is shining. "
    "Tests compare the engine with a reference, position by position, logit by logit. "
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 2024. Code: def main(): return 42\n"
)
SPECIALS_BPE = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]      # appended after the BPE tokens
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
N_MERGES = 96


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (the byte-level BPE alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def train_merges() -> list[tuple[str, str]]:
    """Byte-level BPE merges learned from CORPUS (deterministic)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=256 + N_MERGES, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def bpe_vocab() -> dict:
    """gpt2-style vocab: 256 byte tokens (in byte order), one token per merge, then 3 control tokens."""
    merges = train_merges()
    tokens = list(byte_to_unicode().values()) + [a + b for a, b in merges]
    assert len(set(tokens)) == len(tokens)
    types = [1] * len(tokens) + [3] * len(SPECIALS_BPE)                 # 1 normal, 3 control
    return {"tokens": tokens + SPECIALS_BPE, "types": types, "merges": [f"{a} {b}" for a, b in merges]}


def spm_vocab() -> dict:
    """SentencePiece-style vocab (tokenizer.ggml.model = "llama"): controls, <0xNN> byte fallback,
    single characters, then pieces (from the BPE merges, spaces as U+2581) scored by merge rank."""
    unbyte = {c: b for b, c in byte_to_unicode().items()}
    pieces = ["\u2581"] + [chr(c) for c in range(ord("!"), ord("~") + 1)]
    for a, b in train_merges():
        text = bytes(unbyte[c] for c in a + b).decode("utf-8", errors="replace").replace(" ", "\u2581")
        if "\ufffd" not in text and text not in pieces:
            pieces.append(text)
    n_single = 1 + 94
    tokens = GEMMA_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * (len(GEMMA_SPECIALS) + 256) + [-1000.0] * n_single + [
        -float(i) for i in range(len(pieces) - n_single)]
    types = [3] * len(GEMMA_SPECIALS) + [6] * 256 + [1] * len(pieces)    # 3 control, 6 byte, 1 normal
    types[GEMMA_SPECIALS.index("<unk>")] = 2                             # 2 unknown
    return {"tokens": tokens, "scores": scores, "types": types}


# ---------------------------------------------------------------- tensors in GGUF layout

def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF -> GGUF row order for llama q/k (convert_hf_to_gguf.py LlamaModel.permute). w: (out, in)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF -> HF row order, the inverse of llama_permute."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensor_shapes(s: Spec, vocab: int) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape (rows = output features, cols = input features)."""
    q_dim, kv_dim = s.heads * s.head_dim, s.kv_heads * s.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, s.hidden)}
    for i in range(s.layers):
        b = f"blk.{i}."
        shapes |= {b + "attn_norm.weight": (s.hidden,), b + "attn_q.weight": (q_dim, s.hidden),
                   b + "attn_k.weight": (kv_dim, s.hidden), b + "attn_v.weight": (kv_dim, s.hidden),
                   b + "attn_output.weight": (s.hidden, q_dim), b + "ffn_norm.weight": (s.hidden,),
                   b + "ffn_gate.weight": (s.ffn, s.hidden), b + "ffn_up.weight": (s.ffn, s.hidden),
                   b + "ffn_down.weight": (s.hidden, s.ffn)}
        if s.arch == "qwen2":
            shapes |= {b + "attn_q.bias": (q_dim,), b + "attn_k.bias": (kv_dim,), b + "attn_v.bias": (kv_dim,)}
        if s.arch in ("qwen3", "gemma3"):
            shapes |= {b + "attn_q_norm.weight": (s.head_dim,), b + "attn_k_norm.weight": (s.head_dim,)}
        if s.arch == "gemma3":
            shapes |= {b + "post_attention_norm.weight": (s.hidden,), b + "post_ffw_norm.weight": (s.hidden,)}
    shapes["output_norm.weight"] = (s.hidden,)
    if not s.tied:
        shapes["output.weight"] = (vocab, s.hidden)
    return shapes


def quant_type(s: Spec, name: str, ndim: int) -> Q:
    if ndim == 1:
        return Q.F32                      # norms and biases stay F32, as llama.cpp keeps them
    layer = int(name.split(".")[1]) if name.startswith("blk.") else 0
    kind = name.split(".")[-2]            # attn_q, ffn_down, token_embd, output ...
    qt = s.quant.get(kind, s.quant.get("*", Q.F32))
    if isinstance(qt, str):               # "A/B": alternate by layer (even A, odd B)
        qt = Q[qt.split("/")[layer % 2]]
    return qt


def random_kquant_blocks(rng: np.random.Generator, qt: Q, n_blocks: int, std: float) -> np.ndarray:
    """Random but valid K-quant super-blocks (gguf-py cannot quantize K types); values ~ +-std."""
    def f16(x):
        return x.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)

    def rbytes(n):
        return rng.integers(0, 256, (n_blocks, n), dtype=np.uint8)

    jitter = rng.uniform(0.7, 1.3, n_blocks)
    if qt == Q.Q4_K:      # d, dmin, 12 packed 6-bit scales/mins, 128 nibbles: w = d*sc*q - dmin*m
        d = std / 190 * jitter
        return np.concatenate([f16(d), f16(d * 7.5), rbytes(12), rbytes(128)], axis=1)
    if qt == Q.Q5_K:      # d, dmin, scales, 32 high bits, 128 nibbles: q in 0..31
        d = std / 380 * jitter
        return np.concatenate([f16(d), f16(d * 15.5), rbytes(12), rbytes(32), rbytes(128)], axis=1)
    if qt == Q.Q6_K:      # 128 low nibbles, 64 high 2-bit pairs, 16 int8 scales, d: w = d*sc*(q-32)
        scales = rng.integers(-64, 64, (n_blocks, 16), dtype=np.int8).view(np.uint8)
        d = std / 680 * jitter
        return np.concatenate([rbytes(128), rbytes(64), scales, f16(d)], axis=1)
    raise ValueError(qt)


def make_tensor(rng: np.random.Generator, s: Spec, name: str, shape: tuple[int, ...]):
    """-> (data for GGUFWriter, its ggml type). Values are in GGUF convention (permuted, 1+w norms)."""
    qt = quant_type(s, name, len(shape))
    if len(shape) == 1:
        if name.endswith(".bias"):
            return rng.normal(0, 0.5, shape).astype(np.float32), qt
        if name.endswith("_norm.weight") and "attn_" in name and s.arch != "gemma3":
            return rng.uniform(0.5, 1.5, shape).astype(np.float32), qt   # qwen3 q/k norm
        # HF gemma w (stored 1 + w); llama-style norms are the 1 + w directly. gemma's final norm is
        # larger (as in the real model) so that its tied logits are not flat.
        mean = 1.0 if s.arch == "gemma3" and name == "output_norm.weight" else 0.0
        w = rng.normal(mean, 0.3, shape)
        return (1.0 + w).astype(np.float32), qt
    # Output projections 3x larger than 1/sqrt(fan_in) so the layers, not each token's own embedding,
    # dominate the residual stream: otherwise a tied model just predicts its input token again.
    kind = name.split(".")[-2]
    # gemma multiplies embeddings by sqrt(n_embd) = 8, so its table is 8x smaller than the others'.
    std = {"token_embd": 0.15 if s.arch == "gemma3" else 0.5, "output": 0.5, "attn_output": 3.0 / np.sqrt(shape[1]),
           "ffn_down": 3.0 / np.sqrt(shape[1])}.get(kind, 1.0 / np.sqrt(shape[1]))
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        n_blocks = shape[0] * shape[1] // 256
        raw = random_kquant_blocks(rng, qt, n_blocks, std)
        return raw.reshape(shape[0], -1), qt
    w = rng.normal(0, std, shape).astype(np.float32)
    return (w if qt == Q.F32 else gguf.quants.quantize(w, qt)), qt


# ---------------------------------------------------------------- GGUF writing

def write_gguf(s: Spec, path: Path) -> dict[str, np.ndarray]:
    """Write the file; return every tensor dequantized to float32 in GGUF convention."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(s.name.encode()).digest()[:4], "little"))
    vocab = spm_vocab() if s.arch == "gemma3" else bpe_vocab()
    n_vocab = len(vocab["tokens"])
    w = gguf.GGUFWriter(str(path), s.arch)
    a = s.arch
    w.add_name(f"tiny-random-{s.name}")
    w.add_context_length(s.context)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.eps)
    if a == "llama":
        w.add_vocab_size(n_vocab)
        w.add_rope_dimension_count(s.head_dim)
    if a in ("qwen3", "gemma3"):
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    if a == "gemma3":
        w.add_sliding_window(s.sliding_window)
    w.add_file_type(s.file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if a == "gemma3":
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(vocab["tokens"])
        w.add_token_scores(vocab["scores"])
        w.add_token_types(vocab["types"])
        w.add_bos_token_id(GEMMA_SPECIALS.index("<bos>"))
        w.add_eos_token_id(GEMMA_SPECIALS.index("<eos>"))
        w.add_unk_token_id(GEMMA_SPECIALS.index("<unk>"))
        w.add_pad_token_id(GEMMA_SPECIALS.index("<pad>"))
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(False)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre({"llama": "smollm", "qwen2": "qwen2", "qwen3": "qwen2"}[a])
        w.add_token_list(vocab["tokens"])
        w.add_token_types(vocab["types"])
        w.add_token_merges(vocab["merges"])
        w.add_bos_token_id(vocab["tokens"].index("<|im_start|>") if a == "llama" else
                           vocab["tokens"].index("<|endoftext|>"))
        w.add_eos_token_id(vocab["tokens"].index("<|im_end|>"))
        w.add_pad_token_id(vocab["tokens"].index("<|endoftext|>"))
        w.add_add_bos_token(False)
        w.add_chat_template(CHATML)

    deq: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(s, n_vocab).items():
        data, qt = make_tensor(rng, s, name, shape)
        if qt == Q.F32:
            w.add_tensor(name, data)
            deq[name] = data
        else:
            w.add_tensor(name, data, raw_dtype=qt)
            deq[name] = gguf.quants.dequantize(data, qt).reshape(shape).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return deq


# ---------------------------------------------------------------- transformers reference

def hf_model(s: Spec, n_vocab: int, deq: dict[str, np.ndarray]):
    import torch
    import transformers as tr

    common = dict(vocab_size=n_vocab, hidden_size=s.hidden, intermediate_size=s.ffn,
                  num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                  head_dim=s.head_dim, max_position_embeddings=s.context, rms_norm_eps=s.eps,
                  tie_word_embeddings=s.tied, attn_implementation="eager", dtype=torch.float32)
    rope = {"rope_type": "default", "rope_theta": s.rope_base}
    if s.arch == "llama":
        cfg = tr.LlamaConfig(rope_parameters=rope, **common)
    elif s.arch == "qwen2":
        cfg = tr.Qwen2Config(rope_parameters=rope, use_sliding_window=False, **common)
    elif s.arch == "qwen3":
        cfg = tr.Qwen3Config(rope_parameters=rope, use_sliding_window=False, **common)
    else:
        cfg = tr.Gemma3TextConfig(
            rope_parameters={"full_attention": rope,
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            sliding_window=s.sliding_window, query_pre_attn_scalar=s.head_dim,
            hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
            attn_logit_softcapping=None, **common)
    model = tr.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()

    norm_shift = 1.0 if s.arch == "gemma3" else 0.0

    def norm(name):
        return deq[name] - norm_shift

    sd = {"model.embed_tokens.weight": deq["token_embd.weight"], "model.norm.weight": norm("output_norm.weight"),
          "lm_head.weight": deq["token_embd.weight"] if s.tied else deq["output.weight"]}
    for i in range(s.layers):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        q, k = deq[b + "attn_q.weight"], deq[b + "attn_k.weight"]
        if s.arch == "llama":
            q, k = llama_unpermute(q, s.heads), llama_unpermute(k, s.kv_heads)
        sd |= {h + "self_attn.q_proj.weight": q, h + "self_attn.k_proj.weight": k,
               h + "self_attn.v_proj.weight": deq[b + "attn_v.weight"],
               h + "self_attn.o_proj.weight": deq[b + "attn_output.weight"],
               h + "mlp.gate_proj.weight": deq[b + "ffn_gate.weight"],
               h + "mlp.up_proj.weight": deq[b + "ffn_up.weight"],
               h + "mlp.down_proj.weight": deq[b + "ffn_down.weight"],
               h + "input_layernorm.weight": norm(b + "attn_norm.weight")}
        if s.arch == "qwen2":
            for x in "qkv":
                sd[h + f"self_attn.{x}_proj.bias"] = deq[b + f"attn_{x}.bias"]
        if s.arch in ("qwen3", "gemma3"):
            sd[h + "self_attn.q_norm.weight"] = norm(b + "attn_q_norm.weight")
            sd[h + "self_attn.k_norm.weight"] = norm(b + "attn_k_norm.weight")
        if s.arch == "gemma3":
            sd |= {h + "post_attention_layernorm.weight": norm(b + "post_attention_norm.weight"),
                   h + "pre_feedforward_layernorm.weight": norm(b + "ffn_norm.weight"),
                   h + "post_feedforward_layernorm.weight": norm(b + "post_ffw_norm.weight")}
        else:
            sd[h + "post_attention_layernorm.weight"] = norm(b + "ffn_norm.weight")
    expected = set(model.state_dict())
    if s.tied:
        sd.pop("lm_head.weight")
        expected.discard("lm_head.weight")
    assert set(sd) == expected, (set(sd) ^ expected)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    return model


def run_reference(model, prompt: list[int]) -> dict[str, np.ndarray]:
    """Prompt logits and a greedy continuation, each step a fresh full forward (no cache)."""
    import torch

    with torch.no_grad():
        ids = list(prompt)
        logits = model(torch.tensor([ids])).logits[0].numpy()          # (T, V)
        prompt_argmax = logits.argmax(-1)
        step_logits = [logits[-1]]
        for _ in range(GREEDY_STEPS - 1):
            ids.append(int(step_logits[-1].argmax()))
            step_logits.append(model(torch.tensor([ids])).logits[0, -1].numpy())
        ids.append(int(step_logits[-1].argmax()))
    steps = np.stack(step_logits).astype(np.float32)                    # (GREEDY_STEPS, V)
    top2 = np.sort(steps, axis=-1)[:, -2:]
    return {"prompt_ids": np.array(prompt, np.int32),
            "prompt_logits_last": logits[-LAST_POSITIONS:].astype(np.float32),
            "prompt_argmax": prompt_argmax.astype(np.int32),
            "greedy_ids": np.array(ids[len(prompt):], np.int32),
            "greedy_logits": steps,
            "greedy_margins": (top2[:, 1] - top2[:, 0]).astype(np.float32)}


def prompt_for(s: Spec, n_vocab: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    if s.arch == "gemma3":   # BOS first, then ordinary pieces (past the specials and byte tokens)
        return [GEMMA_SPECIALS.index("<bos>")] + rng.integers(len(GEMMA_SPECIALS) + 256, n_vocab,
                                                              PROMPT_LEN - 1).tolist()
    return rng.integers(0, n_vocab - 3, PROMPT_LEN).tolist()            # skip the 3 specials at the end


def cross_check_with_hf_gguf_loader(s: Spec, path: Path, model, prompt: list[int]) -> float:
    """transformers' own GGUF loader must read our file into the same model (sanity of the exporter)."""
    import torch
    import transformers as tr

    # transformers' GGUF config mapping ignores attention.key_length for qwen3/gemma3 (it assumes the
    # real models' head_dim) and leaves gemma3's query_pre_attn_scalar at 256: pass them explicitly.
    extra = {"head_dim": s.head_dim} if s.arch in ("qwen3", "gemma3") else {}
    if s.arch == "gemma3":
        extra["query_pre_attn_scalar"] = s.head_dim
    other = tr.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                    dtype=torch.float32,
                                                    attn_implementation="eager", **extra).eval()
    with torch.no_grad():
        a = model(torch.tensor([prompt])).logits
        b = other(torch.tensor([prompt])).logits
    return float((a - b).abs().max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--only", nargs="*", help="spec names to build (default: all)")
    ap.add_argument("--no-cross-check", action="store_true")
    args = ap.parse_args()
    import torch

    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for s in SPECS:
        if args.only and s.name not in args.only:
            continue
        path = args.out / f"tiny-{s.name}.gguf"
        deq = write_gguf(s, path)
        n_vocab = deq["token_embd.weight"].shape[0]
        model = hf_model(s, n_vocab, deq)
        for seed in range(200):   # first prompt whose greedy steps are clear and not one repeated id
            prompt = prompt_for(s, n_vocab, seed)
            ref = run_reference(model, prompt)
            if ref["greedy_margins"].min() >= MIN_MARGIN and len(set(ref["greedy_ids"].tolist())) >= 3:
                break
        else:
            raise SystemExit(f"{s.name}: no prompt with clear, varied greedy steps; retune the weights")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        np.savez_compressed(args.out / f"tiny-{s.name}.golden.npz", gguf_sha256=np.array(digest), **ref)
        cross = None if args.no_cross_check else cross_check_with_hf_gguf_loader(s, path, model, prompt)
        manifest[s.name] = {"gguf": path.name, "sha256": digest, "bytes": path.stat().st_size,
                            "types": sorted({quant_type(s, n, len(v.shape)).name for n, v in deq.items()}),
                            "min_margin": float(ref["greedy_margins"].min()), "hf_gguf_loader_max_diff": cross}
        print(s.name, json.dumps(manifest[s.name]))
        print("   greedy", ref["greedy_ids"].tolist(), "margins", np.round(ref["greedy_margins"], 3).tolist())


if __name__ == "__main__":
    main()
