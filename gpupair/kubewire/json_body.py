"""One way to decode a JSON request body, shared by every HTTP endpoint gpupair serves.

A body comes from the network, so anything may arrive: deep nesting, numbers no float holds,
invalid UTF-8, lone surrogates, NaN. ``decode`` either returns plain Python values that every
later step can walk, log and encode again, or raises ``JSONBodyError`` with a one-line reason
the endpoint puts in its own error shape; it never lets a RecursionError or a UnicodeError out.

orjson does the parsing: it refuses what Go's encoding/json refuses (NaN, Infinity, a number
that overflows a double, invalid UTF-8, lone surrogates) and stops at 1,024 levels without
recursing in Python. That limit is not enough on its own: orjson encodes only 254 levels and
the stdlib's encoder and repr recurse in C, so a 1,000-level body decodes and then fails
wherever it is written back out. MAX_DEPTH sits far above any Kubernetes object (a Pod with
managedFields is about 15 levels deep) and below all of those.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_DEPTH = 128


class JSONBodyError(ValueError):
    """A body that is not JSON gpupair accepts; the message says why, in one line."""


def decode(body: bytes | bytearray | memoryview | str) -> Any:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JSONBodyError(f"body is not JSON: {exc}") from None
    if not _within_depth(body, value):
        raise JSONBodyError(f"body is nested deeper than {MAX_DEPTH} levels")
    return value


def _within_depth(body: bytes | bytearray | memoryview | str, value: Any) -> bool:
    # Counting brackets is C-speed and rules out deep nesting for nearly every real body
    # (kube-scheduler's NodeNames bodies hold a few dozen), so the walk runs only past it.
    raw = body.encode() if isinstance(body, str) else bytes(body)
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return True
    if type(value) is not dict and type(value) is not list:
        return True
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        children = current.values() if type(current) is dict else current
        stack.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return True
