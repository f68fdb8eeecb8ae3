"""Engine exceptions turned into what the user reads: a title, what happened, what to do, and whether
running on the CPU instead would help. Dispatch is by type, never by message text."""
from __future__ import annotations

from dataclasses import dataclass

from engine import errors
from engine.model.arch import ARCHITECTURES

OVERFLOW_WAY_OUT = ("Delete or edit earlier messages (each message's menu), start a new chat, or let this chat "
                    "drop its oldest turns: Chat settings → When the chat is too long. A longer context length "
                    "in Settings also helps, if memory allows.")


TRUNCATED_ADVICE = "Download it again: the file is incomplete, most likely an unfinished download."


def file_problem(e: errors.EngineError) -> str:
    """A model file's problem in words: the parser's field and offset only where they help. The library's row,
    the banner of a failed open and the banner of a failed load all say it through here."""
    if isinstance(e, errors.InvalidModelError) and e.field == "magic":
        return "this file is not a GGUF model (GGUF models begin with the letters “GGUF”)"
    if isinstance(e, errors.TruncatedModelError):
        return f"{e}. {TRUNCATED_ADVICE}"
    return str(e)


@dataclass(frozen=True)
class UserMessage:
    title: str
    body: str
    offer_cpu: bool = False
    offer_diagnostics: bool = False


def describe(e: BaseException, what: str = "") -> UserMessage:
    subject = f" {what}" if what else ""
    if isinstance(e, errors.TruncatedModelError):
        return UserMessage(f"Cannot open{subject}: the file is incomplete",
                           f"{file_problem(e)}\n\nNothing else was changed.")
    if isinstance(e, errors.InvalidModelError):
        return UserMessage(f"Cannot open{subject}: the file is damaged or not a valid GGUF model",
                           f"{file_problem(e)}\n\nDownload the model again, or pick another file. Nothing else was changed.")
    if isinstance(e, errors.ModelFileError):
        return UserMessage(f"Cannot open{subject}", f"{e}\n\nPick the file again in the model library (Ctrl+L).")
    if isinstance(e, errors.UnsupportedModelError):
        return UserMessage(f"{what or 'This model'} is not supported yet",
                           f"{e}\n\nTry a model with a supported architecture ({', '.join(ARCHITECTURES)}).")
    if isinstance(e, errors.OutOfDeviceMemoryError):
        cpu_fits = getattr(e, "cpu_fits", None) is not False     # offered unless the CPU is known too small
        return UserMessage("Not enough GPU memory", f"{e}\n\nPick a smaller model or a shorter context"
                           + (", or continue on the CPU." if cpu_fits else "."),
                           offer_cpu=cpu_fits, offer_diagnostics=True)
    if isinstance(e, errors.OutOfHostMemoryError):
        return UserMessage("Not enough memory for this model", f"{e}\n\nNothing was changed.")
    if isinstance(e, errors.DeviceLostError):
        return UserMessage("The GPU stopped responding", f"{e}\n\nThe conversation is safe. Reload the model, "
                           "or continue on the CPU.", offer_cpu=True, offer_diagnostics=True)
    if isinstance(e, errors.BackendUnavailableError):
        return UserMessage("The selected GPU backend is not available here",
                           f"{e}\n\nContinue on the CPU, or open Diagnostics to see why.",
                           offer_cpu=True, offer_diagnostics=True)
    if isinstance(e, errors.BackendError):
        return UserMessage("The GPU reported an error", f"{e}\n\nContinue on the CPU, or open Diagnostics "
                           "for a report to attach to a bug.", offer_cpu=True, offer_diagnostics=True)
    if isinstance(e, errors.ContextOverflowError):
        return UserMessage("The conversation is too long for the context window", f"{e}\n\n{OVERFLOW_WAY_OUT}")
    if isinstance(e, errors.TemplateError):
        return UserMessage("The model's chat template failed", str(e))
    if isinstance(e, errors.ModelNotLoadedError):
        return UserMessage("No model is loaded", "Open the model library (Ctrl+L) and load a model.")
    if isinstance(e, errors.DownloadError):
        return UserMessage("Download failed", str(e))
    if isinstance(e, errors.EngineError):
        return UserMessage("The engine reported an error", str(e))
    return UserMessage("Something went wrong inside Halo Chat",
                       f"{type(e).__name__}: {e}\n\nYour conversations are saved. Please report this with "
                       "the Diagnostics report.", offer_diagnostics=True)
