"""The extender's HTTP app: POST {prefix}/filter, /bind, /preempt (the GPU entry's verbs),
/prioritize-every-pod (the every-pod entry's, extender/every_pod.py), /prioritize (the same
score, for a GPU entry that lists it), plus /healthz,
/readyz and /metrics. ``assemble`` builds the parts and picks the score once (who tells whom
among the caches: extender/cache/wiring.py); ``build_app`` only serves them, on
extender/http_server.py (not aiohttp: kube-scheduler's path pays for every object per request).

Every handler answers; none lets an exception become a 500. A body that cannot be decoded
gets HTTP 400 with the protocol's own error shape: ExtenderFilterResult / ExtenderBindingResult
with ``Error`` filled. HostPriorityList has no error field, so prioritize answers 400 with a
JSON ``{"Error": ...}`` body: kube-scheduler's HTTPExtender turns any non-200 into an error and
its prioritizeNodes drops that extender's scores for the cycle ("Prioritization errors from
extender can be ignored") without failing the pod, which is what a bad body deserves; the body
is for people and logs, the scheduler does not read it. ExtenderPreemptionResult has no error
field either: preempt answers a bad body the same way, and kube-scheduler then skips this
extender's opinion (ignorable) or gives up preempting for the cycle. An unexpected failure
inside a handler is logged and answered 200 with Error filled (filter, bind), with equal
scores (prioritize) or with the scheduler's own victims (preempt): no opinion, so the
scheduler never sees a 5xx from this process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s

from gpupair.extender.bind import Binder
from gpupair.decide.picture.dra_source import ClaimNotSeen, DraFeed
from gpupair.decide.picture.node_picture import NodePicture, node_picture
from gpupair.decide.judge.decisions import Decider
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES, SHARED_RESOURCE_NAMES
from gpupair.decide.pod.nic_ask import DEFAULT_LEVEL, DEFAULT_RDMA_RESOURCES
from gpupair.extender.evaluation import Evaluator
from gpupair.extender.every_pod import EVERY_POD_VERB
from gpupair.extender.filter import filter_nodes
from gpupair.extender.cache.defrag_holds import DefragHolds
from gpupair.extender.cache.node_leases import Heartbeats
from gpupair.extender.http_server import HttpServer, Request, Response
from gpupair.extender.metrics import ExtenderMetrics
from gpupair.extender.cache.node_cache import NodeCache
from gpupair.extender.cache.wiring import wire_caches, wire_usage
from gpupair.decide.picture.node_entries import ReportDecoder
from gpupair.extender.cache.pod_request_cache import PodRequests
from gpupair.extender.cache.pod_watch import PodWatch
from gpupair.extender.preempt import Preempter, unchanged
from gpupair.extender.prioritize import NO_OPINION, BestFit, Score
from gpupair.extender.protocol import (
    ExtenderArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    PrioritizeError,
    ProtocolError,
    filter_result_json,
    parse_args,
    parse_binding,
    parse_preemption,
)
from gpupair.decide.judge.reservations import DEFAULT_TTL, Reservations
from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.pod_request import PodRequestError
from gpupair.kubeclient import kube

log = logging.getLogger("gpupair.extender")

MAX_CLAIMS_READ = 4  # claims one request reads ahead of the claim watch, at most
# How long filter waits for the pod watch to read the pod it is asked about. Behind by more than
# this, the watch is broken rather than slow: decide on what it has read, and say so.
POD_WATCH_WAIT = 2.0

JSON = "application/json"
VERBS = ("filter", "prioritize", "bind", "preempt")  # POST /VERB, as the scheduler config names them
DEFAULT_MAX_BODY = 256 * 1024 * 1024  # Nodes mode sends whole Node objects: 5,000 nodes is tens of MiB
BOUND = ExtenderBindingResult().model_dump_json().encode()  # bind's answer for every pod bound


@dataclass
class Extender:
    """Everything the extender holds, wired together."""

    evaluator: Evaluator
    score: Score  # prioritize's, chosen once here: BestFit or LeastFragmentation (--score)
    picture: NodePicture
    reservations: Reservations
    requests: PodRequests
    binder: Binder
    metrics: ExtenderMetrics
    resource: str
    node_cache: NodeCache | None = None
    pod_watch: PodWatch | None = None
    heartbeats: Heartbeats | None = None
    dra: DraFeed | None = None  # what the DRA source of the picture is fed from the API; None: no driver
    defrag_holds: DefragHolds | None = None  # fed by the plans ConfigMap's list+watch; None: not read
    settled: bool = True  # main: False until the first lists are frozen for the collector (extender/main.py)
    pod_watch_wait: float = POD_WATCH_WAIT

    def ready(self) -> bool:
        """Serving before both lists are in could promise a pair twice: the node cache holds the
        ledgers, the pod watch the pods bound but not yet listed there. Before the Leases are
        listed, nodes whose reporters write annotations only on change would look stale. The defrag
        plans are no condition: a missing permission to read them must not stop scheduling."""
        nodes = self.node_cache is None or self.node_cache.ready
        leases = self.heartbeats is None or self.heartbeats.listed
        sources = self.picture.listed  # a DRA driver's slices and claims: a DRA node's truth
        pods = self.pod_watch is None or self.pod_watch.listed
        return nodes and leases and sources and pods and self.settled


def assemble(
    *,
    decider: Decider,
    resource: str,
    api: k8s.ApiClient | None,
    stale_after: float | None,
    node_cache: bool = True,
    reservation_ttl: float = DEFAULT_TTL,
    annotate_plan: bool = False,
    default_intent: Intent = Intent.REQUIRED,
    api_timeout: float = 5.0,
    clock: Callable[[], float] = time.time,
    reservation_timer: Callable[[], float] = time.monotonic,
    metrics: ExtenderMetrics | None = None,
    heartbeats: bool = False,
    dra_driver: str = "",
    gpu_device_classes: frozenset[str] = GPU_DEVICE_CLASSES,
    rdma_resources: tuple[str, ...] = DEFAULT_RDMA_RESOURCES,
    nic_level: str = DEFAULT_LEVEL,
    dra_nic_drivers: frozenset[str] = frozenset(),
    pod_watch_wait: float = POD_WATCH_WAIT,
    fragmentation: bool = False,
    shared_resources: tuple[str, ...] = SHARED_RESOURCE_NAMES,
    defrag_plans: bool = False,
) -> Extender:
    """``heartbeats``: take freshness from the reporters' node Leases too (fed by a list+watch
    the caller runs on ``Extender.heartbeats``). ``dra_driver``: judge the nodes whose GPUs this
    DRA driver publishes from their ResourceSlices and claims (fed by list+watches the caller
    runs on ``Extender.dra.slices`` and ``.claims``); ``gpu_device_classes``: the DeviceClasses
    whose devices are GPUs, to count what a claim pod asks. ``rdma_resources``: requesting one asks
    for GPUs near a NIC, at ``nic_level`` unless the pod says (gpupair/decide/pod/nic_ask.py). ``dra_nic_drivers``:
    RDMA DRA drivers whose devices are the NICs, where no reporter publishes them.
    ``pod_watch_wait``: how long filter waits for the pod watch to read the pod it is asked about.
    ``fragmentation``: prioritize with the fragmentation score (extender/fragmentation_score.py),
    fed by the node cache and the pod watch; ``shared_resources``: the extended resources of GPU
    shares, whose pods count in its workload. ``defrag_plans``: hold the devices defrag plans free
    for their pods (fed by a list+watch the caller runs on ``Extender.defrag_holds``; needs ``api``)."""
    metrics = metrics or ExtenderMetrics()
    reservations = Reservations(ttl=reservation_ttl, timer=reservation_timer, on_outcome=metrics.reservation_ended)
    beats = Heartbeats() if heartbeats else None
    if beats is not None:
        metrics.watch_heartbeats(lambda: len(beats))
    picture, dra = node_picture(ReportDecoder(stale_after), clock, dra_driver=dra_driver, gpu_classes=gpu_device_classes,
                                nic_drivers=dra_nic_drivers, alive=beats.get if beats is not None else _no_lease)
    unallocatable = None
    if api is not None and dra is not None:
        from gpupair.extender.unallocatable import UnallocatableClaims

        unallocatable = UnallocatableClaims(api, picture.why_unallocatable, api_timeout)
    # Who tells whom is read in extender/cache/wiring.py, not here.
    caches = wire_caches(decider, picture, reservations, resource, clock, node_cache=node_cache, heartbeats=beats,
                         pod_watch=api is not None, unallocatable=unallocatable, defrag_plans=defrag_plans)
    if caches.nodes is not None:
        metrics.watch_node_cache(caches.nodes.items, clock, picture.alive)
    metrics.watch_reservations(lambda: len(reservations))
    evaluator = Evaluator(decider, reservations, picture, caches.nodes, caches.tables, clock,
                          default_intent=default_intent, rdma_resources=rdma_resources, nic_level=nic_level,
                          defrag=caches.defrag)
    score: Score = BestFit(evaluator)
    if fragmentation:
        from gpupair.extender.fragmentation_score import LeastFragmentation  # numpy, only for this score

        usage, rows = wire_usage(caches, picture, claims=dra is not None, shared_resources=shared_resources,
                                 resource=resource)
        score = LeastFragmentation(evaluator, usage, rows)
    binder = Binder(api, evaluator, reservations, caches.requests, annotate_plan=annotate_plan, timeout=api_timeout)
    return Extender(evaluator, score, picture, reservations, caches.requests, binder, metrics, resource, caches.nodes,
                    caches.pods, beats, dra, defrag_holds=caches.defrag, pod_watch_wait=pod_watch_wait)


def _no_lease(name: str) -> float | None:
    return None


def build_app(extender: Extender, *, max_body: int = DEFAULT_MAX_BODY) -> HttpServer:
    """The verbs and the probes. No access log below debug: kube-scheduler calls three verbs
    per pod, and the request metrics count them."""
    handlers = _Handlers(extender)
    routes = {("POST", f"/{verb}"): getattr(handlers, verb) for verb in VERBS}
    routes[("POST", f"/{EVERY_POD_VERB}")] = handlers.prioritize_every_pod
    routes[("GET", "/healthz")] = handlers.healthz
    routes[("GET", "/readyz")] = handlers.readyz
    routes[("GET", "/metrics")] = handlers.metrics
    return HttpServer(routes, max_body)


def _json(payload: str | bytes, status: int = 200) -> Response:
    return Response(status, payload.encode() if isinstance(payload, str) else payload, JSON)


class _Handlers:
    def __init__(self, extender: Extender):
        self.x = extender
        self.m = extender.metrics
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._last_ask: tuple[tuple[str, str] | None, tuple[int, Intent]] = (None, (0, Intent.REQUIRED))

    def _metric(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: prometheus_client's own lookup takes a
        lock and validates the labels, a few microseconds for each of the five per request."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _body(self, request: Request) -> bytes:
        if request.too_large:
            raise ProtocolError(f"body too large: {request.too_large}")
        return request.body

    async def healthz(self, _: Request) -> Response:
        return Response(200, b"ok", "text/plain")

    async def readyz(self, _: Request) -> Response:
        if self.x.ready():
            return Response(200, b"ok", "text/plain")
        return Response(503, b"not ready", "text/plain")

    async def metrics(self, _: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(200, generate_latest(self.m.registry), CONTENT_TYPE_LATEST)

    async def _args(self, body: bytes) -> tuple[ExtenderArgs, int, Intent]:
        args = parse_args(body)
        return (args, *await self._asked(args.Pod))

    async def _asked(self, pod: Any) -> tuple[int, Intent]:
        """``_ask``, after reading from the API each claim of the pod the claim watch has not
        delivered yet: kube-scheduler schedules a claim pod as soon as its own informer has the
        claim the resourceclaim controller just made, and the extender's watch may be behind."""
        for _ in range(MAX_CLAIMS_READ):
            try:
                return self._ask(pod)
            except ClaimNotSeen as exc:
                await self._read_claim(exc)
        try:
            return self._ask(pod)
        except ClaimNotSeen as exc:
            raise ProtocolError(f"Pod: {exc}") from None

    async def _read_claim(self, missing: ClaimNotSeen) -> None:
        """Put the claim into the node picture, or raise ProtocolError saying why not."""
        api = self.x.binder.api
        if api is None:
            raise ProtocolError(f"Pod: {missing}") from None
        try:
            response = await asyncio.wait_for(k8s.ResourceV1Api(api).read_namespaced_resource_claim(
                missing.name, missing.namespace, _preload_content=False), self.x.binder.timeout)
            data = await response.read()
        except Exception as exc:  # noqa: BLE001 - the verb's error answer says why
            raise ProtocolError(f"Pod: {missing}, and reading it failed: {kube.describe_error(exc)}") from None
        if response.status != 200:
            raise ProtocolError(f"Pod: {missing}; the API server answered HTTP {response.status} for it")
        try:
            self.x.picture.learn_claim(orjson.loads(data))
        except ValueError as exc:
            raise ProtocolError(f"Pod: {missing}, and the API server's answer was not JSON: {exc}") from None
        log.info("claim read ahead of the claim watch", extra={"claim": f"{missing.namespace}/{missing.name}"})

    def _ask(self, pod: Any) -> tuple[int, Intent]:
        """The GPUs a request's pod asks for and its placement intent, remembered for bind;
        ClaimNotSeen for a claim the claim watch has not delivered. Read once per pod version:
        prioritize follows filter with the same pod."""
        key = self.x.evaluator.pod_key(pod)
        if key is not None and self._last_ask[0] == key:
            return self._last_ask[1]
        try:
            gpus = self.x.requests.of(pod)
        except ClaimNotSeen:
            raise
        except PodRequestError as exc:
            raise ProtocolError(f"Pod: {exc}") from None
        intent = self.x.evaluator.intent_of(pod)
        self.x.requests.remember(pod, gpus, intent)
        if key is not None:
            self._last_ask = (key, (gpus, intent))
        return gpus, intent

    def _no_error_field(self, verb: str, exc: ProtocolError, started: float) -> Response:
        """A bad body for a verb whose answer has no error field: 400 with ``{"Error": ...}``."""
        log.warning(f"bad {verb} request", extra={"error": str(exc)})
        self._done(verb, "bad_request", started)
        return _json(PrioritizeError(Error=str(exc)).model_dump_json(), 400)

    def _done(self, verb: str, outcome: str, started: float, cpu_started: float | None = None) -> None:
        self._metric(self.m.requests, verb, outcome).inc()
        self._metric(self.m.latency, verb).observe(time.perf_counter() - started)
        if cpu_started is not None:
            self._metric(self.m.answer_cpu, verb).observe(time.thread_time() - cpu_started)

    async def _caught_up(self, pod: Any) -> None:
        """Wait until the pod watch has read ``pod`` as kube-scheduler saw it, so that every pod
        created or bound before it (a pod pinned by spec.nodeName just before a burst) holds its
        GPUs here too (gpupair/kubeclient/watch_progress.py)."""
        watch = self.x.pod_watch
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if watch is None or not isinstance(meta, dict):
            return
        version = meta.get("resourceVersion")
        if not watch.progress.behind(version):
            return
        if await watch.progress.reached(version, self.x.pod_watch_wait):
            self._metric(self.m.pod_watch_waits, "caught_up").inc()
            return
        self._metric(self.m.pod_watch_waits, "timed_out").inc()
        log.warning("the pod watch is behind the pod being scheduled; deciding on what it has read", extra={
            "pod": _pod_name(pod), "pod_version": version, "watch_version": watch.progress.revision,
            "waited_s": self.x.pod_watch_wait})

    async def filter(self, request: Request) -> Response:
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            args, gpus, intent = await self._args(self._body(request))
            if gpus > 0:
                await self._caught_up(args.Pod)
            answer = filter_nodes(self.x.evaluator, args, gpus, intent)
        except ProtocolError as exc:
            log.warning("bad filter request", extra={"error": str(exc)})
            self._done("filter", "bad_request", started)
            return _json(ExtenderFilterResult(Error=str(exc)).model_dump_json(), 400)
        except Exception as exc:  # noqa: BLE001 - the scheduler must get the protocol's answer
            log.exception("filter failed")
            self._done("filter", "error", started)
            return _json(ExtenderFilterResult(Error=f"gpupair extender internal error: {exc!r}").model_dump_json())
        for outcome, count in (("pass", answer.passed), ("fail", answer.failed), ("unresolvable", answer.unresolvable)):
            if count:  # each inc takes the counter's lock: none for nothing
                self._metric(self.m.decisions, "filter", outcome).inc(count)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("filter", extra={"pod": _pod_name(args.Pod), "gpus": gpus, "intent": intent.value,
                                       "passed": answer.passed, "failed": answer.failed,
                                       "unresolvable": answer.unresolvable})
        response = _json(filter_result_json(answer.result))
        self._done("filter", "ok", started, cpu_started)
        return response

    async def prioritize(self, request: Request) -> Response:
        return await self._prioritize("prioritize", request)

    async def prioritize_every_pod(self, request: Request) -> Response:
        """The every-pod entry's prioritize (extender/every_pod.py): prioritize's answer, counted
        under its own verb."""
        return await self._prioritize(EVERY_POD_VERB, request)

    async def _prioritize(self, verb: str, request: Request) -> Response:
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            args, gpus, intent = await self._args(self._body(request))
            body = self.x.score.answer(args, gpus, intent)
        except ProtocolError as exc:
            return self._no_error_field(verb, exc, started)
        except Exception:  # noqa: BLE001
            log.exception(f"{verb} failed")
            self._done(verb, "error", started)
            return _json(NO_OPINION)
        self._metric(self.m.decisions, verb, "scored").inc(len(args.node_names()))
        response = _json(body)
        self._done(verb, "ok", started, cpu_started)
        return response

    async def preempt(self, request: Request) -> Response:
        started = time.perf_counter()
        args: ExtenderPreemptionArgs | None = None
        try:
            args = parse_preemption(self._body(request))
            gpus, intent = await self._asked(args.Pod)
            answer = Preempter(self.x.evaluator, self.x.reservations).answer(args, gpus, intent)
        except ProtocolError as exc:
            return self._no_error_field("preempt", exc, started)
        except Exception:  # noqa: BLE001
            log.exception("preempt failed")
            self._done("preempt", "error", started)
            return _json(unchanged(args).model_dump_json() if args is not None else "{}")
        for verdict in answer.verdicts:
            self._metric(self.m.decisions, "preempt", verdict.outcome).inc()
        self._done("preempt", "ok", started)
        return _json(answer.result.model_dump_json())

    async def bind(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            args = parse_binding(self._body(request))
        except ProtocolError as exc:
            log.warning("bad bind request", extra={"error": str(exc)})
            self._done("bind", "bad_request", started)
            return _json(ExtenderBindingResult(Error=str(exc)).model_dump_json(), 400)
        try:
            outcome = await self.x.binder.bind(args)
        except Exception as exc:  # noqa: BLE001
            log.exception("bind failed")
            self._done("bind", "error", started)
            return _json(ExtenderBindingResult(Error=f"gpupair extender internal error: {exc!r}").model_dump_json())
        self._metric(self.m.decisions, "bind", outcome.outcome).inc()
        self._done("bind", "ok", started)
        return _json(BOUND if not outcome.error else ExtenderBindingResult(Error=outcome.error).model_dump_json())


def _pod_name(pod: Any) -> str:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return ""
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
