"""The one way gpupair serves TLS (the webhook, the extender): minimum TLS 1.2, and a
certificate that follows the files on disk, without a restart.

cert-manager and Secret volumes replace the certificate and key files in place (the kubelet
swaps a symlink). At the start of every handshake the server looks at the files' identity
(inode, size, modification time); when it changed, a fresh SSLContext is loaded and handed to
that connection and every later one. Connections already open keep the certificate they began
with. A pair that does not load (a half-written rotation, a key that does not match) is
reported once and the previous certificate stays in use until the files are good again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

from gpupair.command.flags import Failure, InputError

log = logging.getLogger("gpupair.tls")
MAX_PEM_BYTES = 1024 * 1024  # a chain is kilobytes; a larger file is not one


class KeyNeedsPassphrase(ValueError):
    """OpenSSL asked for a passphrase; a service has no one to ask (it would block on a prompt)."""


def _no_passphrase() -> bytes:
    raise KeyNeedsPassphrase("the private key is encrypted; a service cannot ask for its passphrase: "
                             "give it an unencrypted key (openssl pkey -in KEY -out KEY.plain)")

FileStamp = tuple[tuple[int, int, int, int], ...]


def _stamp(*paths: str) -> FileStamp:
    stamps = []
    for path in paths:
        st = os.stat(path)  # follows symlinks, so a swapped ..data link counts as a change
        stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


def _server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # the apiserver speaks 1.2 and 1.3
    for path in (cert_file, key_file):
        if os.stat(path).st_size > MAX_PEM_BYTES:
            raise ValueError(f"{path} is larger than {MAX_PEM_BYTES // 1024} KiB; not a PEM certificate or key")
    context.load_cert_chain(cert_file, key_file, password=_no_passphrase)  # never a terminal prompt
    return context


class ReloadingTLS:
    """Owns the listening context; ``context`` goes to the server, reloads happen by themselves."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp = _stamp(cert_file, key_file)
        self._current = _server_context(cert_file, key_file)  # fail at start on a bad pair
        self._failed_stamp: FileStamp | None = None
        self.reloads = 0
        # The listening context serves the first certificate and picks the current one for each
        # new connection. OpenSSL calls the servername hook on every ClientHello, with or
        # without SNI (the apiserver sends none when the webhook URL names an IP).
        self.context = _server_context(cert_file, key_file)
        self.context.sni_callback = self._on_hello

    def current(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first if the files changed."""
        try:
            stamp = _stamp(self.cert_file, self.key_file)
        except OSError as exc:  # mid-rotation the files can be briefly absent
            log.warning("cannot stat TLS files; keeping the loaded certificate", extra={"error": str(exc)})
            return self._current
        with self._lock:
            if stamp == self._stamp or stamp == self._failed_stamp:
                return self._current
            try:
                fresh = _server_context(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError, ValueError) as exc:
                self._failed_stamp = stamp
                log.error(
                    "new TLS certificate does not load; keeping the previous one",
                    extra={"cert": self.cert_file, "key": self.key_file, "error": str(exc)},
                )
                return self._current
            self._current, self._stamp, self._failed_stamp = fresh, stamp, None
            self.reloads += 1
            log.info("TLS certificate reloaded", extra={"cert": self.cert_file, "reloads": self.reloads})
            return fresh

    def _on_hello(self, connection, server_name, context) -> None:
        connection.context = self.current()
        return None


def serving_tls(cert_file: str, key_file: str) -> ReloadingTLS | None:
    """The TLS of a command's --tls-cert-file / --tls-private-key-file; None (plain HTTP) when
    both are empty. A pair that does not load is a usage error naming both files."""
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        raise InputError("--tls-cert-file and --tls-private-key-file go together")
    try:
        return ReloadingTLS(cert_file, key_file)
    except KeyNeedsPassphrase as exc:  # a runtime failure: the files are there and are what they say
        raise Failure(f"TLS key {key_file}: {exc}") from None
    except (OSError, ssl.SSLError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(f"cannot load TLS certificate {cert_file} / key {key_file}: {why}") from None
