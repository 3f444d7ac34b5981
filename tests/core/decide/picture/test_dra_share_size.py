"""A claim asking a share of a DRA GPU by ``capacity.requests`` (KEP-5075), sized as v1.36's
allocator sizes it on a device (gpupair/decide/picture/dra_capacity.py ``share_milli``), and read as
shares, not whole GPUs, from the claim (dra_picture.claim_demand)."""

from __future__ import annotations

import copy

import pytest

from gpupair.decide.picture.dra_capacity import capacity_asked, share_milli, shared_capacity
from gpupair.decide.picture.dra_picture import claim_demand
from gpupair.kubewire import dra
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES
from tests.controlplane.dra import pinned_claim
from tests.core.decide.picture.test_dra_capacity import report
from tests.dra_support import DRIVER, share_claim, shared_slice

GI = 2**30


def device(memory: str = "32Gi", policy: dict | None = None, **more: dict) -> tuple:
    """A shareable device's capacities, as dra_capacity reads them from its slice."""
    capacity = {"memory": {"value": memory, **({"requestPolicy": policy} if policy else {})}, **more}
    parsed = dra.parse_slice({"spec": {"driver": DRIVER, "pool": {"name": "p"}, "devices": [
        {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": capacity}]}})
    return shared_capacity(parsed.spec.devices[0], DRIVER)


def size(capacity: tuple, **asked: str) -> int | None:
    return share_milli(capacity, capacity_asked(asked, "test"))


STEPS = {"default": "8Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}  # tests/dra_support.shared_slice's


def test_a_share_is_what_it_asks_over_the_devices_capacity():
    assert size(device(), memory="8Gi") == 250
    assert size(device("80Gi"), memory="8Gi") == 100  # the same claim is a smaller share of a larger GPU


def test_an_amount_is_rounded_up_to_the_policys_step_and_min():
    steps = device(policy=STEPS)
    assert size(steps, memory="7500Mi") == 250  # up to 8Gi
    assert size(steps, memory="100Mi") == 32  # up to the 1Gi min: 31.25 thousandths, rounded up
    odd = device(policy={"validRange": {"min": "2Gi", "step": "4Gi"}})
    assert size(odd, memory="3Gi") == 188  # 2Gi + one 4Gi step = 6Gi of 32Gi


def test_an_amount_is_rounded_up_to_the_first_valid_value_that_holds_it():
    values = device("40Gi", {"validValues": ["10Gi", "20Gi", "40Gi"]})
    assert size(values, memory="12Gi") == 500
    assert size(values, memory="50Gi") is None  # none holds it: the amount stays, and breaks the policy


def test_a_device_that_cannot_serve_the_ask_has_no_size():
    assert size(device(), memory="40Gi") is None  # more than it has
    assert size(device(policy={"validRange": {"min": "1Gi", "max": "16Gi"}}), memory="20Gi") is None  # past max
    assert size(device(), cores="2") is None  # a capacity it does not publish


def test_a_capacity_not_asked_consumes_its_default_else_all_of_it():
    cores = {"cores": {"value": "100", "requestPolicy": {"default": "10"}}}
    assert size(device(**cores), memory="4Gi") == 125  # memory 125, cores 100 (the default of 100)
    whole = {"cores": {"value": "100"}}
    assert size(device(**whole), memory="4Gi") == 1000  # no default: the request takes every core


def test_a_claim_asking_capacity_asks_shares_not_gpus():
    share = claim_demand(dra.parse_claim(pinned_claim("ml", "share", 2, memory="8Gi")), GPU_DEVICE_CLASSES)
    whole = claim_demand(dra.parse_claim(pinned_claim("ml", "whole", 2)), GPU_DEVICE_CLASSES)
    assert (share.gpus, share.shares, share.asked) == (0, 1, (("memory", 8 * GI * 1000),))
    assert (whole.gpus, whole.shares, whole.asked) == (1, 0, ())


def test_two_share_requests_ask_the_most_of_each_capacity():
    claim = pinned_claim("ml", "two", 2, memory="8Gi")
    other = copy.deepcopy(claim["spec"]["devices"]["requests"][0])
    other["name"] = "more"
    other["exactly"]["capacity"]["requests"]["memory"] = "12Gi"
    claim["spec"]["devices"]["requests"].append(other)
    demand = claim_demand(dra.parse_claim(claim), GPU_DEVICE_CLASSES)
    assert (demand.gpus, demand.shares, demand.asked) == (0, 2, (("memory", 12 * GI * 1000),))


@pytest.mark.parametrize("memory, sized", [("32Gi", 250), ("16Gi", 500)])
def test_the_pictures_shared_gpus_carry_their_capacities_to_size_a_claim_on(memory, sized):
    got = report([shared_slice("dra-node-1", memory=memory)],
                 [share_claim("dra-probe", "a", "dra-node-1", {2: "4Gi"})])
    assert got.shares is not None and all(got.shares.capacity)
    assert size(got.shares.capacity[2], memory="8Gi") == sized
