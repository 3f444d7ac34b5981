"""Kubernetes wire formats more than one part reads, and what the layers above share: DRA's
ResourceSlice and ResourceClaim shapes (`dra`), the reporter's Lease (`leases`), UserInfo and one
way to say why a body does not fit (`wire`), the JSON body reader every endpoint uses
(`json_body`), the defaults commands and manifests agree on (`defaults`) and the two errors a
command reports as the user's (`usage_errors`). The kube-scheduler extender's and
AdmissionReview's bodies are their parts' own (extender.protocol, webhook.admission). Pure: it
imports the standard library, pydantic and orjson, and nothing of gpupair outside this package."""
