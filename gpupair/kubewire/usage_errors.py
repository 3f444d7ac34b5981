"""The two errors a command reports as the user's to fix, exit 2 with one line
(gpupair.command.flags states the whole contract; gpupair.command.cli prints them).

They live here, at the bottom of the core, because they are raised below the command line: the
Kubernetes client refuses a kubeconfig (gpupair.kubeclient.kube) and the parts refuse their input
files, and a lower layer never imports gpupair.command."""

from __future__ import annotations


class UsageError(ValueError):
    """A flag value or combination the command cannot work with: exit 2, ``gpupair CMD: error: ...``."""


class InputError(UsageError):
    """An input file (kubeconfig, topology, state, TLS) that is missing, too large or not what it
    should be: the same one line (naming the file and what is wrong) and exit 2."""
