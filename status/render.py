"""The status view as text: one line per GPU node, then the cluster summary. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpupair.status.view import NodeStatus, StatusView

GLYPHS = {"free": "□", "shared": "◧", "taken": "■", "reserved": "◩", "unhealthy": "✕"}
LEGEND = "legend: □ free  ◧ shared, shares left  ■ taken  ◩ reserved (bound, not yet in the report)  ✕ unhealthy"


def age(seconds: float | None) -> str:
    """kubectl-like: 42s, 7m, 5h, 3d; a negative age (a clock ahead of ours) keeps its sign."""
    if seconds is None:
        return "-"
    sign, value = ("-", -seconds) if seconds < 0 else ("", seconds)
    if value < 120:
        return f"{sign}{value:.0f}s"
    if value < 2 * 3600:
        return f"{sign}{value // 60:.0f}m"
    if value < 2 * 86400:
        return f"{sign}{value // 3600:.0f}h"
    return f"{sign}{value // 86400:.0f}d"


def free_map(node: NodeStatus) -> str:
    if not node.numa:
        return "-"
    return "  ".join(f"{n.numa} {''.join(GLYPHS[d.state] for d in n.devices)}" for n in node.numa)


def nic_map(node: NodeStatus) -> str:
    """``NUMA0 mlx5_0,mlx5_1  NUMA1 -``; ``-`` where the node's reporter publishes no NICs."""
    if not node.numa or all(n.nics is None for n in node.numa):
        return "-"
    return "  ".join(f"{n.numa} {','.join(n.nics) or '-'}" for n in node.numa)


def _free(node: NodeStatus) -> str:
    if not node.numa:
        return "-"
    free = sum(d.state == "free" for n in node.numa for d in n.devices)
    return f"{free}/{node.gpus}"


def _largest(node: NodeStatus) -> str:
    if node.largestFree is None:
        return "-"
    return f"{node.largestFree.gpus} {node.largestFree.numa}" if node.largestFree.numa else "0"


def _note(node: NodeStatus, wide: bool) -> str:
    parts = ["DRA"] if node.heartbeatSource == "dra" else []  # its GPUs are a DRA driver's devices
    parts += [node.reason] if node.reason else []
    if node.reserved.unplaced:
        parts.append(f"+{node.reserved.unplaced} reserved on devices not yet known")
    if node.ledgerProblem:
        parts.append(f"ledger not used: {node.ledgerProblem}")
    if wide and node.reserved.pods:
        parts.append("reserved by " + ", ".join(node.reserved.pods))
    return "; ".join(parts)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = []
    for row in (header, *rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths)] + [str(row[-1])]
        lines.append("  ".join(cells).rstrip())
    return lines


def render_text(view: StatusView, wide: bool = False) -> str:
    now = view.generatedAt
    header = ["NODE", "STATE", "AGE", "FREE", "MAP", "LARGEST"]
    if wide:
        header += ["GEN", "SOURCE", "RESERVED FROM", "NICS"]
    header.append("NOTE")
    rows = []
    for node in view.nodes:
        row = [node.name, node.state, age(node.ageSeconds), _free(node), free_map(node), _largest(node)]
        if wide:
            row += ["-" if node.generation is None else str(node.generation), node.heartbeatSource or "-",
                    node.reserved.basis or "-", nic_map(node)]
        row.append(_note(node, wide))
        rows.append(row)
    lines = table(header, rows) if rows else ["no GPU nodes (none has nvidia.com/gpu allocatable or a gpupair report)"]
    lines.append(LEGEND)
    lines.append("")
    counts = view.summary.nodes
    lines.append(f"nodes: {counts.total} GPU nodes, {counts.fresh} fresh, {counts.stale} stale, "
                 f"{counts.missing} missing, {counts.invalid} invalid "
                 + (f"(stale after {view.staleAfterSeconds:.0f}s)" if view.staleAfterSeconds else "(never stale)"))
    lines.append("fit on one NUMA node now (fresh nodes): " + "  ".join(
        f"{row.gpus} GPU: {row.nodes}" for row in view.summary.fragmentation))
    lines.append("")
    lines += _pending(view, now)
    lines.append("")
    lines += _fails(view, now)
    lines += _not_verified(view)
    for unseen in view.unseen:
        lines.append(f"not visible: {unseen.resource}: {unseen.reason}")
    return "\n".join(lines) + "\n"


def _events_unseen(view: StatusView) -> bool:
    return any(u.resource == "events" for u in view.unseen)


def _pods_unseen(view: StatusView) -> bool:
    return any(u.resource == "pods" for u in view.unseen)


def _pending(view: StatusView, now: datetime) -> list[str]:
    if _pods_unseen(view):
        return ["pending GPU pods: unknown (pods not visible)"]
    pending = view.summary.pending
    if not pending:
        return ["pending GPU pods: none"]
    lines = [f"pending GPU pods: {len(pending)}"]
    rows = []
    for pod in pending:
        if pod.reason is None:
            reason = "(events not visible)" if _events_unseen(view) else "(no FailedScheduling event seen)"
        else:
            reason = " ".join(pod.reason.split())  # whole: the extender's part is often at the end
        when = age((now - pod.reasonAt).total_seconds()) if pod.reasonAt else "-"
        gpus = str(pod.gpus) if pod.shares is None else f"{pod.gpus}+{pod.shares}" if pod.gpus else pod.shares
        rows.append([f"{pod.namespace}/{pod.name}", gpus, pod.placement or "default", when, reason])
    return lines + table(["POD", "GPUS", "PLACEMENT", "LAST TRIED", "LAST REASON"], rows)


def _fails(view: StatusView, now: datetime) -> list[str]:
    fails = view.summary.failVerdicts
    if not fails:
        seen = "pods" if _events_unseen(view) else "pods and events"
        return [f"recent FAIL verdicts: none in the {seen} listed"]
    rows = []
    for fail in fails:
        when = age((now - fail.at).total_seconds()) if fail.at else "-"
        if fail.source == "pod":
            what = [fail.node or "-", fail.granted or "-", fail.numa or "-", fail.link or "-"]
        else:
            what = ["-", "-", "-", "(pod gone) " + fail.message]
        rows.append([f"{fail.namespace}/{fail.name}", when, *what])
    return [f"recent FAIL verdicts: {len(fails)}"] + table(["POD", "WHEN", "NODE", "GRANTED", "NUMA", "LINK"], rows)


def _not_verified(view: StatusView) -> list[str]:
    """Shown only when there are some: most clusters have none."""
    pods = view.summary.notVerified
    if not pods:
        return []
    rows = [[f"{pod.namespace}/{pod.name}", pod.node, str(pod.gpus)] for pod in pods]
    return (["", f"not verified: {len(pods)} multi-GPU pods have no verifier sidecar, so no verdict will come "
                 "(created while the webhook was down, or in a namespace not opted in)"]
            + table(["POD", "NODE", "GPUS"], rows))
