"""The error tree. Every error a client or a file can cause is one of these, with a stable `code`.

    QtuiError                      code
    ├── ModelFileError             bad_model         corrupt / truncated / unsupported GGUF (names key or tensor)
    ├── EngineError                engine_error
    │   ├── EngineUnavailable      engine_unavailable  (e.g. --engine cuda on a machine without a driver)
    │   │   └── InsufficientDeviceMemory  device_memory  weights + state pools do not fit (names how short)
    │   ├── EngineFailed           engine_failed     after a fatal engine error: nothing runs until a restart
    │   └── CudaError              cuda_error        a driver call failed (names the call and CUresult)
    └── RequestError               (a client's request; the server maps it to an `error` frame, HTTP-400/429-like)
        ├── BadRequest             bad_request       invalid JSON, wrong field types, out-of-range values
        │   ├── InvalidParameter   bad_request       one named parameter out of range (carries `param`)
        │   └── DuplicateId        duplicate_id      a generate reusing an active id (answered with id null)
        ├── UnknownOp              unknown_op
        ├── PromptTooLong          prompt_too_long
        ├── MessageTooLarge        message_too_large
        ├── Overloaded             overloaded        wait queue full
        ├── Unauthorized           unauthorized
        ├── Cancelled              cancelled
        └── ShuttingDown           shutting_down     server draining

Our own invariants use `assert`; these are for what the outside world can cause.
"""

from __future__ import annotations


class QtuiError(Exception):
    code = "internal"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code)
        self.message = message or self.code


class ModelFileError(QtuiError):
    """A GGUF file that cannot be served. The message names the key or tensor at fault."""

    code = "bad_model"


class EngineError(QtuiError):
    code = "engine_error"
    call: str | None = None  # the failing call, where the engine knows it

    @property
    def is_fatal(self) -> bool:
        """True when the engine can never run another step (the server then fails new requests fast)."""
        return False


class EngineUnavailable(EngineError):
    code = "engine_unavailable"


class InsufficientDeviceMemory(EngineUnavailable):
    """At start: weights + state pools + scratch do not fit in the GPU's free memory (`need`, `free` in bytes)."""

    code = "device_memory"

    def __init__(self, message: str, *, need: int, free: int) -> None:
        super().__init__(message)
        self.need, self.free = need, free


class EngineFailed(EngineError):
    """The answer to a request made after a fatal engine error: nothing will run until a restart."""

    code = "engine_failed"


# Errors after which the CUDA context is unusable ("sticky"): every later call in the process fails the same way.
STICKY_CUDA_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_EXTERNAL_DEVICE",
})  # fmt: skip


class CudaError(EngineError):
    """A CUDA driver call returned an error: carries the call's name and the CUresult's name."""

    code = "cuda_error"

    def __init__(self, call: str, error_name: str, detail: str = "") -> None:
        self.call = call
        self.error_name = error_name
        super().__init__(f"{call} failed: {error_name}" + (f" ({detail})" if detail else ""))

    @property
    def is_fatal(self) -> bool:
        return self.error_name in STICKY_CUDA_ERRORS


class RequestError(QtuiError):
    code = "bad_request"


class BadRequest(RequestError):
    code = "bad_request"


class DuplicateId(BadRequest):
    """A `generate` reusing the id of a request still active on the connection. Its error frame has id null
    (and the id in `rejected_id`), so it can never be mistaken for the end of the active request."""

    code = "duplicate_id"


class UnknownOp(RequestError):
    code = "unknown_op"


class PromptTooLong(RequestError):
    code = "prompt_too_long"


class MessageTooLarge(RequestError):
    code = "message_too_large"


class Overloaded(RequestError):
    code = "overloaded"


class Unauthorized(RequestError):
    code = "unauthorized"


class Cancelled(RequestError):
    code = "cancelled"


class ShuttingDown(RequestError):
    code = "shutting_down"


class InvalidParameter(BadRequest):
    """A request parameter out of its range; `param` names it (the OpenAI error body's `param`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
