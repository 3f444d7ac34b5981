"""A check of a pod against the `restricted` Pod Security Standard, written from its definition.

Covers every control of the Baseline and Restricted levels that reads a pod (kubernetes.io
"Pod Security Standards", as enforced by pod-security-admission at the latest version):

Baseline: HostProcess, host namespaces, privileged, capabilities (baseline add list), hostPath
volumes, host ports, host probes/lifecycle hooks, AppArmor, SELinux, /proc mount type, seccomp
(no Unconfined), sysctls (safe set).
Restricted: volume types, privilege escalation, running as non-root, non-root user, seccomp
(RuntimeDefault or Localhost required), capabilities (drop ALL, add only NET_BIND_SERVICE).

Pods with ``spec.hostUsers: false`` get the user-namespace relaxation of runAsNonRoot/runAsUser,
and Windows pods are exempt from the Linux-only restricted controls, as in the admission plugin.
Returns human-readable violations; an empty list means the pod is admitted at `restricted`.
"""

from __future__ import annotations

from typing import Any

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUME_KINDS = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}
APPARMOR_TYPES = {None, "RuntimeDefault", "Localhost"}


def _containers(spec: dict) -> list[tuple[str, dict]]:
    found = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            found.append((f"{field}[{container.get('name')}]", container))
    return found


def _sc(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def _baseline(pod: dict, out: list[str]) -> None:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    pod_sc = _sc(spec)
    containers = _containers(spec)

    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("hostProcess: pod windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"host namespaces: spec.{field}")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            out.append(f"hostPath volumes: {volume.get('name')}")
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/"):
            if value != "runtime/default" and not value.startswith("localhost/"):
                out.append(f"appArmor: annotation {key}={value}")
    if (pod_sc.get("appArmorProfile") or {}).get("type") not in APPARMOR_TYPES:
        out.append("appArmor: pod appArmorProfile")
    _selinux("pod", pod_sc.get("seLinuxOptions"), out)
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("seccomp: pod seccompProfile Unconfined")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctls: {sysctl.get('name')}")

    for where, container in containers:
        sc = _sc(container)
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"hostProcess: {where}")
        if sc.get("privileged"):
            out.append(f"privileged: {where}")
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(f"capabilities (baseline): {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"host ports: {where} hostPort {port['hostPort']}")
        probes = [container.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        lifecycle = container.get("lifecycle") or {}
        probes += [lifecycle.get("postStart"), lifecycle.get("preStop")]
        for handler in filter(None, probes):
            for kind in ("httpGet", "tcpSocket"):
                if (handler.get(kind) or {}).get("host"):
                    out.append(f"host probes/lifecycle: {where} {kind}.host")
        if (sc.get("appArmorProfile") or {}).get("type") not in APPARMOR_TYPES:
            out.append(f"appArmor: {where}")
        _selinux(where, sc.get("seLinuxOptions"), out)
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"procMount: {where} {sc.get('procMount')}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"seccomp: {where} Unconfined")


def _selinux(where: str, options: dict | None, out: list[str]) -> None:
    if not options:
        return
    if options.get("type", "") not in SELINUX_TYPES:
        out.append(f"seLinux: {where} type {options.get('type')}")
    if options.get("user") or options.get("role"):
        out.append(f"seLinux: {where} sets user/role")


def _restricted(pod: dict, out: list[str]) -> None:
    spec = pod.get("spec") or {}
    pod_sc = _sc(spec)
    containers = _containers(spec)
    windows = (spec.get("os") or {}).get("name") == "windows"
    user_namespaced = spec.get("hostUsers") is False

    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_KINDS:
            out.append(f"volume types: {volume.get('name')} is {sorted(kinds - RESTRICTED_VOLUME_KINDS)}")

    if not user_namespaced:
        pod_nonroot = pod_sc.get("runAsNonRoot")
        if pod_nonroot is False:
            out.append("runAsNonRoot: pod sets false")
        if pod_sc.get("runAsUser") == 0:
            out.append("runAsUser: pod runs as 0")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")

    for where, container in containers:
        sc = _sc(container)
        if not windows and sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"allowPrivilegeEscalation != false: {where}")
        if not user_namespaced:
            nonroot = sc.get("runAsNonRoot")
            if nonroot is False or (nonroot is None and pod_sc.get("runAsNonRoot") is not True):
                out.append(f"runAsNonRoot != true: {where}")
            if sc.get("runAsUser") == 0:
                out.append(f"runAsUser=0: {where}")
        if not windows:
            seccomp = (sc.get("seccompProfile") or {}).get("type")
            if seccomp is None and pod_seccomp not in ("RuntimeDefault", "Localhost"):
                out.append(f"seccompProfile not set: {where}")
            elif seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
                out.append(f"seccompProfile {seccomp}: {where}")
            caps = sc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                out.append(f"capabilities must drop ALL: {where}")
            added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
            if added:
                out.append(f"capabilities (restricted): {where} adds {sorted(added)}")


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    out: list[str] = []
    _baseline(pod, out)
    _restricted(pod, out)
    return out
