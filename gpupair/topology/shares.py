"""Each GPU's shares and how many pods hold: ``gpupair.io/shares``, a node annotation beside the
free report.

A device plugin that shares GPUs advertises each one several times: time-slicing and MPS as
``<id>::<n>`` replicas (under ``nvidia.com/gpu``, or ``nvidia.com/gpu.shared`` with
``renameByDefault``), MIG as slices of their parent GPU. The reporter counts, per GPU, the ids
the kubelet offers (``of``) and those containers hold (``taken``); a GPU offered once is whole.
A GPU with any share taken is not free in ``gpupair.io/free``; what is left of it is
``(of - taken) / of`` of a GPU, which the fragmentation score, ``status`` and ``snapshot`` read.
MIG slices are counted as slices, not by their size.

``replicated``: the shares are offered under the resource whole-GPU pods ask (time-slicing
without ``renameByDefault``), so a pod asking two "GPUs" there may be handed two replicas of one
GPU. Written only where some GPU is shared, tied to the free report by its generation as the
allocation ledger is; a missing or mismatched one leaves the report usable, every GPU whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from gpupair.topology import limits
from gpupair.kubewire.wire import annotation_model

SHARES_KEY = "gpupair.io/shares"
MILLI = 1000  # one GPU
MAX_SHARES = 1024  # shares of one GPU: time-slicing replicas are a small count in practice
MAX_SHARES_BYTES = 4 * 1024  # 16 GPUs of two numbers each: a few hundred bytes


class SharesError(ValueError):
    """``gpupair.io/shares`` is malformed or does not match its free report; the message says why."""


class _SharesModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    v: Literal[1] = 1
    topology: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=0)
    of: list[int] = Field(max_length=limits.MAX_GPUS)
    taken: list[int] = Field(max_length=limits.MAX_GPUS)
    replicated: bool = False
    # Per GPU, the shares the whole GPU is where more than ``of`` (MIG slices no offered device
    # has), else 0. Absent in the first form of this annotation.
    whole: list[int] | None = Field(default=None, max_length=limits.MAX_GPUS)


class SharedCapacity(NamedTuple):
    """One capacity of a DRA device several claims share (KEP-5075), as its ResourceSlice
    publishes it: every amount in thousandths of the capacity's unit, None where not set."""

    name: str  # with the driver's domain, as consumedCapacity is matched
    value: int
    published: str = ""  # the key as the slice writes it: v1.36's allocator matches a request's name to it
    default: int | None = None  # requestPolicy.default: what a request not naming it consumes
    valid_values: tuple[int, ...] = ()  # requestPolicy.validValues, ascending
    minimum: int | None = None  # requestPolicy.validRange
    maximum: int | None = None
    step: int | None = None


@dataclass(frozen=True)
class GpuShares:
    """Per GPU (by layout index): the shares it is offered as (1: whole) and those held, and
    where given, the shares the whole GPU is (0: ``of``)."""

    of: tuple[int, ...]
    taken: tuple[int, ...]
    replicated: bool = False  # shares under the whole-GPU resource name
    whole: tuple[int, ...] | None = None
    # DRA consumable capacity: per GPU, its capacities (None: not shared that way), so a claim
    # asking some of them is sized on it (gpupair/decide/picture/dra_capacity.py); never published
    capacity: tuple[tuple[SharedCapacity, ...] | None, ...] = field(default=(), compare=False)

    @property
    def shared(self) -> bool:
        return any(self.size(index) > 1 for index in range(len(self.of)))

    def size(self, index: int) -> int:
        """The shares the whole of GPU ``index`` is: ``of``, or more where MIG slices are not offered."""
        return max(self.of[index], self.whole[index] if self.whole is not None else 0)

    def milli_left(self, index: int) -> int:
        """What is left of GPU ``index``, in thousandths of a GPU."""
        size = self.size(index)
        return MILLI * max(self.of[index] - self.taken[index], 0) // size if size else 0

    def partly_taken(self, index: int) -> bool:
        return 0 < self.taken[index] < self.of[index]

    def share_milli(self, index: int) -> int:
        """One share of GPU ``index``, in thousandths of a GPU."""
        size = self.size(index)
        return MILLI // size if size else MILLI


def count_shares(size: int, offered: list[tuple[int, int]], held: list[tuple[int, int]],
                 replicated: bool = False, whole: dict[int, int] | None = None) -> GpuShares | None:
    """``offered`` and ``held``: (layout index, shares) of each device the kubelet offers and each
    its containers hold (a replica is 1 share, a MIG device its slices); ``whole``: the shares
    the whole GPU is, where known. None where every GPU is one share whole."""
    of, taken = [0] * size, [0] * size
    for index, shares in offered:
        of[index] += shares
    for index, shares in held:
        taken[index] += shares
    sizes = tuple(whole.get(i, 0) if whole and whole.get(i, 0) > of[i] else 0 for i in range(size))
    if not any(count > 1 for count in of) and not any(sizes):
        return None
    return GpuShares(tuple(of), tuple(taken), replicated, whole=sizes if any(sizes) else None)


def encode_shares(shares: GpuShares, topology_fingerprint: str, generation: int) -> str:
    model = _SharesModel(topology=topology_fingerprint, generation=generation, of=list(shares.of),
                         taken=list(shares.taken), replicated=shares.replicated,
                         whole=list(shares.whole) if shares.whole is not None else None)
    return json.dumps(model.model_dump(mode="json", exclude_none=True), separators=(",", ":"))


def decode_shares(text: object, size: int, topology_fingerprint: str, generation: int,
                  free: frozenset[int]) -> GpuShares:
    """The shares of a node of ``size`` GPUs whose free report is ``generation`` with ``free``."""
    model = annotation_model(SHARES_KEY, text, _SharesModel, MAX_SHARES_BYTES, SharesError)
    if model.topology != topology_fingerprint:
        raise SharesError(f"{SHARES_KEY} refers to topology {model.topology}, the node shows {topology_fingerprint}")
    if model.generation != generation:
        raise SharesError(f"{SHARES_KEY} is of generation {model.generation}, the free report of {generation}")
    if len(model.of) != size or len(model.taken) != size:
        raise SharesError(f"{SHARES_KEY} lists {len(model.of)} and {len(model.taken)} GPUs, the node has {size}")
    whole = model.whole if model.whole is not None else [0] * size
    if len(whole) != size:
        raise SharesError(f"{SHARES_KEY} gives the whole of {len(whole)} GPUs, the node has {size}")
    for index, (of, taken, gpu) in enumerate(zip(model.of, model.taken, whole)):
        if not 0 <= taken <= of <= MAX_SHARES:
            raise SharesError(f"{SHARES_KEY} GPU {index}: {taken} of {of} shares taken")
        if gpu and not of < gpu <= MAX_SHARES:
            raise SharesError(f"{SHARES_KEY} GPU {index}: {of} shares offered of a whole of {gpu}")
        if taken and index in free:
            raise SharesError(f"{SHARES_KEY} GPU {index} has {taken} shares taken but is listed free")
    return GpuShares(tuple(model.of), tuple(model.taken), model.replicated,
                     whole=tuple(model.whole) if model.whole is not None else None)
