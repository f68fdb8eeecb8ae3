"""The app's preferences, typed, over QSettings (an INI file in the user's config folder).

Tests point QSettings somewhere else with `QSettings.setPath(IniFormat, UserScope, tmp)`; the app's
`--settings-dir` / HALO_SETTINGS_DIR do the same for subprocesses.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Literal

from PySide6.QtCore import QSettings

from engine.api import SamplingParams
from engine.context_fit import OVERFLOW_POLICIES
from engine.errors import EngineError

Backend = Literal["auto", "hip", "cuda", "cpu"]
Theme = Literal["system", "light", "dark"]
BACKENDS: tuple[Backend, ...] = ("auto", "hip", "cuda", "cpu")
THEMES: tuple[Theme, ...] = ("system", "light", "dark")
ORGANIZATION = APPLICATION = "Halo Chat"


# What the sampling fields offer (app/widgets/sampling_form.py builds its boxes from this), and so what a stored
# value may be: one outside is read as the default, never shown as a clamped value while another is in effect
# (and never handed to a 32-bit spin box, which raises on a larger one). Each range lies within the engine's
# (engine.sampling.check_params).
SAMPLING_LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.01, 1.0),           # the engine refuses 0 (nothing survives the cut): 0.01 is its least at 2 decimals
    "top_k": (0, 1000),             # 0: off
    "max_tokens": (1, 32768),
    "context_length": (256, 1 << 20),
    "seed": (-1, 2**31 - 1),        # -1: a fresh random seed per reply
}


@dataclass(frozen=True)
class Sampling:
    """Per-conversation generation settings; the settings dialog holds the defaults."""

    temperature: float = SamplingParams.temperature      # defaults are the engine's, never a second copy
    top_p: float = SamplingParams.top_p
    top_k: int = SamplingParams.top_k
    max_tokens: int = SamplingParams.max_tokens
    context_length: int = 4096   # the app's cap; the engine also caps at the model's trained length
    seed: int = -1               # -1: a fresh random seed per reply
    context_overflow: str = "stop"   # a chat over the context: engine.context_fit.OVERFLOW_POLICIES

    def to_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_tokens=self.max_tokens, seed=None if self.seed < 0 else self.seed)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, base: Sampling | None = None) -> Sampling:
        """Known keys of `data` over `base` (the defaults); a value of the wrong type, or one the engine
        would refuse (SamplingParams.validate: NaN temperature, min_p 2, max_tokens 0...), falls back to
        `base`'s: a stored chat never carries a bad setting into a request."""
        base = base or cls()
        result = base
        if not isinstance(data, dict):
            return result
        for f in fields(cls):
            if f.name not in data:
                continue
            kind = type(getattr(base, f.name))
            value = data[f.name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) and kind is not str:
                continue
            try:
                candidate = replace(result, **{f.name: kind(value)})
                candidate.to_params().validate()
            except (TypeError, ValueError, OverflowError, EngineError):
                continue
            if not in_limits(candidate) or candidate.context_overflow not in OVERFLOW_POLICIES:
                continue
            result = candidate
        return result


def in_limits(sampling: Sampling) -> bool:
    return all(lo <= getattr(sampling, name) <= hi for name, (lo, hi) in SAMPLING_LIMITS.items())


def use_settings_dir(folder: Path | str) -> None:
    """Keep every QSettings of this process in `folder` (tests, portable installs)."""
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))


class AppSettings:
    """Typed accessors; every setter writes through at once (QSettings syncs to disk on its own)."""

    def __init__(self, qsettings: QSettings | None = None):
        if qsettings is None and (folder := os.environ.get("HALO_SETTINGS_DIR")):
            use_settings_dir(folder)
        self.q = qsettings or QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                                        ORGANIZATION, APPLICATION)

    def sync(self) -> None:
        self.q.sync()

    def int_value(self, key: str, default: int) -> int:
        """An integer setting (the INI file gives it back as text); `default` where it is missing or no integer
        (a hand-edited file)."""
        value = _typed(self.q.value(key, default), int)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    # -- engine -----------------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        value = str(self.q.value("engine/backend", "auto"))
        return value if value in BACKENDS else "auto"

    @backend.setter
    def backend(self, value: Backend) -> None:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}")
        self.q.setValue("engine/backend", value)

    @property
    def async_scheduling(self) -> bool:
        return _bool(self.q.value("engine/async_scheduling", True))

    @async_scheduling.setter
    def async_scheduling(self, value: bool) -> None:
        self.q.setValue("engine/async_scheduling", bool(value))

    @property
    def kv_cache_type(self) -> str:
        """The GPU KV cache's element type, engine.model.arch.KV_CACHE_TYPES (the CPU keeps f32 whatever it is)."""
        from engine.model.arch import DEFAULT_KV_CACHE_TYPE, KV_CACHE_TYPES  # numpy: not before the window

        value = str(self.q.value("engine/kv_cache_type", DEFAULT_KV_CACHE_TYPE))
        return value if value in KV_CACHE_TYPES else DEFAULT_KV_CACHE_TYPE

    @kv_cache_type.setter
    def kv_cache_type(self, value: str) -> None:
        from engine.model.arch import KV_CACHE_TYPES

        if value not in KV_CACHE_TYPES:
            raise ValueError(f"unknown KV cache type {value!r}")
        self.q.setValue("engine/kv_cache_type", value)

    # -- models -----------------------------------------------------------------------------------
    @property
    def model_folders(self) -> list[str]:
        """Folders the user added; the app's own models folder is always scanned too."""
        value = self.q.value("models/folders", [])
        if isinstance(value, str):
            value = [value] if value else []
        return [str(v) for v in (value or [])]

    @model_folders.setter
    def model_folders(self, folders: list[str]) -> None:
        self.q.setValue("models/folders", list(dict.fromkeys(str(f) for f in folders if f)))

    @property
    def model_files(self) -> list[str]:
        """Single GGUF files the user opened or dropped from outside the model folders (the library lists them)."""
        value = self.q.value("models/files", [])
        if isinstance(value, str):
            value = [value] if value else []
        return [str(v) for v in (value or [])]

    @model_files.setter
    def model_files(self, files: list[str]) -> None:
        self.q.setValue("models/files", list(dict.fromkeys(str(f) for f in files if f)))

    @property
    def last_model(self) -> str:
        return str(self.q.value("models/last", ""))

    @last_model.setter
    def last_model(self, path: str) -> None:
        self.q.setValue("models/last", path)

    # -- look -------------------------------------------------------------------------------------
    @property
    def theme(self) -> Theme:
        value = str(self.q.value("ui/theme", "system"))
        return value if value in THEMES else "system"

    @theme.setter
    def theme(self, value: Theme) -> None:
        if value not in THEMES:
            raise ValueError(f"unknown theme {value!r}")
        self.q.setValue("ui/theme", value)

    # -- default sampling -------------------------------------------------------------------------
    @property
    def sampling(self) -> Sampling:
        defaults = Sampling()
        data = {f.name: _typed(self.q.value(f"sampling/{f.name}"), type(getattr(defaults, f.name)))
                for f in fields(Sampling)}
        return Sampling.from_dict({k: v for k, v in data.items() if v is not None})

    @sampling.setter
    def sampling(self, value: Sampling) -> None:
        for key, v in value.to_dict().items():
            self.q.setValue(f"sampling/{key}", v)

    @property
    def system_prompt(self) -> str:
        return str(self.q.value("sampling/system_prompt", "You are a helpful assistant."))

    @system_prompt.setter
    def system_prompt(self, value: str) -> None:
        self.q.setValue("sampling/system_prompt", value)


def _typed(value, kind: type):
    """A stored number as its field's type: the INI file gives every value back as text ("0.3", "256") once the
    app restarts (in the process that wrote them, QSettings still holds the numbers). Text that is no such number
    stays text, which Sampling.from_dict refuses for a numeric field."""
    if isinstance(value, str) and kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            return value
    return value


def _bool(value) -> bool:
    # INI files give back "true"/"false" strings.
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes", "on")
    return bool(value)
