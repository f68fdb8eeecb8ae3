"""Write tiny random-weight Qwen3.5 (GGUF arch `qwen35`) models and their transformers golden logits.

Run in a venv that has torch + transformers>=5.2 (the committed tests do not need them):

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch 'transformers>=5.2' gguf numpy tokenizers
    /tmp/torchvenv/bin/python tests/tools/make_tiny_qwen35.py          # writes tests/golden/data/

The model is made in transformers (Qwen3_5ForCausalLM, text config: 3 Gated-DeltaNet layers, then one
full-attention layer) and written the way llama.cpp's converter writes Qwen3.5:
- every RMSNorm weight except the DeltaNet's gated norm stored as 1 + w;
- A_log stored as ssm_a = -exp(A_log); dt_bias as ssm_dt.bias; conv1d squeezed to [channels, kernel];
- the value heads reordered from grouped-by-key-head (transformers) to tiled order (value head h reads key
  head h % Hk), in in_proj_qkv's v rows, in_proj_z, in_proj_a/b, A_log, dt_bias, the conv's v channels
  and out_proj's columns;
- q_proj kept whole as attn_q: per head [q_h, gate_h] (the output gate).
The reference is transformers in float32 on weights DEQUANTIZED from the file (quantized variant: the
matrices are read back from the file and un-reordered into the model), so it is exact math on the numbers
an engine reads. The prompt (80 tokens) spans two delta-rule chunks of 64.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import CHATML, DATA_DIR, bpe_vocab  # noqa: E402

PROMPT_LEN = 80
GREEDY_STEPS = 32
LAST_POSITIONS = 4
MIN_MARGIN = 0.1


@dataclass(frozen=True)
class Spec:
    name: str
    tied: bool
    quant: dict            # GGUF tensor kind -> type for matrices ("*" default); F32 when empty
    file_type: int


SPECS = [Spec("qwen35-f32", tied=True, quant={}, file_type=0),
         Spec("qwen35-q8_0", tied=False, quant={"*": Q.Q8_0, "ffn_gate": Q.Q4_0, "ffn_up": Q.Q4_0}, file_type=7)]
DIMS = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=256)
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1]}


def hf_model(spec: Spec, n_vocab: int):
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(vocab_size=n_vocab, tie_word_embeddings=spec.tied, rope_parameters=dict(ROPE), **DIMS)
    cfg._attn_implementation = "eager"
    model = Qwen3_5ForCausalLM(cfg).eval().float()
    gen = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(spec.name.encode()).digest()[:4], "little"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.3, 3.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.3)
            elif name.endswith("norm.weight"):                       # (1 + w) norms
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            else:                                                    # projections; outputs 3x larger
                scale = 3.0 if any(k in name for k in ("o_proj", "out_proj", "down_proj")) else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * scale / np.sqrt(p.shape[1]))
    return model


def _reorder(t: np.ndarray, axis: int, nk: int, nvpk: int, hd: int, inverse: bool = False) -> np.ndarray:
    """Value heads grouped by key head [k0v0..k0v(r-1), k1v0..] <-> tiled [k0v0, k1v0, .., k0v1, ..]."""
    t = np.moveaxis(t, axis, 0)
    rest = t.shape[1:]
    src = (nvpk, nk) if inverse else (nk, nvpk)
    t = t.reshape(*src, hd, *rest).swapaxes(0, 1).reshape(nk * nvpk * hd, *rest)
    return np.moveaxis(t, 0, axis)


def gguf_tensors(model) -> dict[str, np.ndarray]:
    """transformers state dict -> GGUF tensors (numpy order), as llama.cpp's converter writes them."""
    d = DIMS
    nk, nv, dk, dv = (d["linear_num_key_heads"], d["linear_num_value_heads"], d["linear_key_head_dim"],
                      d["linear_value_head_dim"])
    r = nv // nk
    out = {}
    for name, t in model.state_dict().items():
        a = t.detach().numpy().astype(np.float32)
        if name == "lm_head.weight":
            if not model.config.tie_word_embeddings:
                out["output.weight"] = a
            continue
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = a
            continue
        if name == "model.norm.weight":
            out["output_norm.weight"] = 1.0 + a
            continue
        i = int(name.split(".")[2])
        p, leaf = f"blk.{i}.", name.split(".", 3)[3]
        simple = {"input_layernorm.weight": ("attn_norm.weight", 1), "post_attention_layernorm.weight":
                  ("post_attention_norm.weight", 1), "mlp.gate_proj.weight": ("ffn_gate.weight", 0),
                  "mlp.up_proj.weight": ("ffn_up.weight", 0), "mlp.down_proj.weight": ("ffn_down.weight", 0),
                  "self_attn.q_proj.weight": ("attn_q.weight", 0), "self_attn.k_proj.weight": ("attn_k.weight", 0),
                  "self_attn.v_proj.weight": ("attn_v.weight", 0), "self_attn.o_proj.weight": ("attn_output.weight", 0),
                  "self_attn.q_norm.weight": ("attn_q_norm.weight", 1), "self_attn.k_norm.weight":
                  ("attn_k_norm.weight", 1), "linear_attn.norm.weight": ("ssm_norm.weight", 0)}
        if leaf in simple:
            gname, plus_one = simple[leaf]
            out[p + gname] = a + 1.0 if plus_one else a
        elif leaf == "linear_attn.in_proj_qkv.weight":
            qk = 2 * nk * dk
            out[p + "attn_qkv.weight"] = np.concatenate([a[:qk], _reorder(a[qk:], 0, nk, r, dv)])
        elif leaf == "linear_attn.in_proj_z.weight":
            out[p + "attn_gate.weight"] = _reorder(a, 0, nk, r, dv)
        elif leaf == "linear_attn.in_proj_b.weight":
            out[p + "ssm_beta.weight"] = _reorder(a, 0, nk, r, 1)
        elif leaf == "linear_attn.in_proj_a.weight":
            out[p + "ssm_alpha.weight"] = _reorder(a, 0, nk, r, 1)
        elif leaf == "linear_attn.A_log":
            out[p + "ssm_a"] = _reorder(-np.exp(a), 0, nk, r, 1)
        elif leaf == "linear_attn.dt_bias":
            out[p + "ssm_dt.bias"] = _reorder(a, 0, nk, r, 1)
        elif leaf == "linear_attn.conv1d.weight":
            c = a.squeeze(1)                                           # [C, K]
            qk = 2 * nk * dk
            out[p + "ssm_conv1d.weight"] = np.concatenate([c[:qk], _reorder(c[qk:], 0, nk, r, dv)])
        elif leaf == "linear_attn.out_proj.weight":
            out[p + "ssm_out.weight"] = _reorder(a, 1, nk, r, dv)
        else:
            raise KeyError(name)
    return out


def load_back(model, deq: dict[str, np.ndarray]) -> None:
    """Put the (dequantized) file matrices back into the model, undoing the reorders: the reference then
    computes on exactly the numbers in the file. Vectors are F32 in the file and already exact."""
    import torch

    d = DIMS
    nk, nv, dk, dv = (d["linear_num_key_heads"], d["linear_num_value_heads"], d["linear_key_head_dim"],
                      d["linear_value_head_dim"])
    r = nv // nk
    sd = model.state_dict()
    new = {}
    for name in sd:
        if name == "model.embed_tokens.weight":
            new[name] = deq["token_embd.weight"]
        elif name == "lm_head.weight" and "output.weight" in deq:
            new[name] = deq["output.weight"]
        elif ".layers." in name and "proj" in name:
            i = int(name.split(".")[2])
            p, leaf = f"blk.{i}.", name.split(".", 3)[3]
            g = {"mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
                 "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
                 "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output"}.get(leaf)
            if g:
                new[name] = deq[p + g + ".weight"]
            elif leaf == "linear_attn.in_proj_qkv.weight":
                a, qk = deq[p + "attn_qkv.weight"], 2 * nk * dk
                new[name] = np.concatenate([a[:qk], _reorder(a[qk:], 0, nk, r, dv, inverse=True)])
            elif leaf == "linear_attn.in_proj_z.weight":
                new[name] = _reorder(deq[p + "attn_gate.weight"], 0, nk, r, dv, inverse=True)
            elif leaf == "linear_attn.in_proj_b.weight":
                new[name] = _reorder(deq[p + "ssm_beta.weight"], 0, nk, r, 1, inverse=True)
            elif leaf == "linear_attn.in_proj_a.weight":
                new[name] = _reorder(deq[p + "ssm_alpha.weight"], 0, nk, r, 1, inverse=True)
            elif leaf == "linear_attn.out_proj.weight":
                new[name] = _reorder(deq[p + "ssm_out.weight"], 1, nk, r, dv, inverse=True)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in new.items()}, strict=False)


def quant_type(spec: Spec, name: str, a: np.ndarray) -> Q:
    if a.ndim == 1 or "ssm_conv1d" in name or not spec.quant:
        return Q.F32
    kind = name.split(".")[-2]
    return spec.quant.get(kind, spec.quant["*"])


def write_gguf(spec: Spec, path: Path, tensors: dict[str, np.ndarray], vocab: dict) -> dict[str, np.ndarray]:
    d = DIMS
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_name(f"tiny-random-{spec.name}")
    w.add_context_length(d["max_position_embeddings"])
    w.add_embedding_length(d["hidden_size"])
    w.add_block_count(d["num_hidden_layers"])
    w.add_feed_forward_length(d["intermediate_size"])
    w.add_head_count(d["num_attention_heads"])
    w.add_head_count_kv(d["num_key_value_heads"])
    w.add_key_length(d["head_dim"])
    w.add_value_length(d["head_dim"])
    w.add_rope_freq_base(ROPE["rope_theta"])
    w.add_rope_dimension_count(int(d["head_dim"] * ROPE["partial_rotary_factor"]))
    w.add_rope_dimension_sections(ROPE["mrope_section"] + [0])
    w.add_layer_norm_rms_eps(d["rms_norm_eps"])
    w.add_ssm_conv_kernel(d["linear_conv_kernel_dim"])
    w.add_ssm_state_size(d["linear_key_head_dim"])
    w.add_ssm_group_count(d["linear_num_key_heads"])
    w.add_ssm_time_step_rank(d["linear_num_value_heads"])
    w.add_ssm_inner_size(d["linear_value_head_dim"] * d["linear_num_value_heads"])
    w.add_full_attention_interval(4)
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
    for name, a in tensors.items():
        qt = quant_type(spec, name, a)
        if qt == Q.F32:
            w.add_tensor(name, a)
            deq[name] = a
        else:
            data = gguf.quants.quantize(a, qt)
            w.add_tensor(name, data, raw_dtype=qt)
            deq[name] = gguf.quants.dequantize(data, qt).reshape(a.shape).astype(np.float32)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    args = ap.parse_args()
    vocab = bpe_vocab()
    n_vocab = len(vocab["tokens"])
    for spec in SPECS:
        model = hf_model(spec, n_vocab)
        path = args.out / f"tiny-{spec.name}.gguf"
        deq = write_gguf(spec, path, gguf_tensors(model), vocab)
        load_back(model, deq)
        for seed in range(300):     # first prompt whose greedy steps are clear and varied
            prompt = np.random.default_rng(seed).integers(0, n_vocab - 3, PROMPT_LEN).tolist()
            ref = run_reference(model, prompt)
            if ref["greedy_margins"].min() >= MIN_MARGIN and len(set(ref["greedy_ids"].tolist())) >= 5:
                break
        else:
            raise SystemExit(f"{spec.name}: no prompt with clear, varied greedy steps")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        np.savez_compressed(args.out / f"tiny-{spec.name}.golden.npz", gguf_sha256=np.array(digest), **ref)
        print(spec.name, path.stat().st_size, "bytes; seed", seed, "greedy", ref["greedy_ids"].tolist(),
              "min margin", float(ref["greedy_margins"].min()))


if __name__ == "__main__":
    main()
