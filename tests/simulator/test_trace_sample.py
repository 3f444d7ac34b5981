"""sample_nodes: a smaller fleet with the trace's mix of (GPUs, model)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpupair.command.flags import InputError
from gpupair.simulator.trace.files import read_nodes
from gpupair.simulator.trace.node_sample import sample_nodes

NODES = read_nodes(Path(__file__).resolve().parents[1] / "fixtures" / "trace" / "openb_node_list_gpu_node.csv")


def mix(nodes) -> Counter:
    return Counter((n.gpus, n.model) for n in nodes)


def test_a_sample_has_the_count_asked_and_each_kind_of_node_in_its_share():
    sample = sample_nodes(NODES, 100, np.random.default_rng([42, 3]))
    assert len(sample) == len({n.name for n in sample}) == 100
    whole = mix(NODES)
    for kind, count in mix(sample).items():
        assert abs(count - 100 * whole[kind] / len(NODES)) < 1, kind
    names = [n.name for n in NODES]
    assert [names.index(n.name) for n in sample] == sorted(names.index(n.name) for n in sample)


def test_the_same_seed_draws_the_same_nodes_and_another_seed_others():
    first = sample_nodes(NODES, 100, np.random.default_rng([42, 3]))
    assert first == sample_nodes(NODES, 100, np.random.default_rng([42, 3]))
    assert first != sample_nodes(NODES, 100, np.random.default_rng([43, 3]))


def test_asking_the_whole_fleet_or_more_gives_it_and_none_is_refused():
    assert sample_nodes(NODES, 5000, np.random.default_rng(1)) == NODES
    with pytest.raises(InputError, match="--nodes must be at least 1"):
        sample_nodes(NODES, 0, np.random.default_rng(1))
