"""Clients that talk to the Kubernetes API: the kubernetes-asyncio wrapper (`kube`) and the lean
Binding client the extender binds through. The I/O side: it may import the pure packages and
gpupair.command's flags; the pure packages never import it."""
