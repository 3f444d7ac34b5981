"""Clients that talk to the Kubernetes API: the kubernetes-asyncio wrapper (`kube`), the lean
Binding client the extender binds through, and the list+watch loop every service's watches run
(`list_watch`, with `watch_progress`: how far one has read). The I/O side: it may import the
pure packages and gpupair.command's flags; the pure packages never import it."""
