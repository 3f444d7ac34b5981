"""The JSON Schema of `gpupair status -o json`, kept in docs/status.schema.json.

Regenerate after changing status/view.py: ``python -m gpupair.status.schema > docs/status.schema.json``
(a test fails while the two differ, so the documented schema cannot drift from the output)."""

from __future__ import annotations

import json

from gpupair.status.view import StatusView

SCHEMA_ID = "https://gpupair.io/schemas/status-v1.json"


def schema() -> dict:
    body = StatusView.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **body}


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
