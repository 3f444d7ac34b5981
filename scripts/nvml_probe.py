#!/usr/bin/env python3
"""Run the reporter's real NVML discovery on a GPU machine and show what it found.

    .venv/bin/python scripts/nvml_probe.py [--allocated 0,4] [--topo-file topo.txt] [--out DIR]

Prints one JSON object with: the layout (devices, link matrix, P2P), every NVML call that
failed, the time discovery took, the annotations `gpupair reporter --once --dry-run` would
write, and, where `nvidia-smi topo -m` is available (or --topo-file is given), whether the
link classes and NUMA nodes NVML gave agree with it. With --out the same goes to
DIR/nvml_probe.json, and nvidia-smi's own outputs are saved beside it for the record.
With --record (and --out) the NVML answers are also saved in the replay format of
tests/nvml_fake.py, so a real node can become a test fixture (copy nvml-recording.json to
tests/fixtures/nvml/ and nvidia-smi-topo-m.txt to tests/fixtures/topo/, fix its "topo" key).
Exit status: 0 when discovery was complete and agrees with nvidia-smi, 1 otherwise, 2 when
NVML is not there at all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from gpupair.topology import report  # noqa: E402

from gpupair.topology import links
from gpupair.topology.smi_topo import TopoParseError, parse_topo_matrix  # noqa: E402
from gpupair.reporter.nvml_discovery import (  # noqa: E402
    NvmlUnavailable,
    discover,
    load_pynvml,
    read_sysfs_numa,
    read_sysfs_pcie_root,
)
from gpupair.reporter.scan import Allocations, compute, parse_id_list  # noqa: E402


def nvidia_smi(*args: str) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def compare(layout, topo_text: str) -> dict:
    try:
        smi = parse_topo_matrix(topo_text).to_layout()
    except (TopoParseError, ValueError) as error:
        return {"parsed": False, "error": str(error)}
    link_diffs = [
        {"pair": f"GPU{i}-GPU{j}", "nvml": layout.link(i, j), "nvidia_smi": smi.link(i, j)}
        for i in range(min(layout.size, smi.size))
        for j in range(i + 1, min(layout.size, smi.size))
        if layout.link(i, j) != smi.link(i, j)
    ]
    numa_diffs = [
        {"gpu": i, "nvml": layout.numa_of(i), "nvidia_smi": smi.numa_of(i)}
        for i in range(min(layout.size, smi.size))
        if layout.numa_of(i) != smi.numa_of(i)
    ]
    return {
        "parsed": True,
        "same_size": layout.size == smi.size,
        "link_differences": link_diffs,
        "numa_differences": numa_diffs,
        "agrees": layout.size == smi.size and not link_diffs and not numa_diffs,
    }


class RecordingNvml:
    """Passes every call through to the NVML bindings and keeps (call, args, value, error code)."""

    def __init__(self, nvml) -> None:
        self._nvml = nvml
        self.log: list[tuple[str, tuple, object, int | None]] = []

    def __getattr__(self, name: str):
        attribute = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(attribute):
            return attribute

        def call(*args):
            try:
                value = attribute(*args)
            except Exception as error:
                self.log.append((name, args, None, getattr(error, "value", None)))
                raise
            self.log.append((name, args, value, None))
            return value

        return call


def _handle_key(handle) -> object:
    try:
        import ctypes

        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


LEVEL_NAMES = {value: name for name, value in links.NVML_TOPOLOGY_NAMES.items()}
P2P_NAMES = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
             4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}  # nvmlGpuP2PStatus_t
REMOTE_NAMES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH", 0xFF: "UNKNOWN"}  # nvmlIntNvLinkDeviceType_t


# Discovery does not ask an NVSwitch link for its far end's bus id; the recording fills in one
# that matches no GPU, which replays the same way.
UNSEEN_BUS = "0000FFFF:FF:00.0"


def recording_from(recorder: RecordingNvml, sysfs: str, topo_name: str) -> dict:
    """The NVML answers seen, in the format tests/nvml_fake.py replays (tests/fixtures/nvml)."""
    nvml = recorder._nvml
    index_of: dict[object, int] = {}
    devices: dict[int, dict] = {}
    levels: dict[tuple[int, int], str] = {}
    p2p: dict[tuple[int, int], str] = {}
    # (device, link) -> [remote type, remote bus id], for links that are up
    nvlinks: dict[tuple[int, int], list[str]] = {}
    for name, args, value, error in recorder.log:
        if name == "nvmlDeviceGetHandleByIndex" and error is None:
            index_of[_handle_key(value)] = args[0]
            devices[args[0]] = {"uuid": "", "busId": "", "numaNodeId": None, "nvlinks": []}
            continue
        indices = [index_of.get(_handle_key(a)) for a in args if _handle_key(a) in index_of]
        if not indices:
            continue
        device = devices[indices[0]]
        if name == "nvmlDeviceGetUUID" and error is None:
            device["uuid"] = value if isinstance(value, str) else value.decode()
        elif name == "nvmlDeviceGetPciInfo" and error is None:
            bus = value.busId
            device["busId"] = bus if isinstance(bus, str) else bus.decode()
        elif name == "nvmlDeviceGetNumaNodeId" and error is None:
            device["numaNodeId"] = value
        elif name == "nvmlDeviceGetTopologyCommonAncestor" and error is None:
            levels[tuple(indices)] = LEVEL_NAMES.get(value, str(value))
        elif name == "nvmlDeviceGetP2PStatus" and error is None:
            p2p[tuple(indices)] = P2P_NAMES.get(value, "UNKNOWN")
        elif name == "nvmlDeviceGetNvLinkState" and error is None and value == 1:
            nvlinks[(indices[0], args[1])] = ["GPU", UNSEEN_BUS]
        elif name == "nvmlDeviceGetNvLinkRemoteDeviceType" and error is None:
            nvlinks[(indices[0], args[1])][0] = REMOTE_NAMES.get(value, "UNKNOWN")
        elif name == "nvmlDeviceGetNvLinkRemotePciInfo" and error is None:
            bus = value.busId
            nvlinks[(indices[0], args[1])][1] = bus if isinstance(bus, str) else bus.decode()
    for index, device in devices.items():
        if device["busId"]:
            device["sysfsNumaNode"] = read_sysfs_numa(device["busId"], sysfs)
            device["pcieRoot"] = read_sysfs_pcie_root(device["busId"], sysfs)
        for _, (remote_type, bus) in sorted((k, v) for k, v in nvlinks.items() if k[0] == index):
            runs = device["nvlinks"]
            if runs and runs[-1]["remoteType"] == remote_type and runs[-1]["remoteBusId"] == bus:
                runs[-1]["count"] += 1
            else:
                runs.append({"remoteType": remote_type, "remoteBusId": bus, "count": 1})
    count = len(devices)

    def rows(cells: dict[tuple[int, int], str]) -> list[str]:
        return [" ".join("X" if i == j else cells.get((i, j), cells.get((j, i), "UNKNOWN"))
                         for j in range(count)) for i in range(count)]

    return {
        "about": "Recorded by scripts/nvml_probe.py --record on a real GPU node.",
        "topo": topo_name,
        "driverVersion": next((v for n, _, v, e in recorder.log if n == "nvmlSystemGetDriverVersion" and e is None), ""),
        "maxLinks": int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)),
        "devices": [devices[i] for i in range(count)],
        "commonAncestor": rows(levels),
        "p2pRead": [" ".join("X" if i == j else p2p.get((i, j), "UNKNOWN") for j in range(count))
                    for i in range(count)],
    }


def probe(nvml, sysfs: str, allocated: tuple[str, ...], topo_text: str | None) -> dict:
    """Discovery through ``nvml`` (None: the real pynvml) and what the reporter would publish."""
    started = time.perf_counter()
    result = discover(nvml, sysfs_root=sysfs)
    seconds = time.perf_counter() - started
    layout = result.layout
    scan = compute(layout, Allocations(allocated=allocated), result.lost)
    now = datetime.now(timezone.utc)
    return {
        "driver_version": result.driver_version,
        "discovery_seconds": round(seconds, 4),
        "complete": result.complete,
        "errors": [vars(e) for e in result.errors],
        "lost": sorted(result.lost),
        "unknown_links": [f"GPU{i}-GPU{j}" for i, j in sorted(result.unknown_links)],
        "layout": json.loads(report.encode_topology(layout)),
        "free_by_numa": {str(k): list(v) for k, v in scan.free_by_numa().items()},
        "dry_run_annotations": scan.annotations(int(now.timestamp() * 1000), now),
        "nvidia_smi_topo": compare(layout, topo_text) if topo_text else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allocated", default="", help="device indices or UUIDs to count as allocated")
    parser.add_argument("--topo-file", default="", help="compare with this `nvidia-smi topo -m` output")
    parser.add_argument("--sysfs", default="/sys", help="sysfs root for the NUMA fallback")
    parser.add_argument("--out", default=os.environ.get("OUT", ""), help="also write results here")
    parser.add_argument("--record", action="store_true",
                        help="also write DIR/nvml-recording.json, replayable by tests/nvml_fake.py (needs --out)")
    args = parser.parse_args()

    topo_text = Path(args.topo_file).read_text() if args.topo_file else nvidia_smi("topo", "-m")
    try:
        recorder = RecordingNvml(load_pynvml())
        output = probe(recorder, args.sysfs, parse_id_list(args.allocated), topo_text)
    except (NvmlUnavailable, ImportError) as error:
        print(json.dumps({"nvml": "unavailable", "error": str(error)}, indent=2))
        return 2
    text = json.dumps(output, indent=2)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "nvml_probe.json").write_text(text + "\n")
        if args.record:
            recording = recording_from(recorder, args.sysfs, "nvidia-smi-topo-m.txt")
            (out / "nvml-recording.json").write_text(json.dumps(recording, indent=1) + "\n")
        if topo_text:
            (out / "nvidia-smi-topo-m.txt").write_text(topo_text)
        query = nvidia_smi("--query-gpu=index,uuid,pci.bus_id", "--format=csv")
        if query:
            (out / "nvidia-smi-query-gpu.csv").write_text(query)
    agrees = output["nvidia_smi_topo"] is None or output["nvidia_smi_topo"].get("agrees", False)
    return 0 if output["complete"] and agrees else 1


if __name__ == "__main__":
    sys.exit(main())
