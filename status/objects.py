"""Reading the raw API objects status lists: times, Event shapes, pod phase. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

TERMINAL_PHASES = ("Succeeded", "Failed")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time as the API writes it (Time or MicroTime); None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    value = meta(obj).get("annotations")
    return value if isinstance(value, Mapping) else {}


def pod_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    m = meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase") or "") in TERMINAL_PHASES


def scheduled_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod was bound: its PodScheduled=True condition's lastTransitionTime."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" \
                and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


# Events: core/v1 and events.k8s.io/v1 are two views of one store. A core/v1 list shows events
# written through events.k8s.io converted (regarding -> involvedObject, note -> message); read
# both spellings anyway, so a proxy or an old apiserver that does not convert is understood too.

def event_object(event: Mapping[str, Any]) -> Mapping[str, Any]:
    value = event.get("involvedObject") or event.get("regarding") or {}
    return value if isinstance(value, Mapping) else {}


def event_text(event: Mapping[str, Any]) -> str:
    return str(event.get("message") or event.get("note") or "")


def event_time(event: Mapping[str, Any]) -> datetime | None:
    """The last time the event was seen, from the first of its time fields its writer filled:
    a series' last observation or the last timestamp, else when it was first seen, else when
    the object was created."""
    series = event.get("series") if isinstance(event.get("series"), Mapping) else {}
    for group in ((series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime"),
                   event.get("deprecatedLastTimestamp")),
                  (event.get("firstTimestamp"), event.get("deprecatedFirstTimestamp")),
                  (meta(event).get("creationTimestamp"),)):
        times = [t for t in map(parse_time, group) if t is not None]
        if times:
            return max(times)
    return None


def latest_events(events: list[Mapping[str, Any]], reason: str) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The newest Event with ``reason`` per pod, keyed by (namespace, name) and by ("uid", uid).

    Keyed by uid too so that an event about an earlier pod of the same name is not taken for
    this one's when the uid is known."""
    newest: dict[tuple[str, str], tuple[datetime | None, Mapping[str, Any]]] = {}
    for event in events:
        if event.get("reason") != reason:
            continue
        involved = event_object(event)
        if involved.get("kind") not in (None, "", "Pod"):
            continue
        keys = [(str(involved.get("namespace") or meta(event).get("namespace") or ""),
                 str(involved.get("name") or ""))]
        if involved.get("uid"):
            keys.append(("uid", str(involved["uid"])))
        when = event_time(event)
        for key in keys:
            seen = newest.get(key)
            if seen is None or _later(when, seen[0]):
                newest[key] = (when, event)
    return {key: event for key, (_, event) in newest.items()}


def event_for(pod: Mapping[str, Any], by_key: Mapping[tuple[str, str], Mapping[str, Any]]
              ) -> Mapping[str, Any] | None:
    uid = meta(pod).get("uid")
    if uid and ("uid", str(uid)) in by_key:
        return by_key[("uid", str(uid))]
    event = by_key.get(pod_key(pod))
    if event is not None and uid and event_object(event).get("uid") not in (None, "", uid):
        return None  # about an earlier pod with the same name
    return event


def _later(a: datetime | None, b: datetime | None) -> bool:
    if a is None:
        return b is None
    return b is None or a >= b
