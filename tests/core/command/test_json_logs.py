"""gpupair's log lines: one JSON object per line, with the record's ``extra`` fields, whatever
values they hold."""

from __future__ import annotations

import json
import logging
import re

from gpupair.command.service import JsonFormatter


def line(message: str, exc_info=None, **extra) -> dict:
    record = logging.LogRecord("gpupair.test", logging.WARNING, "", 0, message, None, exc_info)
    record.__dict__.update(extra)
    text = JsonFormatter().format(record)
    assert "\n" not in text  # one line per record
    return json.loads(text)


def test_a_line_carries_time_level_logger_message_and_extras_in_order():
    entry = line("bound", pod="ns/p", node="gpu-1", gpus=2, plan="0,1", seconds=0.0123)
    assert list(entry) == ["ts", "level", "logger", "msg", "pod", "node", "gpus", "plan", "seconds"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])  # UTC, milliseconds
    assert entry["level"] == "warning" and entry["logger"] == "gpupair.test"
    assert (entry["msg"], entry["gpus"], entry["seconds"]) == ("bound", 2, 0.0123)


def test_values_json_has_no_type_for_are_written_as_text():
    entry = line("odd", devices={3}, keys={1: "a"}, text="näive\n")
    assert entry["devices"] == "{3}"  # a set, through str()
    assert entry["keys"] == {"1": "a"}
    assert entry["text"] == "näive\n"


def test_an_integer_past_64_bits_is_written_whole():
    assert line("big", big=2 ** 70, devices={3})["big"] == 2 ** 70


def test_an_exception_is_written_with_its_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        entry = line("failed", exc_info=sys.exc_info())
    assert "ValueError: boom" in entry["exc"]


def test_internal_record_fields_stay_out(monkeypatch):
    for flag in ("logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, flag, True)  # recorded, as without setup_logging
    entry = line("x")
    assert not {"thread", "threadName", "process", "processName", "args", "pathname"} & set(entry)
