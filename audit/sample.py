"""One audit sample: a pod's TSV row, decided from what the cluster shows of it.

Sources, best first: the verifier's verdict annotations on the pod (it saw the grant on the node
itself), then the pod log parsed like the seed did. A pod that did not finish in time is
FAIL_TIMEOUT whatever else is known of it: the audit could not watch it run to the end, and a
pod stuck Pending usually means no GPU set was free, which is a finding in itself.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupair.decide.judge import verdict as verdicts
from gpupair.topology.layout import NodeLayout

from gpupair.audit.pod_log import UNKNOWN, LogParseError, classify_log

FAIL_TIMEOUT = "FAIL_TIMEOUT"
RESULTS = (verdicts.PASS, verdicts.FAIL, verdicts.FAIL_PARSE, FAIL_TIMEOUT)
FINISHED_PHASES = ("Succeeded", "Failed")

_ANNOTATION_COLUMNS = (
    verdicts.GRANTED_KEY,
    verdicts.PCI_KEY,
    verdicts.NUMA_KEY,
    verdicts.LINK_KEY,
    verdicts.VERDICT_KEY,
)


@dataclass(frozen=True)
class Sample:
    round: str
    pod: str
    phase: str
    node: str  # "" when the pod was never scheduled
    gpu_pair: str
    pci_pair: str
    numa_pair: str
    topo: str
    result: str
    source: str  # "annotations", "log" or "none"
    reason: str = ""  # why a sample is FAIL_PARSE or FAIL_TIMEOUT

    @property
    def passed(self) -> bool:
        return self.result == verdicts.PASS

    def tsv_row(self) -> str:
        return "\t".join(
            (self.round, self.pod, self.phase, self.gpu_pair, self.pci_pair,
             self.numa_pair, self.topo, self.result)
        )


def tsv_header() -> str:
    return "\t".join(verdicts.TSV_HEADER)


def _clean(value: str) -> str:
    # A value with a tab or newline would shift every later column of the TSV.
    return " ".join(value.split()) or UNKNOWN


def from_annotations(annotations: Mapping[str, str] | None) -> verdicts.Verdict | None:
    """The verifier's verdict on a pod, or None when it left none (or an incomplete one)."""
    annotations = annotations or {}
    if any(key not in annotations for key in _ANNOTATION_COLUMNS):
        return None
    if annotations[verdicts.VERDICT_KEY] not in (verdicts.PASS, verdicts.FAIL):
        return None
    return verdicts.Verdict(
        granted=_clean(annotations[verdicts.GRANTED_KEY]),
        pci=_clean(annotations[verdicts.PCI_KEY]),
        numa=_clean(annotations[verdicts.NUMA_KEY]),
        link=_clean(annotations[verdicts.LINK_KEY]),
        p2p=_clean(annotations.get(verdicts.P2P_KEY, "unknown")),
        result=annotations[verdicts.VERDICT_KEY],
    )


def decide(
    *,
    round_label: str,
    pod: str,
    phase: str | None,
    node: str | None,
    annotations: Mapping[str, str] | None,
    log: str | None,
    layout: NodeLayout | None,
    expected_gpus: int | None,
    timed_out: bool,
) -> Sample:
    """The sample for one pod from its last observed state.

    ``phase`` None: the pod was gone when read. ``log`` None: no log could be read.
    ``layout``: the node's reported layout, if it has a report.
    """
    shown_phase = phase or UNKNOWN
    verdict = from_annotations(annotations)
    source = "annotations"
    reason = ""
    if verdict is None:
        source = "log"
        try:
            if log is None:
                raise LogParseError("no log (the container never started, or the pod is gone)")
            verdict = classify_log(log, layout, expected_gpus)
        except LogParseError as exc:
            source = "none"
            reason = str(exc)
    if verdict is None:
        columns = (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
        result = verdicts.FAIL_PARSE
    else:
        columns = (verdict.granted, verdict.pci, verdict.numa, verdict.link)
        result = verdict.result
    if timed_out:
        result = FAIL_TIMEOUT
        reason = f"not finished when the timeout ran out (phase {shown_phase})" + (
            f"; {reason}" if reason else ""
        )
    return Sample(round_label, pod, shown_phase, node or "", *columns, result, source, reason)
