"""The webhook's certificate expiry as a metric, read from the file at scrape time.

``gpupair_webhook_certificate_expiry_timestamp_seconds`` is the notAfter (Unix time) of the serving
certificate on disk: the one ReloadingTLS hands to new connections once it loads. Reading the file
on each scrape follows a rotation (a Secret update, cert-manager, the gpupair-certs CronJob) with
no bookkeeping; a file that cannot be read or parsed gives no sample, and the log of the TLS reload
says why.
"""

from __future__ import annotations

from collections.abc import Iterator

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAME = "gpupair_webhook_certificate_expiry_timestamp_seconds"
HELP = "Unix time at which the webhook's serving certificate (the file on disk) expires"


class CertificateExpiry(Collector):
    def __init__(self, cert_file: str) -> None:
        self.cert_file = cert_file

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(NAME, HELP)  # no file read when registered

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(NAME, HELP)
        expiry = self.expiry()
        if expiry is not None:
            family.add_metric([], expiry)
        yield family

    def expiry(self) -> float | None:
        try:
            with open(self.cert_file, "rb") as pem:
                certificate = x509.load_pem_x509_certificate(pem.read())
        except (OSError, ValueError):
            return None
        return certificate.not_valid_after_utc.timestamp()
