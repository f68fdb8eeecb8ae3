"""Every error the engine raises on purpose. Callers catch these by type, never by message text."""


MAX_QUOTE_CHARS = 200   # how much of an untrusted name or value an error message quotes


def short_repr(value, limit: int = MAX_QUOTE_CHARS) -> str:
    """`repr(value)` cut to `limit` characters: hostile keys and values can be megabytes long."""
    text = repr(value[:limit] if isinstance(value, (str, bytes)) else value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


class EngineError(Exception):
    """Base of all engine errors. `str(e)` is written for the user: what happened and what to do."""


class InvalidModelError(EngineError):
    """The model file is malformed or hostile. Names the field and the byte offset where it went wrong."""

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None):
        where = []
        if field is not None:
            where.append(f"field {short_repr(field)}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.field = field if field is None or len(field) <= MAX_QUOTE_CHARS else field[:MAX_QUOTE_CHARS]
        self.offset = offset


class TruncatedModelError(InvalidModelError):
    """The file ends before what its own header describes (the header itself, or tensor data): most often a
    download that did not finish. Its own type so the app can advise downloading again without reading text."""


class ModelFileError(EngineError):
    """The model file cannot be opened at all: it is missing, a folder, or not readable."""


class UnsupportedModelError(EngineError):
    """The file is valid GGUF but uses an architecture or tensor type this engine does not run."""


class ModelNotLoadedError(EngineError):
    """A request arrived while no model is loaded."""


class InvalidRequestError(EngineError):
    """A request's own values are wrong (sampling parameters, a role, a duplicate id): the caller's error,
    not the model's. Servers answer it with 400. `field`: the request field at fault, where one is (a server
    names it as the parameter)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class ContextOverflowError(EngineError):
    """The prompt alone does not fit in the context window."""


class OutOfHostMemoryError(EngineError):
    """The CPU path's pre-flight: the model does not fit in the RAM available; the message gives the numbers."""


class TemplateError(EngineError):
    """The model's chat template failed to render, was rejected by the sandbox, or ran too long."""


class DownloadError(EngineError):
    """Fetching a model failed, or the file's hash did not match."""


class DownloadCancelled(DownloadError):
    """The user cancelled a download (model_store.fetch's `cancel`); nothing was kept."""


class BackendError(EngineError):
    """A GPU runtime call failed. Carries the runtime's own error name and text."""


class BackendUnavailableError(BackendError):
    """The requested backend cannot run here (no library, no device); `reason` says exactly why (the message,
    unless a shorter one is set). `missing`: "binding" (an optional Python package is not installed), "runtime"
    (the driver's runtime library could not be opened), or "" (the runtime answered with a status: see
    `error_name`)."""

    def __init__(self, message: str, missing: str = ""):
        super().__init__(message)
        self.reason = message
        self.missing = missing


class OutOfDeviceMemoryError(BackendError):
    """An allocation failed, or the pre-flight estimate does not fit; the message gives the numbers."""


class DeviceLostError(BackendError):
    """The device stopped answering (Windows TDR, reset, kernel fault). The model must be reloaded."""


class KernelCompileError(BackendError):
    """Runtime compilation failed. `log` holds the compiler's whole log."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


class HostAccessError(BackendError):
    """A host view of device memory was asked for without a proven zero-copy capability.

    This is the error that replaces the original ACCESS_VIOLATION: it names the capability that was missing.
    """


class RequestAborted(EngineError):
    """The request was aborted by the caller."""
