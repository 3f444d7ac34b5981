"""NodeLayout and NodeState as cache keys: what the placement caches and the fragmentation
score rely on (gpupair/topology/layout.py)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import replace

from gpupair.topology.layout import NodeState
from tests.layouts import seed_layout


def test_equal_layouts_hash_alike_and_a_changed_one_differs():
    layout = seed_layout()
    twin = replace(layout)
    assert twin is not layout and twin == layout and hash(twin) == hash(layout)
    walked = replace(layout, walk=tuple(reversed(range(layout.size))))
    assert walked != layout and hash(walked) != hash(layout)


def test_a_pickled_layout_hashes_afresh_where_it_lands():
    """str hashes differ between processes: a hash computed here must not travel."""
    layout = seed_layout()
    hash(layout)
    data = pickle.dumps(layout)
    code = ("import pickle, sys; layout = pickle.loads(sys.stdin.buffer.read()); "
            "from dataclasses import replace; print(hash(layout) == hash(replace(layout)))")
    done = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert done.stdout.decode().strip() == "True", done.stderr.decode()


def test_free_mask_is_the_free_devices_as_bits():
    layout = seed_layout()
    assert NodeState(layout, frozenset({0, 2, 5})).free_mask == 0b100101
    assert NodeState(layout).free_mask == 0
