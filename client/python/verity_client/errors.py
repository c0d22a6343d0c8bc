"""VerityError: every failure the server reports, with its gRPC status code."""

import grpc

# grpc.StatusCode by numeric value (google.rpc.Code), for BatchAck.error_code.
_CODES_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}

# Codes after which resending the same request later can succeed.
RETRYABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def status_code(value):
    """The grpc.StatusCode of a google.rpc.Code number; UNKNOWN outside the range."""
    code = _CODES_BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.UNKNOWN if code is grpc.StatusCode.OK else code


class VerityError(Exception):
    """A call failed: the server (or gRPC) answered a non-OK status.

    Attributes:
      code: the grpc.StatusCode, e.g. grpc.StatusCode.NOT_FOUND. Pick the reaction by it:
        INVALID_ARGUMENT (fix the request), NOT_FOUND, ALREADY_EXISTS, UNAVAILABLE (retry),
        DEADLINE_EXCEEDED (the call ran past the client's timeout).
      message: the server's message (it names the offending field or batch).
      debug_error_string: gRPC's debug details when the error came from gRPC, else None.
    """

    def __init__(self, code, message, debug_error_string=None):
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message
        self.debug_error_string = debug_error_string

    @classmethod
    def from_rpc_error(cls, error, context=""):
        """Converts a grpc.RpcError raised by a call; `context` is put before its message."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        debug = error.debug_error_string() if hasattr(error, "debug_error_string") else None
        return cls(code or grpc.StatusCode.UNKNOWN, context + (details or ""), debug)
