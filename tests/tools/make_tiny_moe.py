"""Write tiny random-weight mixture-of-experts GGUFs (qwen3moe, gpt-oss) and their transformers goldens.

Run in a venv that has torch + transformers>=5.2 (the committed tests do not need them):

    python3 -m venv /tmp/moe-venv
    /tmp/moe-venv/bin/pip install torch==2.13.0 'transformers>=5.2' gguf numpy tokenizers
    /tmp/moe-venv/bin/python tests/tools/make_tiny_moe.py            # writes tests/golden/data/

The model is made in transformers (Qwen3MoeForCausalLM / GptOssForCausalLM) with seeded random weights and
written the way llama.cpp's converter writes the real architecture:
- qwen3moe: experts' fused gate_up_proj [n, 2F, E] split into ffn_gate_exps / ffn_up_exps [n, F, E]
  (numpy order), down_proj [n, E, F] as ffn_down_exps, the router as ffn_gate_inp; q/k unpermuted (neox).
- gpt-oss: gate_up_proj [n, E, 2F] holds gate and up interleaved by column: gate = [..., ::2], up =
  [..., 1::2], transposed to [n, F, E]; down_proj [n, F, E] transposed to [n, E, F]; their biases as
  ffn_*_exps.bias; the router with its bias; attention sinks as attn_sinks.weight; post_attention_layernorm
  (the pre-FFN norm) as post_attention_norm; q/k/v/o biases.
The reference is transformers in float32, eager attention, on the weights READ BACK from the file (quantized
experts dequantized with gguf.quants), so it is exact math on the numbers an engine reads.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import CHATML, DATA_DIR, bpe_vocab  # noqa: E402

PROMPT_LEN = 24
GREEDY_STEPS = 32
LAST_POSITIONS = 4
MIN_MARGIN = 0.1
CONTEXT = 256


@dataclass(frozen=True)
class Spec:
    name: str
    arch: str                       # gguf architecture
    quant: dict = field(default_factory=dict)   # tensor kind -> type for matrices ("*" default); F32 when absent
    file_type: int = 0
    tied: bool = False


MXFP4_EXPERTS = {"ffn_gate_exps": Q.MXFP4, "ffn_up_exps": Q.MXFP4, "ffn_down_exps": Q.MXFP4}
SPECS = [
    Spec("qwen3moe-f32", "qwen3moe"),
    Spec("qwen3moe-q8_0", "qwen3moe", {"*": Q.Q8_0, "ffn_gate_exps": Q.Q4_0, "ffn_up_exps": Q.Q4_0}, file_type=7),
    # like ggml-org's gpt-oss-20b-mxfp4.gguf: MXFP4 experts (llama_ftype 38), the rest kept wide
    Spec("gptoss-mxfp4", "gpt-oss", MXFP4_EXPERTS, file_type=38),
    Spec("gptoss-q8_0", "gpt-oss", {"*": Q.Q8_0} | MXFP4_EXPERTS, file_type=38),
]
QWEN3MOE = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
                norm_topk_prob=True, decoder_sparse_step=1, rms_norm_eps=1e-6, max_position_embeddings=CONTEXT)
QWEN3MOE_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
# gpt-oss: 4 layers (even ones slide over 8 positions, shorter than the prompt), top 4 of 8 experts; YaRN as
# the real model's config has it (factor 32 over 4096, beta 32/1, not truncated), which with head_dim 16
# puts the ramp across dims 2..4 of 8
GPTOSS = dict(hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=4, sliding_window=8,
              rms_norm_eps=1e-5, max_position_embeddings=CONTEXT)
GPTOSS_ROPE = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
               "truncate": False, "original_max_position_embeddings": 4096}


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def hf_model(spec: Spec, n_vocab: int):
    import torch
    import transformers as tr

    if spec.arch == "gpt-oss":
        cfg = tr.GptOssConfig(vocab_size=n_vocab, tie_word_embeddings=spec.tied, rope_parameters=dict(GPTOSS_ROPE),
                              **GPTOSS)
    else:
        cfg = tr.Qwen3MoeConfig(vocab_size=n_vocab, tie_word_embeddings=spec.tied,
                                rope_parameters=dict(QWEN3MOE_ROPE), **QWEN3MOE)
    cfg._attn_implementation = "eager"
    model = tr.AutoModelForCausalLM.from_config(cfg).eval().float()
    gen = torch.Generator().manual_seed(_seed(spec.name))
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[-1]
            if name.endswith("experts.gate_up_proj") and spec.arch == "gpt-oss":   # [n, E, 2F]: x @ W
                std, mean = 3.0 / np.sqrt(p.shape[1]), 0.0      # large enough that the clamp at 7 acts
            elif name.endswith("experts.down_proj") and spec.arch == "gpt-oss":    # [n, F, E]
                std, mean = 3.0 / np.sqrt(p.shape[1]), 0.0
            elif name.endswith("sinks"):
                std, mean = 1.0, 0.0
            elif name.endswith("bias"):
                std, mean = 0.3, 0.0
            elif name.endswith("router.weight"):
                std, mean = 2.0 / np.sqrt(fan_in), 0.0
            elif name.endswith("norm.weight"):
                std, mean = 0.3, 1.0
            elif "embed_tokens" in name or "lm_head" in name:
                std, mean = 0.5, 0.0
            elif name.endswith("mlp.gate.weight"):             # router: clear, varied expert choices
                std, mean = 2.0 / np.sqrt(fan_in), 0.0
            elif "o_proj" in name or "down_proj" in name:      # outputs 3x larger: layers dominate the residual
                std, mean = 3.0 / np.sqrt(fan_in), 0.0
            else:
                std, mean = 1.0 / np.sqrt(fan_in), 0.0
            p.copy_(mean + torch.randn(p.shape, generator=gen) * std)
    return model


def gguf_tensors(spec: Spec, model) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array in numpy order, as llama.cpp's converter lays them out."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if spec.arch == "gpt-oss":
        return _gptoss_tensors(spec, sd)
    f = QWEN3MOE["moe_intermediate_size"]
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not spec.tied:
        out["output.weight"] = sd["lm_head.weight"]
    for i in range(QWEN3MOE["num_hidden_layers"]):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        gate_up = sd[h + "mlp.experts.gate_up_proj"]                     # [n, 2F, E]: gate rows, then up rows
        out |= {b + "attn_norm.weight": sd[h + "input_layernorm.weight"],
                b + "attn_q.weight": sd[h + "self_attn.q_proj.weight"],
                b + "attn_k.weight": sd[h + "self_attn.k_proj.weight"],
                b + "attn_v.weight": sd[h + "self_attn.v_proj.weight"],
                b + "attn_q_norm.weight": sd[h + "self_attn.q_norm.weight"],
                b + "attn_k_norm.weight": sd[h + "self_attn.k_norm.weight"],
                b + "attn_output.weight": sd[h + "self_attn.o_proj.weight"],
                b + "ffn_norm.weight": sd[h + "post_attention_layernorm.weight"],
                b + "ffn_gate_inp.weight": sd[h + "mlp.gate.weight"],
                b + "ffn_gate_exps.weight": np.ascontiguousarray(gate_up[:, :f]),
                b + "ffn_up_exps.weight": np.ascontiguousarray(gate_up[:, f:]),
                b + "ffn_down_exps.weight": sd[h + "mlp.experts.down_proj"]}
    return out


def _gptoss_names(i: int) -> dict[str, str]:
    """transformers name -> GGUF name for the one-to-one tensors of gpt-oss layer i."""
    h, b = f"model.layers.{i}.", f"blk.{i}."
    names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight":
             "post_attention_norm.weight", "self_attn.sinks": "attn_sinks.weight",
             "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
             "mlp.experts.down_proj_bias": "ffn_down_exps.bias"}
    for x, g in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
        names |= {f"self_attn.{x}_proj.weight": f"{g}.weight", f"self_attn.{x}_proj.bias": f"{g}.bias"}
    return {h + k: b + v for k, v in names.items()}


def _gptoss_tensors(spec: Spec, sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"],
           "output.weight": sd["lm_head.weight"]}
    for i in range(GPTOSS["num_hidden_layers"]):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        out |= {g: sd[t] for t, g in _gptoss_names(i).items()}
        gate_up, gate_up_bias = sd[h + "mlp.experts.gate_up_proj"], sd[h + "mlp.experts.gate_up_proj_bias"]
        out |= {b + "ffn_gate_exps.weight": np.ascontiguousarray(gate_up[..., ::2].transpose(0, 2, 1)),
                b + "ffn_up_exps.weight": np.ascontiguousarray(gate_up[..., 1::2].transpose(0, 2, 1)),
                b + "ffn_gate_exps.bias": np.ascontiguousarray(gate_up_bias[:, ::2]),
                b + "ffn_up_exps.bias": np.ascontiguousarray(gate_up_bias[:, 1::2]),
                b + "ffn_down_exps.weight": np.ascontiguousarray(sd[h + "mlp.experts.down_proj"].transpose(0, 2, 1))}
    return out


def _gptoss_state(deq: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sd = {"model.embed_tokens.weight": deq["token_embd.weight"], "model.norm.weight": deq["output_norm.weight"],
          "lm_head.weight": deq["output.weight"]}
    for i in range(GPTOSS["num_hidden_layers"]):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        sd |= {t: deq[g] for t, g in _gptoss_names(i).items()}
        n, f, e = deq[b + "ffn_gate_exps.weight"].shape
        gate_up = np.empty((n, e, 2 * f), np.float32)
        gate_up[..., ::2] = deq[b + "ffn_gate_exps.weight"].transpose(0, 2, 1)
        gate_up[..., 1::2] = deq[b + "ffn_up_exps.weight"].transpose(0, 2, 1)
        gate_up_bias = np.empty((n, 2 * f), np.float32)
        gate_up_bias[:, ::2], gate_up_bias[:, 1::2] = deq[b + "ffn_gate_exps.bias"], deq[b + "ffn_up_exps.bias"]
        sd |= {h + "mlp.experts.gate_up_proj": gate_up, h + "mlp.experts.gate_up_proj_bias": gate_up_bias,
               h + "mlp.experts.down_proj": deq[b + "ffn_down_exps.weight"].transpose(0, 2, 1)}
    return sd


def load_back(spec: Spec, model, deq: dict[str, np.ndarray]) -> None:
    """Put the file's (dequantized) numbers back into the model: the inverse of gguf_tensors."""
    import torch

    if spec.arch == "gpt-oss":
        sd = _gptoss_state(deq)
        expected = set(model.state_dict())
        assert set(sd) == expected, set(sd) ^ expected
        model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
        return
    sd = {"model.embed_tokens.weight": deq["token_embd.weight"], "model.norm.weight": deq["output_norm.weight"]}
    if not spec.tied:
        sd["lm_head.weight"] = deq["output.weight"]
    for i in range(QWEN3MOE["num_hidden_layers"]):
        h, b = f"model.layers.{i}.", f"blk.{i}."
        sd |= {h + "input_layernorm.weight": deq[b + "attn_norm.weight"],
               h + "self_attn.q_proj.weight": deq[b + "attn_q.weight"],
               h + "self_attn.k_proj.weight": deq[b + "attn_k.weight"],
               h + "self_attn.v_proj.weight": deq[b + "attn_v.weight"],
               h + "self_attn.q_norm.weight": deq[b + "attn_q_norm.weight"],
               h + "self_attn.k_norm.weight": deq[b + "attn_k_norm.weight"],
               h + "self_attn.o_proj.weight": deq[b + "attn_output.weight"],
               h + "post_attention_layernorm.weight": deq[b + "ffn_norm.weight"],
               h + "mlp.gate.weight": deq[b + "ffn_gate_inp.weight"],
               h + "mlp.experts.gate_up_proj": np.concatenate([deq[b + "ffn_gate_exps.weight"],
                                                               deq[b + "ffn_up_exps.weight"]], axis=1),
               h + "mlp.experts.down_proj": deq[b + "ffn_down_exps.weight"]}
    expected = set(model.state_dict())
    assert set(sd) == expected, set(sd) ^ expected
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})


def quant_type(spec: Spec, name: str, array: np.ndarray) -> Q:
    if array.ndim == 1 or name.endswith(".bias") or "ffn_gate_inp" in name or "attn_sinks" in name:
        return Q.F32                       # vectors, biases and the router stay F32 (as llama.cpp keeps them)
    kind = name.split(".")[-2]
    return spec.quant.get(kind, spec.quant.get("*", Q.F32))


def write_gguf(spec: Spec, path: Path, tensors: dict[str, np.ndarray], vocab: dict) -> dict[str, np.ndarray]:
    """Write the file; return every tensor as the file holds it, dequantized to float32."""
    oss = spec.arch == "gpt-oss"
    c, rope = (GPTOSS, GPTOSS_ROPE) if oss else (QWEN3MOE, QWEN3MOE_ROPE)
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(f"tiny-random-{spec.name}")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["num_local_experts" if oss else "num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c["intermediate_size" if oss else "moe_intermediate_size"])
    if oss:      # as llama.cpp's converter writes gpt-oss
        w.add_sliding_window(c["sliding_window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_file_type(spec.file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_merges(vocab["merges"])
    w.add_bos_token_id(vocab["tokens"].index("<|endoftext|>"))
    w.add_eos_token_id(vocab["tokens"].index("<|im_end|>"))
    w.add_pad_token_id(vocab["tokens"].index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    deq = {}
    for name, array in tensors.items():
        qt = quant_type(spec, name, array)
        if qt == Q.F32:
            w.add_tensor(name, np.ascontiguousarray(array, np.float32))
            deq[name] = array
        else:
            raw = gguf.quants.quantize(array, qt)
            w.add_tensor(name, raw, raw_dtype=qt)
            deq[name] = gguf.quants.dequantize(raw, qt).reshape(array.shape).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return deq


def run_reference(model, prompt: list[int]) -> dict[str, np.ndarray]:
    """Prompt logits and a greedy continuation, each step a fresh full forward (no cache)."""
    import torch

    with torch.no_grad():
        ids = list(prompt)
        logits = model(torch.tensor([ids])).logits[0].numpy()
        step_logits = [logits[-1]]
        for _ in range(GREEDY_STEPS - 1):
            ids.append(int(step_logits[-1].argmax()))
            step_logits.append(model(torch.tensor([ids])).logits[0, -1].numpy())
        ids.append(int(step_logits[-1].argmax()))
    steps = np.stack(step_logits).astype(np.float32)
    top2 = np.sort(steps, axis=-1)[:, -2:]
    return {"prompt_ids": np.array(prompt, np.int32),
            "prompt_logits_last": logits[-LAST_POSITIONS:].astype(np.float32),
            "prompt_argmax": logits.argmax(-1).astype(np.int32),
            "greedy_ids": np.array(ids[len(prompt):], np.int32),
            "greedy_logits": steps,
            "greedy_margins": (top2[:, 1] - top2[:, 0]).astype(np.float32)}


def build(spec: Spec, out: Path) -> None:
    import torch

    torch.manual_seed(0)
    vocab = bpe_vocab()
    n_vocab = len(vocab["tokens"])
    model = hf_model(spec, n_vocab)
    path = out / f"tiny-{spec.name}.gguf"
    deq = write_gguf(spec, path, gguf_tensors(spec, model), vocab)
    load_back(spec, model, deq)
    rng = np.random.default_rng(_seed(spec.name))
    for _ in range(300):       # the first prompt whose greedy steps are clear and varied
        prompt = rng.integers(0, n_vocab - 3, PROMPT_LEN).tolist()
        ref = run_reference(model, prompt)
        if ref["greedy_margins"].min() >= MIN_MARGIN and len(set(ref["greedy_ids"].tolist())) >= 6:
            break
    else:
        raise SystemExit(f"{spec.name}: no prompt with clear, varied greedy steps; retune the weights")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    np.savez_compressed(out / f"tiny-{spec.name}.golden.npz", gguf_sha256=np.array(digest), **ref)
    print(spec.name, path.stat().st_size, "bytes; greedy", ref["greedy_ids"].tolist(),
          "min margin", float(ref["greedy_margins"].min()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--only", nargs="*", help="spec names to build (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        if not args.only or spec.name in args.only:
            build(spec, args.out)


if __name__ == "__main__":
    main()
