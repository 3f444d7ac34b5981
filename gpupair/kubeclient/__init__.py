"""Clients that talk to the Kubernetes API: the kubernetes-asyncio wrapper (`kube`), the lean
Binding client the extender binds through, and the list+watch loop every service's watches run
(`list_watch`, with `watch_progress`: how far one has read). The I/O side: it may import the
pure packages; they never import it, and it never imports gpupair.command, which stands on it."""
