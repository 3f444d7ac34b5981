"""What `gpupair status -o json` prints: the stable, documented shape (docs/status.schema.json).

Additive changes keep ``schemaVersion``; renaming or removing a field bumps it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
DeviceState = Literal["free", "shared", "taken", "reserved", "unhealthy"]
NodeState = Literal["fresh", "stale", "missing", "invalid"]


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_serialization_defaults_required=True)


class DeviceView(_View):
    index: int = Field(description="GPU index on the node (nvidia-smi's)")
    state: DeviceState = Field(description="free, shared (some of its shares taken, some left), taken (in use "
                                           "per the report), reserved (bound pods the report cannot show yet), "
                                           "unhealthy")
    shares: str | None = Field(default=None, description=(
        "shares taken of the shares the GPU is split into (time-slicing or MPS replicas, MIG compute slices), "
        "as '1/4', or '3/6 of 7' where its MIG devices leave slices of the GPU out; from gpupair.io/shares; "
        "null for a GPU not shared"))


class NumaView(_View):
    numa: str = Field(description="NUMA0, NUMA1...; NUMA?0 for a group inferred from SYS links")
    devices: list[DeviceView]
    nics: list[str] | None = Field(default=None, description=(
        "the RDMA NICs on this NUMA node (their own numaNode, else that of the GPU they are closest to, "
        "short of SYS), from gpupair.io/nics; null where the node's reporter publishes none"))


class CloseSet(_View):
    gpus: int = Field(description="GPUs free together on one NUMA node, reservations taken out")
    numa: str | None = Field(description="the NUMA node holding them; null when none is free")


class Reserved(_View):
    basis: Literal["ledger", "binding-time"] | None = Field(
        description="ledger: bound GPU pods the node's allocation ledger does not list (exact); binding-time: "
                    "without a usable ledger, pods bound after the report's reportedAt (a lower bound); "
                    "null: no usable report")
    pods: list[str] = Field(description="namespace/name of the bound GPU pods the report does not show yet")
    devices: list[int] = Field(description="devices those pods' plans (gpupair.io/planned) name, free in the report")
    unplaced: int = Field(description="GPUs those pods hold whose devices nothing names yet")


HeartbeatSource = Literal["report", "lease", "dra"]


class NodeStatus(_View):
    name: str
    state: NodeState
    reason: str = Field(description="why the report is not fresh, in the extender's words; empty when it is")
    heartbeatSource: HeartbeatSource | None = Field(
        description="what the age is measured from: the newest of the free report's reportedAt and the "
                    "renewTime of the node's reporter Lease; dra: the node's GPUs are DRA devices, its picture "
                    "comes from its ResourceSlices and the allocated ResourceClaims as listed now")
    heartbeatAt: datetime | None
    ageSeconds: float | None
    generation: int | None
    gpus: int | None = Field(description="GPUs in the reported layout, else the node's allocatable count")
    numa: list[NumaView] = Field(description="the last decoded report's devices by NUMA node (also when stale)")
    largestFree: CloseSet | None
    reserved: Reserved
    ledgerProblem: str = Field(description="why the node's allocation ledger was there but not used; empty "
                                           "when it was used or absent")


class FragmentationRow(_View):
    gpus: int
    nodes: int = Field(description="nodes with a fresh report that the extender would let a pod of this many GPUs "
                                   "onto now: on one NUMA node, or for more GPUs than a NUMA node has, within the "
                                   "fewest NUMA nodes (reservations whose devices are unknown counted against it)")


class NodeCounts(_View):
    total: int
    fresh: int
    stale: int
    missing: int
    invalid: int


SHARES_ASKED = ("the GPU shares its DRA claims ask by consumable capacity (capacity.requests), each in thousandths "
                "of the cluster's most common GPU shared by capacity, as the allocator would size it: '250/1000', "
                "'2 x 250/1000'; '?/1000' where that GPU cannot serve the ask; null where it asks none, or no GPU "
                "listed is shared by capacity (each share then takes a whole GPU, counted in gpus)")


class PendingPod(_View):
    namespace: str
    name: str
    gpus: int = Field(description="whole GPUs asked: the extended-resource request plus what the pod's own DRA claims "
                                  "ask of the GPU DeviceClasses (shares by consumable capacity aside, where a GPU listed "
                                  "is shared by capacity)")
    shares: str | None = Field(default=None, description=SHARES_ASKED)
    placement: Literal["required", "preferred", "none"] | None = Field(
        default=None, description="the placement the pod asks: its DRA claims' gpupair.io/placement (or the "
                                  "webhook's constraint shape), else its own annotation; null when neither says "
                                  "(the extender's --default-placement applies)")
    createdAt: datetime | None
    reason: str | None = Field(description="the last FailedScheduling message; null when none was seen")
    reasonAt: datetime | None


class FailVerdict(_View):
    namespace: str
    name: str
    node: str | None
    granted: str | None
    numa: str | None
    link: str | None
    at: datetime | None = Field(description="time of the GPUPlacementFailed Event; null when none was seen")
    source: Literal["pod", "event"] = Field(description="pod: the pod's verdict annotations; "
                                                        "event: only an Event (the pod is gone or not visible)")
    message: str


class NotVerified(_View):
    namespace: str
    name: str
    node: str
    gpus: int
    verdict: Literal["not verified"] = Field(default="not verified", description=(
        "no verdict will come: the pod has no gpupair-verify sidecar to ask its node's reporter for one"))
    reason: str


class Unseen(_View):
    resource: str
    reason: str


class Summary(_View):
    nodes: NodeCounts
    fragmentation: list[FragmentationRow]
    pending: list[PendingPod]
    failVerdicts: list[FailVerdict]
    notVerified: list[NotVerified] = Field(description=(
        "bound multi-GPU pods of the device plugin with no verdict and no verifier sidecar: created while the "
        "webhook was down (failurePolicy Ignore) or in a namespace not opted in"))


class StatusView(_View):
    schemaVersion: Literal[1] = SCHEMA_VERSION
    generatedAt: datetime
    staleAfterSeconds: float
    nodes: list[NodeStatus]
    summary: Summary
    unseen: list[Unseen] = Field(description="what the caller could not list, and why: the rest is partial")
