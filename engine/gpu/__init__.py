"""The GPU forward pass (issue 6): quantized weights on the device, kernels compiled at run time, decode graphs.

Importing this package loads no driver; `first_step_logits` is the entry the diagnostics' GPU-versus-CPU
logits check calls (engine/diagnostics_logits.py).
"""
from __future__ import annotations


def first_step_logits(model_path, token_ids, backend: str = "cuda-python", device: int = 0):
    """Logits [vocab] float32 of the last prompt token, run on `backend` (a registry name). Loads the model,
    runs one prefill step, frees everything. `device` other than 0 is not supported yet."""
    from pathlib import Path

    from engine.backends.registry import create
    from engine.gpu.model import GpuModel
    from engine.model.step import SequenceBlocks

    if device != 0:
        raise ValueError("only device 0 is supported")
    from engine.model.arch import BLOCK_SIZE

    block_size = BLOCK_SIZE
    n_blocks = -(-len(token_ids) // block_size)
    be = create(backend)
    try:
        model = GpuModel.load(Path(model_path), be, max_tokens=max(16, len(token_ids)), max_seqs=1,
                              kv_blocks=n_blocks, block_size=block_size, use_graphs=False)
        kv = model.new_kv_cache(n_blocks, block_size)
        try:
            return model.forward(SequenceBlocks(kv).step(token_ids), kv)[0]
        finally:
            kv.free()
            model.close()
    finally:
        be.close()
