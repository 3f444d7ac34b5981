"""The fragmentation score read from kept rows (extender/cache/score_rows.py) gives, after every kind of
change the extender's watches deliver, the grades of the node-by-node reading: a pod bound (CPU
left), a report rewritten, a product label changed, a node deleted and one added, a hold from a
bind, time passing a report's staleness, a Lease renewal bringing it back, and a DRA claim
allocated on a node whose GPUs a driver publishes."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gpupair.decide.judge.reservations import Reservation
from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.decide.pod.intent import Intent
from gpupair.extender.fragmentation_score import fragmentation_scores
from gpupair.extender.protocol import ExtenderArgs
from gpupair.kubewire.leases import HEARTBEAT_LABEL
from gpupair.topology.report import PRODUCT_KEY
from tests.extender_support import NOW, args_body, make_extender, pod_object, report_annotations

PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB")
STALE_AFTER = 300.0


def node(name: str, free: set[int], cpu: int, product: str, age: float = 0.0) -> dict:
    """A node whose product is its GFD label's (the report names none)."""
    annotations = report_annotations(free, node=name, reported_at=NOW - timedelta(seconds=age))
    annotations.pop(PRODUCT_KEY, None)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {PRODUCT_LABEL: product}, "annotations": annotations},
            "status": {"allocatable": {"cpu": f"{cpu}m", "nvidia.com/gpu": "8"}}}


def pod(uid: str, gpus: int, cpu: int, node_name: str = "") -> dict:
    made = pod_object(gpus, name=uid, uid=uid)
    made["metadata"]["resourceVersion"] = "1"
    made["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = f"{cpu}m"
    if node_name:
        made["spec"]["nodeName"] = node_name
    return made


def lease(name: str, at: float) -> dict:
    stamp = (NOW + timedelta(seconds=at)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": name, "namespace": "gpupair-system", "labels": {HEARTBEAT_LABEL: "node"}},
            "spec": {"holderIdentity": name, "renewTime": stamp}}


class Cluster:
    def __init__(self, seed: int = 3):
        self.rng = random.Random(seed)
        self.now = [NOW.timestamp()]
        self.extender = make_extender(fragmentation=True, node_cache=True, heartbeats=True, stale_after=STALE_AFTER,
                                      clock=lambda: self.now[0])
        self.usage, self.rows = self.extender.score.usage, self.extender.score.rows
        self.nodes = {f"n{i}": node(f"n{i}", self.free(), self.rng.choice((16_000, 32_000, 96_000)),
                                    PRODUCTS[i % 2], age=200.0 if i % 5 == 0 else 0.0) for i in range(16)}
        self.extender.node_cache.replace(list(self.nodes.values()))
        for i in range(16):  # the workload: pods bound and waiting, CPU-only and GPU, half pinned to a product
            where = self.rng.choice([*self.nodes, ""])
            made = pod(f"w{i}", self.rng.choice((0, 1, 2, 4, 8)), self.rng.choice((1000, 2000)), where)
            if i % 2 == 0:
                made["spec"]["nodeSelector"] = {PRODUCT_LABEL: PRODUCTS[0]}
            self.usage.pod_seen(made)

    def free(self) -> set[int]:
        return {gpu for gpu in range(8) if self.rng.random() < 0.6}

    def both(self, scored: dict, gpus: int, intent: Intent = Intent.REQUIRED) -> tuple[list[int], list[int]]:
        """(from the rows, node by node) for ``scored`` offered every node and one unknown name."""
        evaluator = self.extender.evaluator
        names = [*self.nodes, "not-a-node"]
        offer = evaluator.offer(ExtenderArgs.model_validate(args_body(scored, names=names)))
        assert offer.cached
        cpu = int(scored["spec"]["containers"][0]["resources"]["requests"]["cpu"][:-1])
        kept = fragmentation_scores(evaluator, self.usage, offer, gpus, cpu, intent, rows=self.rows)
        read = fragmentation_scores(evaluator, self.usage, offer, gpus, cpu, intent)
        return kept, read

    def agree(self) -> list[list[int]]:
        """Every ask's grades, asserting both readings agree; returned so a step can show it
        changed something."""
        seen = []
        for gpus, intent in ((0, Intent.REQUIRED), (1, Intent.REQUIRED), (2, Intent.REQUIRED), (4, Intent.REQUIRED),
                             (2, Intent.PREFERRED)):
            kept, read = self.both(pod(f"scored-{gpus}", gpus, 4000), gpus, intent)
            assert kept == read, (gpus, intent)
            seen.append(read)
        return seen


def test_a_fresh_cluster_reads_alike_and_grades_apart():
    cluster = Cluster()
    grades = cluster.agree()
    assert all(len(set(each)) >= 2 for each in grades), grades  # a fleet that tells nodes apart


@pytest.mark.parametrize("step", ["pod bound", "pod gone", "report", "label", "deleted", "added", "hold",
                                  "stale", "lease"])
def test_each_change_reaches_the_rows(step):
    cluster = Cluster()
    before = cluster.agree()
    cache, usage = cluster.extender.node_cache, cluster.usage
    if step in ("pod bound", "pod gone"):  # CPU left falls where the pod lands, and comes back
        for name in ("n1", "n2", "n3"):
            usage.pod_seen(pod(f"big-{name}", 0, 12_000, name))
        if step == "pod gone":
            before = cluster.agree()
            for name in ("n1", "n2", "n3"):
                usage.pod_gone(f"big-{name}")
    elif step == "report":
        for name in ("n1", "n2", "n3", "n4"):
            cache.apply("MODIFIED", node(name, {0, 1, 2, 3} if name != "n2" else set(), 96_000, PRODUCTS[1]))
    elif step == "label":
        for name in ("n0", "n2", "n4", "n6", "n8", "n10"):  # the A100s the pinned pods wait for, less two
            changed = dict(cluster.nodes[name])
            changed["metadata"] = {**changed["metadata"], "labels": {PRODUCT_LABEL: PRODUCTS[1]}}
            cache.apply("MODIFIED", changed)
    elif step == "deleted":
        for name in ("n1", "n3"):
            cache.apply("DELETED", cluster.nodes[name])
    elif step == "added":
        cache.apply("DELETED", cluster.nodes["n1"])
        cluster.agree()
        cache.apply("ADDED", node("n1", set(range(8)), 64_000, PRODUCTS[0]))
    elif step == "hold":
        for name in ("n1", "n2", "n3", "n6"):
            free = cache.get(name).report.state.free
            cluster.extender.reservations.reserve(Reservation(f"bound-{name}", name, frozenset(sorted(free)[:2])))
    elif step == "stale":
        cluster.now[0] += 150.0  # the reports aged 200 s turn stale
    elif step == "lease":
        cluster.now[0] += 150.0
        cluster.agree()
        for name in ("n0", "n5", "n10"):
            cluster.extender.heartbeats.apply("ADDED", lease(name, 140.0))
    after = cluster.agree()
    assert after != before, "the step changed nothing the score reads: it tests nothing"


def test_a_dra_claim_allocated_reaches_the_rows():
    """On nodes whose GPUs a DRA driver publishes, a claim allocated changes what is free with no
    Node written: the picture's source tells the node cache, which marks the row."""
    from gpupair.decide.score.gpu_products import PRODUCT_LABEL as LABEL
    from tests.dra_support import DRIVER, FRAGMENTED, allocated_claim, fragmented_cluster
    from tests.extender.test_extender_dra import dra_node

    slices, claims = fragmented_cluster()
    extender = make_extender(fragmentation=True, node_cache=True, dra_driver=DRIVER)
    extender.dra.slices.replace(slices)
    extender.dra.claims.replace(claims)
    nodes = [dra_node(name) for name in FRAGMENTED]
    for made in nodes:
        made["metadata"]["labels"][LABEL] = PRODUCTS[0]
        made["status"]["allocatable"]["cpu"] = "64"
    extender.node_cache.replace(nodes)
    usage, rows, evaluator = extender.score.usage, extender.score.rows, extender.evaluator
    for number, gpus in enumerate((2, 4, 4, 1)):  # waiting pods: the workload
        usage.pod_seen(pod(f"wait-{number}", gpus, 1000))

    def both() -> tuple[list[int], list[int]]:
        offer = evaluator.offer(ExtenderArgs.model_validate(args_body(pod("one", 1, 1000), names=list(FRAGMENTED))))
        assert offer.cached
        kept = fragmentation_scores(evaluator, usage, offer, 1, 1000, rows=rows)
        return kept, fragmentation_scores(evaluator, usage, offer, 1, 1000)

    kept, read = both()
    assert kept == read
    extender.dra.claims.apply("ADDED", allocated_claim("ml", "one", "dra-node-3", [0]))  # its pair, broken
    after_kept, after_read = both()
    assert after_kept == after_read
    assert after_read != read, "the claim changed nothing the score reads: it tests nothing"


def test_a_row_is_scored_again_only_when_what_the_measure_reads_changed():
    """A report re-written as it was (a reporter's heartbeat: a new time, the same GPUs) keeps the
    row's kept per-shape amounts; a report with other GPUs free has them computed again."""
    cluster = Cluster()
    cluster.agree()
    rows, cache = cluster.rows, cluster.extender.node_cache
    computed = rows.per_shape_computed
    cluster.agree()
    assert rows.per_shape_computed == computed  # nothing changed: every row read from what is kept
    cluster.now[0] += 30.0
    same = node("n1", set(cache.get("n1").report.state.free), 16_000, PRODUCTS[1], age=-30.0)  # reported now
    same["status"] = cluster.nodes["n1"]["status"]
    same["metadata"]["labels"] = cluster.nodes["n1"]["metadata"]["labels"]
    decodes = cache.decodes
    cache.apply("MODIFIED", same)
    assert cache.decodes == decodes + 1  # a new report, read again
    cluster.agree()
    assert rows.per_shape_computed == computed
    flipped = set(range(8)) - cache.get("n1").report.state.free
    other = dict(same, metadata={**same["metadata"], "annotations": node("n1", flipped, 16_000, PRODUCTS[1])[
        "metadata"]["annotations"]})
    cache.apply("MODIFIED", other)
    cluster.agree()
    assert rows.per_shape_computed > computed
