"""One step's metadata as ONE int32 array, copied to the device with one H2D copy per step.

Fixed offsets (capacities T_cap tokens, S_cap sequences, W block-table width), so kernels captured in a
graph keep valid pointers for every later step of the same shape:

    ids [T_cap] | positions [T_cap] | slots [T_cap] | token_seq [T_cap] | logits_idx [S_cap]
    | samp_i [S_cap, 4] (top_k, seed, counter, top pairs to report)
    | samp_f [S_cap, 4] (temperature, top_p, min_p, repetition penalty; float32 bits)
    | seq_lens [S_cap] | query_start_loc [S_cap + 1] | state_slots [S_cap] | block_tables [S_cap, W]

Only the prefix up to the last used block-table row is copied. When the step's input ids were written
on the device by the previous step's sampler, the copy starts after the ids (at `positions`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from engine.api import TOP_LOGITS_MAX
from engine.model.step import StepInput


class SamplingRow(NamedTuple):
    """Per-sequence token choice. temperature <= 0 (or top_k == 1) is greedy. A NamedTuple: the executor makes one
    per sequence per step, where a frozen dataclass cost ~4 us each to construct."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    counter: int = 0        # tokens this request has drawn so far: the RNG stream position
    repetition_penalty: float = 1.0
    report_top: int = 0     # (id, logit) pairs of the raw logits to report this step (0: none)

    @staticmethod
    def from_params(params, counter: int, report_top: int = 0) -> SamplingRow:
        seed = params.seed if params.seed is not None else 0
        return SamplingRow(float(params.temperature), int(params.top_k), float(params.top_p), float(params.min_p),
                           int(seed) & 0xFFFFFFFF, counter, float(params.repetition_penalty),
                           min(int(report_top), TOP_LOGITS_MAX))


GREEDY = SamplingRow()


@dataclass(frozen=True)
class MetaLayout:
    t_cap: int
    s_cap: int
    width: int

    @property
    def ids(self) -> int:
        return 0

    @property
    def positions(self) -> int:
        return self.t_cap

    @property
    def slots(self) -> int:
        return 2 * self.t_cap

    @property
    def token_seq(self) -> int:
        return 3 * self.t_cap

    @property
    def logits_idx(self) -> int:
        return 4 * self.t_cap

    @property
    def samp_i(self) -> int:
        return 4 * self.t_cap + self.s_cap

    @property
    def samp_f(self) -> int:
        return 4 * self.t_cap + 5 * self.s_cap

    @property
    def seq_lens(self) -> int:
        return 4 * self.t_cap + 9 * self.s_cap

    @property
    def qsl(self) -> int:
        """query_start_loc [S + 1] (the delta-net kernels walk each sequence's tokens in order)"""
        return 4 * self.t_cap + 10 * self.s_cap

    @property
    def state_slots(self) -> int:
        """[S] each sequence's recurrent-state slot (hybrid models)"""
        return 4 * self.t_cap + 11 * self.s_cap + 1

    @property
    def block_tables(self) -> int:
        return 4 * self.t_cap + 12 * self.s_cap + 1

    @property
    def words(self) -> int:
        return self.block_tables + self.s_cap * self.width

    def check(self, step: StepInput) -> None:
        T, S, W = step.num_tokens, step.num_seqs, step.block_tables.shape[1]
        if T > self.t_cap or S > self.s_cap or len(step.logits_indices) > self.s_cap:
            raise ValueError(f"step of {T} tokens / {S} sequences exceeds the GPU capacity "
                             f"({self.t_cap} tokens, {self.s_cap} sequences)")
        if W > self.width:
            raise ValueError(f"block table width {W} exceeds the KV cache's {self.width}")

    def pack(self, step: StepInput, sampling: list[SamplingRow] | None, out: np.ndarray) -> int:
        """Fill `out` (int32 [words]); returns how many words from the start the device needs."""
        self.check(step)
        T, S = step.num_tokens, step.num_seqs
        n_out = len(step.logits_indices)
        out[self.ids:self.ids + T] = step.token_ids
        out[self.positions:self.positions + T] = step.positions
        if T and int(np.max(step.slot_mapping)) >= 1 << 31:
            raise ValueError("KV slot index over 2**31")
        out[self.slots:self.slots + T] = step.slot_mapping
        qsl = np.asarray(step.query_start_loc)
        out[self.token_seq:self.token_seq + T] = np.repeat(np.arange(S, dtype=np.int32), np.diff(qsl))
        out[self.logits_idx:self.logits_idx + n_out] = step.logits_indices
        rows = sampling if sampling is not None else [GREEDY] * n_out
        if len(rows) != n_out:
            raise ValueError(f"{len(rows)} sampling rows for {n_out} logits rows")
        si = out[self.samp_i:self.samp_i + 4 * n_out].reshape(n_out, 4)
        sf = out[self.samp_f:self.samp_f + 4 * n_out].view(np.float32).reshape(n_out, 4)
        if n_out:                          # seed: its uint32 bits as int32
            si[:] = [(p.top_k, ((p.seed & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000, p.counter & 0x7FFFFFFF,
                      p.report_top) for p in rows]
            sf[:] = [(p.temperature, p.top_p, p.min_p, p.repetition_penalty) for p in rows]
        out[self.seq_lens:self.seq_lens + S] = step.seq_lens
        out[self.qsl:self.qsl + S + 1] = qsl
        out[self.state_slots:self.state_slots + S] = step.state_slots
        bt = out[self.block_tables:self.block_tables + S * self.width].reshape(S, self.width)
        W = step.block_tables.shape[1]
        bt[:, :W] = step.block_tables
        bt[:, W:] = 0
        return self.block_tables + S * self.width
