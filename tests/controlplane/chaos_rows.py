"""What every row of the chaos matrix asserts and records (test_chaos.py on device-plugin nodes,
test_chaos_dra.py on DRA nodes), and the shared cluster's life around a test module.

Every row asserts what must hold whatever the fault: no GPU handed out twice (the harness
kubelet refused no pod, and the record gpupair decides by agrees with the node and names no GPU
twice), no SYS pair for a pod under ``required`` (the default), and every pod placed or
waiting with a reason that names the fault's effect. Every row records the time from the
fault's end to the next bind, the apiserver's lists, watches and writes until the last pod was
bound, and the signal an operator would watch. With GPUPAIR_CHAOS_RESULTS set to a file, the
rows of the session are written there as JSON, which bench/chaos_table.py renders into
docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.controlplane.burst import BurstCluster, Outcome
from tests.controlplane.faults import metric_total

RESULTS_ENV = "GPUPAIR_CHAOS_RESULTS"
ROWS: list[dict[str, Any]] = []  # every row of the session, in the order run


def running(cluster: BurstCluster, logs_name: str) -> Iterator[BurstCluster]:
    """``cluster`` started, yielded to a module's tests, then closed: its logs kept where
    GPUPAIR_CONTROLPLANE_LOGS says, and the session's rows written so far to GPUPAIR_CHAOS_RESULTS."""
    from tests.controlplane.conftest import LOGS_ENV, copy_logs

    began = time.time()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        keep = os.environ.get(LOGS_ENV)
        if keep:
            copy_logs(cluster.directory, began, Path(keep) / logs_name)
        target = os.environ.get(RESULTS_ENV)
        if target and ROWS:
            Path(target).write_text(json.dumps(ROWS, indent=1) + "\n")


def check(cluster: BurstCluster, outcome: Outcome, effects: tuple[str, ...], signal: str, value: float) -> None:
    """The row's invariants, then its figures recorded."""
    assert not outcome.refusals, f"{outcome.row}: the kubelet was sent pods it could not admit: {outcome.refusals}"
    assert outcome.sys_grants == [], f"{outcome.row}: SYS pairs under required: {outcome.sys_grants}"
    for pod, messages in outcome.waiting.items():
        assert messages and any(effect in messages[-1] for effect in effects), \
            f"{outcome.row}: {pod} waits without a reason naming {effects}: {messages[-1:]}"
    for node, pods in cluster.holdings().items():
        devices = [i for held in pods.values() for i in held]
        assert len(devices) == len(set(devices)), f"{outcome.row}: {node}: a GPU held twice: {pods}"
    record = {
        "row": outcome.row, "pods": outcome.pods, "placed": len(outcome.placed), "waiting": len(outcome.waiting),
        "gpus_twice": 0, "sys": 0, "fault_s": outcome.fault_s, "next_bind_s": outcome.next_bind_s,
        "all_placed_s": outcome.all_placed_s, **outcome.requests, "signal": signal, "signal_value": value,
        **outcome.notes,
    }
    ROWS.append(record)
    print(json.dumps(record))


def counter(cluster: BurstCluster, name: str, **labels: str) -> float:
    """A metric summed over the extender replicas running now."""
    return sum(metric_total(text, name, **labels) for text in cluster.extender_metrics().values())
