"""What the webhook injects: the verifier as a native sidecar, and its audience-bound token.

Pure data builders. The container is shaped to pass the ``restricted`` Pod Security Standard on
its own (non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp),
so injecting it never makes a compliant pod non-compliant; it also has a read-only root
filesystem and small requests and limits, because it runs beside every multi-GPU pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupair.kubewire import defaults

CONTAINER_NAME = defaults.VERIFIER_CONTAINER
TOKEN_VOLUME = "gpupair-token"
TOKEN_DIR = "/var/run/secrets/gpupair.io/serviceaccount"
TOKEN_FILE = "token"
TOKEN_PATH = f"{TOKEN_DIR}/{TOKEN_FILE}"
# The kubelet refreshes a projected token at 80% of its life; 600 s is the API's minimum.
TOKEN_EXPIRATION_SECONDS = 600
NONROOT_UID = 65532  # the distroless "nonroot" user; any non-zero id passes the standard

# Measured: the idle sidecar holds about 21 MiB RSS (tests/reporter/test_verification.py checks < 30 MiB).
REQUESTS = {"cpu": "10m", "memory": "16Mi"}
LIMITS = {"cpu": "100m", "memory": "48Mi"}

# Downward API: who and where the pod is. HOST_IP is how the sidecar finds its node's reporter.
DOWNWARD_ENV = (
    ("POD_NAME", "metadata.name"),
    ("POD_NAMESPACE", "metadata.namespace"),
    ("POD_UID", "metadata.uid"),
    ("NODE_NAME", "spec.nodeName"),
    ("HOST_IP", "status.hostIP"),
)


@dataclass(frozen=True)
class SidecarOptions:
    image: str
    reporter_port: int = defaults.REPORTER_PORT
    # The webhook's --token-audience: the token is minted for it and the verifier is told it,
    # so it must equal the reporter's --token-audience (both default to the same constant).
    token_audience: str = defaults.TOKEN_AUDIENCE
    image_pull_policy: str = "IfNotPresent"
    # Pull secrets the pod must name for the sidecar's image (a private registry): added to the
    # pod's spec.imagePullSecrets where it lacks them. Secrets live in the pod's namespace; the
    # kubelet pulls with those that exist there and records a warning for the others.
    image_pull_secrets: tuple[str, ...] = ()


def security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": NONROOT_UID,
        "runAsGroup": NONROOT_UID,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container(options: SidecarOptions) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}
        for name, path in DOWNWARD_ENV
    ]
    env += [
        {"name": "GPUPAIR_REPORTER_PORT", "value": str(options.reporter_port)},
        {"name": "GPUPAIR_TOKEN_AUDIENCE", "value": options.token_audience},
        {"name": "GPUPAIR_VERIFY_TOKEN_PATH", "value": TOKEN_PATH},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},  # the root filesystem is read-only
    ]
    return {
        "name": CONTAINER_NAME,
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "args": ["verify"],
        # A native sidecar: started before the app containers, stopped after them, so a Job
        # still completes when its main container exits.
        "restartPolicy": "Always",
        "env": env,
        "resources": {"requests": dict(REQUESTS), "limits": dict(LIMITS)},
        "securityContext": security_context(),
        "volumeMounts": [{"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def token_volume(options: SidecarOptions) -> dict[str, Any]:
    """A projected token only the reporter accepts: it proves which pod is calling, nothing more."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": options.token_audience,
                        "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                        "path": TOKEN_FILE,
                    }
                }
            ]
        },
    }
