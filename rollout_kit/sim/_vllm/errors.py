"""vLLM 0.32's error answers: ``ApiError`` and the wording of its validation messages.

Errors are nested ``{"error": {"message", "type", "param", "code"}}`` (``SimConfig.flat_errors``
gives the ≤0.10.0 flat shape).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from .._context import ServerContext
from .._fault_effects import retry_after_headers
from .._faults import Fault
from .._http_util import BadBody, json_response

_STATUS_TYPES = {400: "BadRequestError", 404: "NotFoundError", 408: "RequestTimeoutError",
                 429: "TooManyRequestsError", 500: "InternalServerError",
                 502: "BadGatewayError", 503: "ServiceUnavailableError",
                 504: "GatewayTimeoutError"}
PAUSED_MESSAGE = "Generation is paused. Please retry after it resumes."


class ApiError(Exception):
    """An error answer: message, HTTP status, OpenAI error ``type`` and ``param``."""

    def __init__(self, message: str, status: int = 400, type_: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_ or _STATUS_TYPES.get(status, "BadRequestError")
        self.param = param


def error_event(ctx: ServerContext, exc: ApiError) -> dict[str, Any]:
    """The error body (or SSE event) of ``exc``."""
    err = {"message": str(exc), "type": exc.type, "param": exc.param, "code": exc.status}
    return {"object": "error", **err} if ctx.config.flat_errors else {"error": err}


def error_response(ctx: ServerContext, exc: ApiError,
                   headers: dict[str, str] | None = None) -> web.Response:
    """The JSON error response of ``exc``."""
    return json_response(error_event(ctx, exc), exc.status, headers)


_NO_VALUE: Any = object()


def param_error(message: str, param: str, value: Any = _NO_VALUE) -> ApiError:
    """A 400 about one parameter, worded like vLLM 0.32's ``VLLMValidationError``:
    ``"<message> (parameter=P, value=V)"`` (``value`` left out when not given)."""
    tail = f"parameter={param}" if value is _NO_VALUE else f"parameter={param}, value={value}"
    return ApiError(f"{message} ({tail})", 400, param=param)


def _shown(value: Any) -> str:
    """How pydantic shows an input in vLLM's validation messages."""
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    return str(value)[:40]


def validation_error(field: str, value: Any, kind: str, msg: str) -> ApiError:
    """A request-validation 400 as vLLM 0.32 words it: type ``"Bad Request"``, ``param`` the
    dotted location (``body.max_tokens``), pydantic's error line in the message."""
    loc = f"body.{field}" if field != "body" else "body"
    return ApiError(f"1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', "
                    f"'msg': '{msg}', 'input': {_shown(value)!r}}}", 400, "Bad Request",
                    param=loc)


def body_error(exc: BadBody) -> ApiError:
    """An empty or non-JSON body, as vLLM 0.32 reports it (``param`` ``body`` / ``body.POS``)."""
    text = str(exc)
    if text.startswith("Request body is empty"):
        return validation_error("body", None, "missing", "Field required")
    pos = re.search(r"\(char (\d+)\)", text)
    return validation_error(pos.group(1) if pos else "body", {}, "json_invalid",
                            "JSON decode error")


def overloaded() -> ApiError:
    """The waiting queue is full (429)."""
    return ApiError("The server is overloaded: the waiting queue is full.", 429)


def fault_error(ctx: ServerContext, fault: Fault) -> web.Response:
    """The answer of an ``error`` fault."""
    status = fault.status
    return error_response(ctx, ApiError(f"Simulated server fault ({status}).", status),
                          retry_after_headers(status, ctx.faults))
