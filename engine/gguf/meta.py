"""`Meta`: the one typed, range-checked way to read GGUF metadata values.

Every metadata value in a file can have any GGUF type, so no reader may use `meta.get(key)` directly and
hope: an array where a string was expected, a string "false" where a bool was expected, a NaN where a
number was expected. Each getter checks the type (and the range, when given) and raises
`InvalidModelError` naming the key; a missing key gives the default, or an error when the key is
required (`default=REQUIRED`).

Types as the parser returns them (engine.gguf.metadata): int/float/bool/str scalars, StringArray for string
arrays, read-only 1-D numpy arrays for numeric and bool arrays. Plain dicts built in tests work the same.

    meta = Meta(gguf.metadata)          # or Meta.of(anything_mapping_or_meta)
    meta.get_str("general.name", "")
    meta.get_int("llama.context_length", REQUIRED, lo=16, hi=1 << 24)
    meta.get_float("llama.attention.layer_norm_rms_epsilon", 1e-6, lo=1e-12, hi=1e-2)
    meta.get_bool("tokenizer.ggml.add_bos_token", False)
    meta.get_str_array("tokenizer.ggml.tokens")     # a compact Sequence[str]; get_str_list for short ones
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from engine.errors import MAX_QUOTE_CHARS, InvalidModelError, short_repr
from engine.gguf.strings import StringArray

REQUIRED: Any = object()   # sentinel default: the key must be present


class Meta(Mapping):
    """A read-only typed view over a metadata mapping. Also a Mapping (raw values), for code that lists keys."""

    def __init__(self, mapping: Mapping[str, Any]):
        self._raw = mapping._raw if isinstance(mapping, Meta) else mapping

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> Meta:
        return mapping if isinstance(mapping, Meta) else cls(mapping)

    # Mapping protocol: raw values (for `in`, iteration, len, and `dict(meta)`)
    def __getitem__(self, key: str) -> Any:
        return self._raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def _fetch(self, key: str, default: Any) -> tuple[bool, Any]:
        """(present, value); raises for a required key that is missing."""
        if key in self._raw:
            return True, self._raw[key]
        if default is REQUIRED:
            raise InvalidModelError(f"{key[:MAX_QUOTE_CHARS]} is missing (a required metadata key)", field=key)
        return False, default

    def get_str(self, key: str, default: Any = None, *, choices: tuple[str, ...] | None = None,
                max_len: int | None = None) -> str | None:
        present, value = self._fetch(key, default)
        if not present:
            return value
        if not isinstance(value, str):
            raise _wrong(key, "a string", value)
        if max_len is not None and len(value) > max_len:
            raise InvalidModelError(f"{short_repr(key)} is {len(value)} characters, over the cap of {max_len}",
                                    field=key)
        if choices is not None and value not in choices:
            raise InvalidModelError(f"{short_repr(key)} is {short_repr(value)}; expected one of "
                                    f"{', '.join(choices)}", field=key)
        return value

    def get_int(self, key: str, default: Any = None, *, lo: int | None = None, hi: int | None = None) -> int | None:
        present, value = self._fetch(key, default)
        if not present:
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise _wrong(key, "an integer", value)
        return _in_range(key, int(value), lo, hi)

    def get_float(self, key: str, default: Any = None, *, lo: float | None = None,
                  hi: float | None = None) -> float | None:
        """Any finite number (ints too); NaN and infinities are refused."""
        present, value = self._fetch(key, default)
        if not present:
            return value
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise _wrong(key, "a number", value)
        value = float(value)
        if not math.isfinite(value):
            raise InvalidModelError(f"{short_repr(key)} is {value}, not a finite number", field=key)
        return _in_range(key, value, lo, hi)

    def get_bool(self, key: str, default: Any = None) -> bool | None:
        """Only a GGUF BOOL: the string "false" or the integer 2 is a malformed file, not a truth value."""
        present, value = self._fetch(key, default)
        if not present:
            return value
        if not isinstance(value, (bool, np.bool_)):
            raise _wrong(key, "a bool", value)
        return bool(value)

    def get_str_list(self, key: str, default: Any = None, *, max_len: int | None = None) -> list[str] | None:
        """A short string array as a list (a vocabulary: get_str_array, which makes no str objects)."""
        present, value = self._fetch(key, default)
        if not present:
            return value
        if max_len is not None and isinstance(value, (list, tuple, StringArray)) and len(value) > max_len:
            raise InvalidModelError(f"{short_repr(key)} has {len(value)} entries, over the cap of {max_len}",
                                    field=key)
        return list(self.get_str_array(key))

    def get_str_array(self, key: str, default: Any = None) -> StringArray | None:
        """A string array as one compact StringArray (what the parser makes; a list of str is converted)."""
        present, value = self._fetch(key, default)
        if not present:
            return value
        if isinstance(value, StringArray):
            return value
        if not isinstance(value, (list, tuple)) or not all(type(v) is str for v in value):
            raise _wrong(key, "an array of strings", value)
        try:
            return StringArray.from_strs(value)
        except UnicodeEncodeError as e:
            raise InvalidModelError(f"{short_repr(key)} holds a string that is not valid UTF-8 ({e.reason})",
                                    field=key) from None

    def get_array(self, key: str, default: Any = None, *, kind: str = "number", lo: float | None = None,
                  hi: float | None = None, length: int | None = None) -> np.ndarray | None:
        """A numeric array as a 1-D numpy array; `kind` "int" (integer dtype only), "number" (finite values),
        or "bool". Every element is range-checked when lo/hi are given; `length` fixes the count."""
        present, value = self._fetch(key, default)
        if not present:
            return value
        if isinstance(value, (list, tuple)):
            if not all(isinstance(v, (int, float)) for v in value):
                raise _wrong(key, f"an array of {kind}s", value)
            value = np.asarray(value)
        if not isinstance(value, np.ndarray) or value.ndim != 1:
            raise _wrong(key, f"an array of {kind}s", value)
        if kind == "bool":
            ok = value.dtype == np.bool_
        elif kind == "int":
            ok = value.dtype.kind in "iu"
        else:
            ok = value.dtype.kind in "iuf"
        if not ok:
            raise _wrong(key, f"an array of {kind}s", value)
        if length is not None and len(value) != length:
            raise InvalidModelError(f"{short_repr(key)} has {len(value)} entries, expected {length}", field=key)
        if value.dtype.kind == "f" and len(value) and not np.isfinite(value).all():
            raise InvalidModelError(f"{short_repr(key)} holds a value that is not a finite number", field=key)
        if len(value) and kind != "bool":
            if lo is not None and value.min() < lo or hi is not None and value.max() > hi:
                raise InvalidModelError(f"{short_repr(key)} holds values outside {lo}..{hi}", field=key)
        return value

    def get_int_or_per_layer(self, key: str, default: Any = None, *, lo: int | None = None,
                             hi: int | None = None) -> int | np.ndarray | None:
        """An integer, or a per-layer integer array (e.g. head_count_kv on hybrid models), each in range."""
        if isinstance(self._raw.get(key), (np.ndarray, list, tuple)):
            return self.get_array(key, default, kind="int", lo=lo, hi=hi)
        return self.get_int(key, default, lo=lo, hi=hi)


def _in_range(key: str, value, lo, hi):
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
        raise InvalidModelError(f"{short_repr(key)} = {value} is outside the sane range {bounds}", field=key)
    return value


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {len(value)} {value.dtype} values"
    if isinstance(value, (list, tuple, StringArray)):
        return f"an array of {len(value)} values"
    return f"{type(value).__name__} {short_repr(value, 60)}"


def _wrong(key: str, expected: str, value: Any) -> InvalidModelError:
    return InvalidModelError(f"{short_repr(key)} must be {expected}, but it is {_describe(value)}", field=key)
