"""Kubernetes wire formats gpupair reads and writes: the kube-scheduler extender and
AdmissionReview bodies, DRA's ResourceSlice and ResourceClaim shapes, Leases, the JSON body
reader and the defaults they share. Pure: it imports the standard library, pydantic and orjson,
and nothing of gpupair outside this package."""
