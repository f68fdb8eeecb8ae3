"""The GPU upload reports progress in bytes of the file (a MoE model's experts are a few huge tensors, so a
count of tensors would stall and jump), on the CPU backend with kernels recorded instead of run."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.backends import registry
from engine.backends.base import Kernel
from engine.gpu.model import GpuModel

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


def test_upload_progress_counts_bytes_up_to_the_whole_file():
    backend = registry.create("cpu")
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda *a, **k: None
    seen: list[tuple[float, str]] = []
    m = GpuModel.load(DATA / "tiny-qwen3moe-q8_0.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                      progress=lambda f, msg: seen.append((f, msg)))
    try:
        upload = [(f, msg) for f, msg in seen if msg.startswith("uploading weights: ")]
        fractions = [f for f, _ in upload]
        assert fractions == sorted(fractions) and 0 < fractions[0] and fractions[-1] > 0.99
        experts = [f for (f, _), (g, _) in zip(upload, upload[1:], strict=False) if g - f > 0.05]
        assert experts, "each stacked-experts tensor should move the bar by its share of the bytes"
        assert upload[-1][1].endswith(" GiB")
    finally:
        m.close()


def test_the_load_says_it_prepares_kernels_after_the_upload_and_can_be_cancelled_there():
    """After the weights, the load names each kernel file before loading it (a CUDA first open compiles them all,
    80 s on an H100), with the bar full; a callback that raises (the Engine's cancel) stops the load there and
    frees what the load had allocated."""
    backend = registry.create("cpu")
    loaded: list[str] = []
    backend.kernel = lambda file, function: (loaded.append(file), Kernel(function, None))[1]
    backend.launch = lambda *a, **k: None
    seen: list[tuple[float, str, int]] = []
    m = GpuModel.load(DATA / "tiny-llama-q4_1.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                      progress=lambda f, msg: seen.append((f, msg, len(loaded))))
    m.close()
    kernels = [(f, msg, n) for f, msg, n in seen if msg.startswith("preparing GPU kernels")]
    assert seen[-1] in kernels and all(f == 1.0 for f, _, _ in kernels)
    files = [msg.split("(")[1].split(")")[0] for _, msg, _ in kernels]
    assert files == list(dict.fromkeys(loaded))           # each file once, before its first kernel loads
    assert [n for _, _, n in kernels] == [loaded.index(f) for f in files]

    class Cancelled(Exception):
        pass

    def cancel_at_kernels(f, msg):
        if msg.startswith("preparing GPU kernels"):
            raise Cancelled
    loaded.clear()
    buffers = []
    alloc = backend.alloc
    backend.alloc = lambda shape, dtype: buffers.append(alloc(shape, dtype)) or buffers[-1]
    with pytest.raises(Cancelled):
        GpuModel.load(DATA / "tiny-llama-q4_1.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                      progress=cancel_at_kernels)
    assert loaded == [] and buffers and all(b.freed for b in buffers)     # the weights and scratch given back


def test_the_upload_streams_matrices_from_the_map_without_a_host_copy(tmp_path):
    """Models larger than half the RAM must reach the device without a host copy of the model: every matrix
    goes from the file's read-only map straight into its copy (the runtime stages pageable memory through
    its own bounded buffers), only vectors are made as float32 on the host. Measured with tracemalloc on the
    CPU backend, whose device buffers are host arrays: the peak over the upload, less the device bytes still
    allocated at its end, is what the upload held on the host besides them."""
    import tracemalloc

    from test_host_memory_preflight import write_sparse_llama

    from engine.gguf import GGMLType, open_gguf
    from engine.gpu.weights import upload_weights
    from engine.model.config import ModelConfig

    path = tmp_path / "sparse-f16.gguf"
    write_sparse_llama(path, n_embd=1024, n_ff=4096, matrix_type=GGMLType.F16)   # 8 MiB FFN matrices
    backend = registry.create("cpu")
    with open_gguf(path) as gguf:
        config = ModelConfig.from_metadata(gguf.metadata)
        largest = max(t.nbytes for t in gguf.tensors.values())
        assert largest == 8 << 20
        sources = []
        copy = backend.copy_h2d_async
        backend.copy_h2d_async = lambda dst, src, stream: (sources.append(src), copy(dst, src, stream))
        tracemalloc.start()
        try:
            weights = upload_weights(backend, gguf, config, backend.null_stream)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        device = sum(b.nbytes for b in weights.buffers)
        assert device >= sum(t.nbytes for t in gguf.tensors.values())      # everything went up ...
        held = peak - device
        assert held < 1 << 20, f"the upload held {held / 2**20:.1f} MiB on the host beside the device buffers"
        mapped = [s for s in sources if s.nbytes >= 1 << 20]
        assert mapped and all(s.base is not None and not s.flags.owndata and not s.flags.writeable
                              for s in mapped)                          # ... big ones straight from the map
        weights.free(backend)


def test_the_cpu_load_reports_progress_in_bytes_of_the_file_too():
    """The CPU loader's progress is the share of the file's tensor bytes read, tensor by tensor: each report
    moves by that tensor's size (the stacked experts by theirs), ending at the whole."""
    from engine.gguf import open_gguf
    from engine.model.loader import load_model

    path = DATA / "tiny-qwen3moe-q8_0.gguf"
    with open_gguf(path) as g:
        sizes = {name: t.nbytes for name, t in g.tensors.items()}
    total = sum(sizes.values())
    seen: list[tuple[float, str]] = []
    load_model(path, lambda f, msg: seen.append((f, msg)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    steps = [b - a for a, b in zip([0.0, *fractions], fractions, strict=False)]
    named = [msg.split(" ")[1] for _, msg in seen]
    assert all(abs(step - sizes[name] / total) < 1e-9 for step, name in zip(steps, named, strict=True))
    assert sum(sizes[n] for n in named) == total and seen[-1][1].endswith(" GiB)")


@pytest.mark.parametrize("cancel_at", [None, "uploading weights", "preparing GPU kernels"])
def test_every_stream_the_load_makes_is_destroyed_by_close_or_by_a_cancelled_load(cancel_at):
    """The compute stream belongs to the model's forward: close() destroys it, and a load stopped during the upload
    or the kernels (the Engine's cancel) destroys it too (it leaked one stream per load before)."""
    backend = registry.create("cpu")
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda *a, **k: None
    made, destroyed = [], []
    create, destroy = backend.create_stream, backend.destroy_stream
    backend.create_stream = lambda: made.append(create()) or made[-1]
    backend.destroy_stream = lambda s: (destroyed.append(s), destroy(s))[1]

    class Cancelled(Exception):
        pass

    def progress(f, msg):
        if cancel_at and msg.startswith(cancel_at):
            raise Cancelled
    if cancel_at is None:
        GpuModel.load(DATA / "tiny-llama-q4_1.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                      progress=progress).close()
    else:
        with pytest.raises(Cancelled):
            GpuModel.load(DATA / "tiny-llama-q4_1.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                          progress=progress)
    assert made and sorted(map(id, made)) == sorted(map(id, destroyed))
