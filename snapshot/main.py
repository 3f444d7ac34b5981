"""`gpupair snapshot`: a live cluster's nodes and pods written as the openb pair that `gpupair
simulate --scenario trace` replays, so that "what would gpupair do on my fleet" is two commands
(docs/simulate.md). What is written and why: snapshot/convert.py.

Every node or pod that cannot be written as it is gets one log line (stderr) and a count in the
summary (stdout); nothing on the cluster stops the command. Exit status: 0 written; 1 nodes or
pods could not be listed, or the files not written; 2 bad flags or kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import sys
from pathlib import Path

from gpupair.command.flags import (
    DURATION, Failure, UsageError, add_dra_driver, add_gpu_device_classes, add_kube_flags, add_log_level, add_resource_name,
    add_shared_resources,
)
from gpupair.command.service import add_flag

NODE_FILE = "openb_node_list_gpu_node.csv"
POD_FILE = "openb_pod_list_snapshot.csv"

log = logging.getLogger("gpupair.snapshot")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--output-dir", ".", f"folder to write {NODE_FILE} and {POD_FILE} into (created if missing)")
    add_resource_name(parser)
    add_shared_resources(parser, "a pod asking one is written as a share of one GPU, 1000/R milli a share "
                                 "(R: the replicas a GPU has, GFD's nvidia.com/gpu.replicas)")
    add_dra_driver(parser, "its ResourceSlices give the GPUs and products of nodes without a report ('' to skip)")
    add_gpu_device_classes(parser, "what a pod's claims ask of them counts as its GPUs")
    add_flag(parser, "--request-timeout", 60.0, "seconds each list call may take", bounds=DURATION)
    add_kube_flags(parser)
    add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    from gpupair.simulator.trace.files import write_nodes, write_pods
    from gpupair.snapshot.convert import SnapshotOptions, convert, summary

    folder = Path(args.output_dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--output-dir {folder} is not a folder")
    cluster = asyncio.run(_list(args))
    unseen = [seen.reason for seen in cluster.unseen]  # slices or claims forbidden: the annotations alone
    for why in unseen:
        log.warning(why)
    snapshot = convert(cluster.nodes, cluster.pods, cluster.slices, cluster.claims,
                       SnapshotOptions(resource=args.resource_name, shared=tuple(sorted(args.shared_resources)),
                                       dra_driver=args.dra_driver, gpu_classes=args.gpu_device_classes))
    for finding in snapshot.findings:  # a CPU node is no problem, only worth its line
        log.log(logging.INFO if finding.kind == "node-no-gpus" else logging.WARNING, finding.line,
                extra={"finding": finding.kind})
    nodes_file, pods_file = folder / NODE_FILE, folder / POD_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_nodes(nodes_file, snapshot.nodes)
        write_pods(pods_file, snapshot.pods)
    except OSError as error:
        raise Failure(f"{error.filename or folder}: {error.strerror or error}") from None
    lines = [f"snapshot: {line}" for line in summary(snapshot)]
    lines += [f"snapshot: {why}" for why in unseen]
    lines.append(f"wrote {nodes_file} and {pods_file}")
    lines.append(f"replay: gpupair simulate --scenario trace --trace-nodes {shlex.quote(str(nodes_file))} "
                 f"--trace-pods {shlex.quote(str(pods_file))}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


async def _list(args: argparse.Namespace):
    """Nodes and live pods, and the DRA driver's slices and every claim where it has some, as
    `gpupair status` lists them (status/fetch.py); without nodes or pods there is nothing to write."""
    from gpupair.kubeclient.kube import api_client
    from gpupair.status.fetch import NodesNotVisible, list_cluster

    api = await api_client(args.kubeconfig or None, args.context or None)
    async with api:
        try:
            listing = await list_cluster(api, timeout=args.request_timeout, lease_namespace="",
                                         dra_driver=args.dra_driver, with_events=False)
        except NodesNotVisible as error:
            raise Failure(str(error)) from None
    if listing.pods is None:
        raise Failure(next(seen.reason for seen in listing.unseen if seen.resource == "pods"))
    return listing
