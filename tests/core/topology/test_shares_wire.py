"""gpupair.io/shares on the wire: the first form still decodes, a node without MIG slices left
out of its devices still writes it, and ``whole`` (MIG) is validated like the rest."""

from __future__ import annotations

import json

import pytest

from gpupair.topology import limits
from gpupair.topology.shares import MAX_SHARES_BYTES, GpuShares, SharesError, decode_shares, encode_shares

FINGERPRINT = "sha256:0123456789abcdef"


def test_the_first_form_decodes_as_before():
    written = f'{{"v":1,"topology":"{FINGERPRINT}","generation":3,"of":[4,4],"taken":[1,0],"replicated":true}}'
    shares = decode_shares(written, 2, FINGERPRINT, 3, frozenset({1}))
    assert shares == GpuShares((4, 4), (1, 0), True)
    assert shares.whole is None and [shares.milli_left(i) for i in range(2)] == [750, 1000]


def test_time_slicing_and_filled_mig_gpus_are_written_in_the_first_form():
    text = encode_shares(GpuShares((4, 7), (1, 3)), FINGERPRINT, 3)
    assert text == f'{{"v":1,"topology":"{FINGERPRINT}","generation":3,"of":[4,7],"taken":[1,3],"replicated":false}}'


def test_mig_slices_left_out_of_every_device_travel_as_whole():
    shares = GpuShares((7, 6, 1), (3, 3, 0), whole=(0, 7, 0))
    text = encode_shares(shares, FINGERPRINT, 3)
    assert json.loads(text)["whole"] == [0, 7, 0]
    decoded = decode_shares(text, 3, FINGERPRINT, 3, frozenset({2}))
    assert decoded == shares
    assert [decoded.milli_left(i) for i in range(3)] == [571, 428, 1000]
    assert decoded.share_milli(1) == 142 and decoded.shared


@pytest.mark.parametrize("whole, why", [([0, 5], "offered of a whole of 5"), ([0], "whole of 1 GPUs"),
                                        ([0, 2000], "offered of a whole of 2000")])
def test_a_whole_that_cannot_hold_what_is_offered_is_refused(whole, why):
    text = json.dumps({"v": 1, "topology": FINGERPRINT, "generation": 3, "of": [7, 6], "taken": [3, 3],
                       "whole": whole})
    with pytest.raises(SharesError, match=why):
        decode_shares(text, 2, FINGERPRINT, 3, frozenset())


def test_the_largest_mig_node_fits_the_size_limit():
    size = limits.MAX_GPUS
    shares = GpuShares((1000,) * size, (999,) * size, True, whole=(1024,) * size)
    assert len(encode_shares(shares, FINGERPRINT, 10**12)) <= MAX_SHARES_BYTES
