"""A shape-alike gpt-oss-20b GGUF for the GPU benchmark: the published file's metadata, tensor names, shapes and
quant types with random weights (speed does not depend on the values).

No skeleton of gpt-oss-20b exists in shared/reference/skeletons, and shared's shape_alike.py has no MXFP4 in
its block table, so both steps live here, in shape_alike.py's skeleton format ({"kv": [[key, value types,
value]], "tensors": [[name, ggml shape (ne), type name]]} as JSON in the npz's "meta"):

    python tests/tools/make_gptoss_shape_alike.py skeleton gpt-oss-20b-shaped-mxfp4.npz
        here: the published config and tensor table (tests/unit/published_shapes.py: GPTOSS_20B and
        gptoss_20b_tensors, ggml-org's gpt-oss-20b-mxfp4.gguf) plus the o200k_harmony tokenizer block as
        llama.cpp's converter writes it (tests/tools/gptoss_vocab.py; needs tiktoken + bpe-openai). ~5 MB.
    python tests/tools/make_gptoss_shape_alike.py build gpt-oss-20b-shaped-mxfp4.npz OUT.gguf [--stable]
        on the device machine (numpy + gguf only): streams tensor by tensor (memory ~ one expert stack,
        141 MB), 12.1 GB of disk.

The recipe, from openai/gpt-oss-20b's published config as llama.cpp's converter writes it: hidden 2880,
24 layers, 64 query / 8 KV heads of 64, 32 experts (4 used) of FFN 2880, vocabulary 201,088, rope base
150,000 with YaRN factor 32 over 4,096 positions, sliding window 128 on the even layers, RMS eps 1e-5.
Tensor types as ggml-org's file has them: MXFP4 experts, Q8_0 attention, token embedding and output, F32
norms, biases, sinks and router (its 11.27 GiB / 20.91 B parameters that llama-bench reports follow from
exactly these types). Values: F32 norms 1, other F32 N(0, 0.02); Q8_0 random int8 with the float16 scale
2.7e-4 (std ~0.02, shape_alike.py --stable's choice); MXFP4 random e2m1 codes with the e8m0 exponent 120
(scale 2^-8 on ggml's doubled values: std ~0.023). The forward pass then stays finite and routes normally.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

NAME = "gpt-oss-20b-shaped-mxfp4"
RMS_EPS = 1e-5
FILE_TYPE_MXFP4_MOE = 38          # llama_ftype of ggml-org's file
Q8_0_SCALE = 2.7e-4
MXFP4_EXPONENT = 120
# bytes per block, elements per block: the three types this file holds (engine.gguf.types.BLOCK_LAYOUT's values;
# not imported so that `build` runs with numpy + gguf alone)
LAYOUT = {"F32": (4, 1), "Q8_0": (34, 32), "MXFP4": (17, 32)}


def _value_types(value) -> list[int]:
    """shape_alike.py's type list of a metadata value: GGUFValueType ids, [ARRAY, element type] for lists."""
    uint32, float32, boolean, string, array, int32 = 4, 6, 7, 8, 9, 5
    if isinstance(value, list):
        return [array, string if isinstance(value[0], str) else int32]
    if isinstance(value, bool):
        return [boolean]
    if isinstance(value, int):
        return [uint32]
    return [float32] if isinstance(value, float) else [string]


def skeleton(out: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(root), str(root / "tests" / "unit"), str(root / "tests" / "tools")]
    from gptoss_vocab import reference_encoding, tokenizer_metadata
    from published_shapes import GPTOSS_20B, gptoss_20b_tensors

    meta = dict(GPTOSS_20B)
    meta.update({"general.name": NAME, "general.file_type": FILE_TYPE_MXFP4_MOE,
                 "general.quantization_version": 2, "gpt-oss.attention.layer_norm_rms_epsilon": RMS_EPS})
    meta.update(tokenizer_metadata(reference_encoding()))
    kv = [[k, _value_types(v), v] for k, v in meta.items()]
    tensors = [[t.name, [int(x) for x in t.ne], t.ggml_type.name] for t in gptoss_20b_tensors()]
    np.savez_compressed(out, meta=json.dumps({"kv": kv, "tensors": tensors}))


def _f32(rng, name: str, n: int) -> np.ndarray:
    return np.ones(n, np.float32) if "norm" in name else (rng.standard_normal(n) * 0.02).astype(np.float32)


def _blocks(rng, qt: str, n_blocks: int) -> np.ndarray:
    nbytes, _ = LAYOUT[qt]
    raw = np.frombuffer(bytearray(rng.bytes(n_blocks * nbytes)), np.uint8).reshape(n_blocks, nbytes)
    if qt == "Q8_0":
        raw[:, 0:2] = np.frombuffer(np.float16(Q8_0_SCALE).tobytes(), np.uint8)
    else:
        raw[:, 0] = MXFP4_EXPONENT
    return raw


def build(skel: Path, out: Path) -> None:
    import gguf

    meta = json.loads(str(np.load(skel)["meta"]))
    arch = next(v for k, _, v in meta["kv"] if k == "general.architecture")
    w = gguf.GGUFWriter(str(out), arch)
    for key, types, value in meta["kv"]:
        if key == "general.architecture":
            continue
        if types[0] == gguf.GGUFValueType.ARRAY:
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, gguf.GGUFValueType(types[0]))
    for name, ne, qt in meta["tensors"]:
        nbytes, elems = LAYOUT[qt]
        n = int(np.prod(ne))
        if qt == "F32":
            w.add_tensor_info(name, ne[::-1], np.dtype(np.float32), n * 4)
        else:
            byte_shape = ne[::-1][:-1] + [ne[0] // elems * nbytes]
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), n // elems * nbytes,
                              raw_dtype=gguf.GGMLQuantizationType[qt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(0)
    for name, ne, qt in meta["tensors"]:
        n = int(np.prod(ne))
        if qt == "F32":
            w.write_tensor_data(_f32(rng, name, n).reshape(ne[::-1]))
        else:
            w.write_tensor_data(_blocks(rng, qt, n // LAYOUT[qt][1]))
    w.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["skeleton"] and len(sys.argv) == 3:
        skeleton(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["build"] and len(sys.argv) in (4, 5):      # shape_alike.py's --stable: always so here
        build(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
