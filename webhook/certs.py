"""`gpupair certs`: the webhook's serving certificate without cert-manager.

Makes a private CA and a serving certificate for the webhook Service, stores both in a
``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``, ``ca.crt``) and writes the CA into the
``caBundle`` of every webhook in the MutatingWebhookConfiguration. Idempotent: a Secret that is
valid for the Service's names and does not expire within ``--renew-within-days`` is kept, and
only the caBundle is brought in line with it.

A rotation writes the caBundle first, trusting the old and the new CA, and the Secret after, so
the apiserver never sees a certificate it does not trust while kubelet swaps the files. The
certificate math (``make_ca``, ``make_serving_cert``, ``check_secret``) is pure; the API calls
are in ``ensure``.

The Secret is owned (``ownerReferences``) by the MutatingWebhookConfiguration whose caBundle
trusts it, so removing gpupair (``helm uninstall``, ``kubectl delete -k``) lets the garbage
collector remove the Secret too; a Secret written before it had an owner is adopted on the next run.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import logging
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpupair.command.flags import Range, UsageError, add_kube_flags
from gpupair.command.service import add_common_flags, add_flag

log = logging.getLogger("gpupair.certs")

SECRET_TYPE = "kubernetes.io/tls"
CLOCK_SKEW = dt.timedelta(minutes=5)  # not-before is backdated so skewed clocks accept it
MAX_ATTEMPTS = 5  # optimistic-concurrency retries (409 Conflict / AlreadyExists)
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpupair-certs"}


class CertsError(RuntimeError):
    """A condition `gpupair certs` cannot fix by itself (reported, exit status 1)."""


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a client may use for an in-cluster Service; the apiserver uses
    ``<service>.<namespace>.svc`` for a webhook's clientConfig.service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.timezone.utc)


def make_ca(common_name: str, days: int, now: dt.datetime | None = None) -> KeyPair:
    """A self-signed CA that may sign end-entity certificates only (path length 0)."""
    if days < 1:
        raise ValueError("days must be at least 1")
    now = _now(now)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def make_serving_cert(ca: KeyPair, dns_names: list[str], days: int,
                      now: dt.datetime | None = None) -> KeyPair:
    """A TLS server certificate for ``dns_names`` (all as SANs; clients ignore the CN), signed by
    ``ca``, valid for ``days`` but never past the CA."""
    if not dns_names:
        raise ValueError("a serving certificate needs at least one DNS name")
    if days < 1:
        raise ValueError("days must be at least 1")
    now = _now(now)
    not_after = min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def secret_data(ca: KeyPair, serving: KeyPair) -> dict[str, str]:
    """The Secret's ``data`` (base64 values, as the API carries them)."""
    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return {"tls.crt": b64(serving.cert_pem), "tls.key": b64(serving.key_pem), "ca.crt": b64(ca.cert_pem)}


def _decode(data: dict[str, str] | None, key: str) -> bytes:
    value = (data or {}).get(key)
    if not value:
        raise ValueError(f"no {key}")
    return base64.b64decode(value, validate=True)


def check_secret(data: dict[str, str] | None, secret_type: str | None, dns_names: list[str],
                 renew_within: dt.timedelta, now: dt.datetime | None = None) -> str | None:
    """Why the Secret must be re-issued, or None when it can be kept."""
    now = _now(now)
    if secret_type != SECRET_TYPE:
        return f"type is {secret_type!r}, not {SECRET_TYPE}"
    try:
        cert = x509.load_pem_x509_certificate(_decode(data, "tls.crt"))
        ca = x509.load_pem_x509_certificate(_decode(data, "ca.crt"))
        key = serialization.load_pem_private_key(_decode(data, "tls.key"), password=None)
    except ValueError as exc:
        return f"unreadable: {exc}"
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) \
            != cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo):
        return "tls.key does not belong to tls.crt"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        return f"tls.crt is not signed by ca.crt ({type(exc).__name__})"
    try:
        sans = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                   .get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        sans = set()
    missing = [n for n in dns_names if n not in sans]
    if missing:
        return f"tls.crt does not name {', '.join(missing)}"
    for label, c in (("tls.crt", cert), ("ca.crt", ca)):
        if c.not_valid_before_utc > now:
            return f"{label} is not valid before {c.not_valid_before_utc.isoformat()}"
        if c.not_valid_after_utc - renew_within <= now:
            return f"{label} expires {c.not_valid_after_utc.isoformat()} (renewing {renew_within.days} days ahead)"
    return None


def still_valid_ca_pem(data: dict[str, str] | None, now: dt.datetime | None = None) -> bytes | None:
    """The old Secret's CA, if it can still vouch for the certificate being replaced: kept in the
    caBundle next to the new CA during a rotation."""
    try:
        ca_pem = _decode(data, "ca.crt")
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError:
        return None
    return ca_pem if ca.not_valid_after_utc > _now(now) else None


# --------------------------------------------------------------------------- API


async def _read_secret(core, namespace: str, name: str):
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        return await core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def _read_config(admission, config_name: str):
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        config = await admission.read_mutating_webhook_configuration(config_name)
    except ApiException as exc:
        if exc.status == 404:
            raise CertsError(f"MutatingWebhookConfiguration {config_name} not found; apply the "
                             "gpupair manifests first (the Job retries)") from None
        raise
    if not config.webhooks:
        raise CertsError(f"MutatingWebhookConfiguration {config_name} has no webhooks")
    return config


def owner_reference(config) -> dict[str, str]:
    """The Secret's owner: the webhook configuration, cluster-scoped, which a namespaced object
    may name. No blockOwnerDeletion: that needs delete rights on the owner, which the Job has not."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "name": config.metadata.name, "uid": config.metadata.uid}


def _with_owner(existing: list | None, owner: dict[str, str]) -> list[dict]:
    """``existing`` owner references (the client's models or dicts) with ``owner`` in place of any
    earlier reference to a configuration of its name (a re-created one has a new uid)."""
    refs = [r if isinstance(r, dict) else {"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid}
            for r in existing or []]
    kept = [r for r in refs if (r.get("kind"), r.get("name")) != (owner["kind"], owner["name"])]
    return [*kept, owner]


async def _patch_ca_bundle(admission, config, bundle_b64: str) -> bool:
    """Set caBundle on every webhook of the configuration; False when all already had it."""
    webhooks = config.webhooks
    if all(w.client_config.ca_bundle == bundle_b64 for w in webhooks):
        return False
    # Strategic merge: webhooks merge by name, so only caBundle changes and a concurrent edit of
    # another field (or the order) is left alone.
    body = {"webhooks": [{"name": w.name, "clientConfig": {"caBundle": bundle_b64}} for w in webhooks]}
    await admission.patch_mutating_webhook_configuration(
        config.metadata.name, body, _content_type="application/strategic-merge-patch+json")
    return True


@dataclass(frozen=True)
class CertOutcome:
    issued: bool  # a new CA and certificate were written
    reason: str  # why they were (or "kept")
    bundle_patched: bool


async def ensure(api, *, namespace: str, service: str, secret: str, webhook_config: str,
                 days: int, renew_within: dt.timedelta, now: dt.datetime | None = None) -> CertOutcome:
    """Make the Secret and the caBundle right; see the module docstring."""
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio.client.exceptions import ApiException

    core = k8s.CoreV1Api(api)
    admission = k8s.AdmissionregistrationV1Api(api)
    names = service_dns_names(service, namespace)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        existing = await _read_secret(core, namespace, secret)
        if existing is not None and existing.type != SECRET_TYPE:
            # A Secret's type is immutable, and deleting someone's Secret is not ours to do.
            raise CertsError(f"secret {namespace}/{secret} has type {existing.type!r}; delete it so a "
                             f"{SECRET_TYPE} secret can be created in its place")
        data = existing.data if existing is not None else None
        reason = ("missing" if existing is None
                  else check_secret(data, existing.type, names, renew_within, now))
        config = await _read_config(admission, webhook_config)
        owner = owner_reference(config)
        if reason is None:
            patched = await _patch_ca_bundle(admission, config, data["ca.crt"])
            refs = existing.metadata.owner_references or []
            if not any(r.uid == owner["uid"] for r in refs):
                existing.metadata.owner_references = _with_owner(refs, owner)
                try:  # adopt: update keeps every other field, resourceVersion guards a concurrent writer
                    await core.replace_namespaced_secret(secret, namespace, existing)
                except ApiException as exc:
                    if exc.status == 409 and attempt < MAX_ATTEMPTS:
                        continue
                    raise
                log.info("certificate adopted by its webhook configuration",
                         extra={"secret": f"{namespace}/{secret}", "owner_uid": owner["uid"]})
            log.info("certificate kept", extra={"secret": f"{namespace}/{secret}", "ca_bundle_patched": patched})
            return CertOutcome(False, "kept", patched)

        # One clock reading for both: read twice across a second's edge, the certificate's end
        # (never past the CA's, whose end is stored to the second) came out a second short.
        issued_at = _now(now)
        ca = make_ca(f"gpupair-webhook-ca ({namespace}/{service})", days, issued_at)
        serving = make_serving_cert(ca, names, days, issued_at)
        new_data = secret_data(ca, serving)
        old_ca = still_valid_ca_pem(data, now) if existing is not None else None
        bundle = ca.cert_pem + (old_ca if old_ca and old_ca != ca.cert_pem else b"")
        patched = await _patch_ca_bundle(admission, config, base64.b64encode(bundle).decode())
        body = {
            "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": secret, "namespace": namespace, "labels": dict(MANAGED_BY),
                         "ownerReferences": _with_owner(
                             existing.metadata.owner_references if existing is not None else None, owner)},
            "data": new_data,
        }
        try:
            if existing is None:
                await core.create_namespaced_secret(namespace, body)
            else:
                # resourceVersion: fail with 409 rather than overwrite a concurrent writer.
                body["metadata"]["resourceVersion"] = existing.metadata.resource_version
                body["metadata"]["labels"] = {**(existing.metadata.labels or {}), **MANAGED_BY}
                await core.replace_namespaced_secret(secret, namespace, body)
        except ApiException as exc:
            if exc.status == 409 and attempt < MAX_ATTEMPTS:
                log.info("secret changed concurrently; starting over", extra={"attempt": attempt})
                continue
            raise
        log.info("certificate issued", extra={"secret": f"{namespace}/{secret}", "reason": reason,
                                              "not_after": serving.cert.not_valid_after_utc.isoformat()})
        return CertOutcome(True, reason, patched)
    raise CertsError(f"secret {namespace}/{secret} kept changing; gave up after {MAX_ATTEMPTS} attempts")


# --------------------------------------------------------------------------- command


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--namespace", "gpupair-system", "namespace of the webhook Service and Secret")
    add_flag(parser, "--service", "gpupair-webhook", "the webhook Service (its DNS names go in the certificate)")
    add_flag(parser, "--secret", "gpupair-webhook-tls", "kubernetes.io/tls Secret to create or keep")
    add_flag(parser, "--webhook-config", "gpupair-webhook",
             "MutatingWebhookConfiguration whose webhooks get the CA as caBundle")
    add_flag(parser, "--days", 365, "validity of a new CA and certificate, in days", bounds=Range(1, 36500))
    add_flag(parser, "--renew-within-days", 30, "re-issue a certificate that expires within this many days", bounds=Range(0, 36500))
    add_kube_flags(parser)
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from gpupair.command.service import setup_logging

    setup_logging(args.log_level)
    if args.renew_within_days >= args.days:
        raise UsageError("--renew-within-days: must be less than --days")
    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    from kubernetes_asyncio.client.exceptions import ApiException

    from gpupair.kubeclient.kube import api_client

    async with await api_client(args.kubeconfig or None, args.context or None) as api:
        try:
            await ensure(api, namespace=args.namespace, service=args.service, secret=args.secret,
                         webhook_config=args.webhook_config, days=args.days,
                         renew_within=dt.timedelta(days=args.renew_within_days))
        except CertsError as exc:
            log.error(str(exc))
            return 1
        except ApiException as exc:
            log.error("Kubernetes API error", extra={"status": exc.status, "reason": exc.reason,
                                                     "body": (exc.body or "")[:500]})
            return 1
    return 0
