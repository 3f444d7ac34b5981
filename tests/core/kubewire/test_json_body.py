"""gpupair.kubewire.json_body: what every endpoint accepts as JSON, and the one-line reasons it refuses."""

from __future__ import annotations

import pytest

from gpupair.kubewire.json_body import MAX_DEPTH, JSONBodyError, decode


def arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def objects(depth: int) -> bytes:
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


@pytest.mark.parametrize("nest", [arrays, objects])
def test_depth_up_to_the_limit_decodes_and_one_more_is_refused(nest):
    assert decode(nest(MAX_DEPTH)) is not None
    with pytest.raises(JSONBodyError, match=f"nested deeper than {MAX_DEPTH} levels"):
        decode(nest(MAX_DEPTH + 1))
    with pytest.raises(JSONBodyError, match=f"nested deeper than {MAX_DEPTH} levels"):
        decode(b'{"ok": [1, 2], "deep": ' + nest(MAX_DEPTH) + b"}")  # the walk finds it below the top


def test_brackets_inside_strings_are_not_nesting():
    # gpupair's own annotations hold JSON text: thousands of brackets, two levels.
    assert decode(b'{"topology": "' + b"[{" * 5000 + b'"}') == {"topology": "[{" * 5000}


@pytest.mark.parametrize("body, words", [
    (b"[" * 100_000, "depth limit exceeded"),  # orjson stops at 1,024 levels, without recursing
    (b"1e400", "infinity"),
    (b"NaN", "not JSON"),
    (b'"\xff"', "UTF-8"),
    (b'"\\ud800"', "surrogate"),
    (b"", "not JSON"),
])
def test_what_go_refuses_is_refused_in_one_line(body, words):
    with pytest.raises(JSONBodyError) as refused:
        decode(body)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_numbers_past_64_bits_decode_as_floats_not_errors():
    assert decode(b"[18446744073709551616, -9223372036854775809]") == [1.8446744073709552e19, -9.223372036854776e18]
