"""Why a Kafka cluster refuses this client, in one line that names the setting to change: a
certificate it does not trust, a host name the certificate does not carry, a client
certificate it requires, a failed login, a mechanism it does not offer.

aiokafka reports each of these as a cluster it could not bootstrap from, which reads like
an outage and is retried as one. :func:`diagnose` opens one connection to a bootstrap
server the way every client does and names what went wrong; a client that fails to start
asks it (:func:`streams.backends.kafka.clients.start_client`), so these refusals end the
command, or fail the queue in ``headrace status``, in seconds rather than being retried for
ever. No message shows a secret.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterator

import anyio
import anyio.to_thread
from aiokafka.conn import collect_hosts, create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from streams.backends.kafka.connection import KafkaConnection
from streams.core.errors import ConfigurationError

# OpenSSL's verify codes for a certificate that does not name the host (X509_V_ERR_HOSTNAME_MISMATCH,
# X509_V_ERR_IP_ADDRESS_MISMATCH) and one past its dates (X509_V_ERR_CERT_HAS_EXPIRED).
_HOST_MISMATCH = (62, 64)
_EXPIRED = 10


class KafkaRefusedError(ConfigurationError):
    """The cluster refused this client for a reason its settings can mend: the message names
    the cause and the setting. Not retried: retrying cannot change it."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        yield found
        found = found.__cause__ or found.__context__


def refusal(exc: BaseException, connection: KafkaConnection, host: str = "") -> KafkaRefusedError | None:
    """The one-line error for ``exc`` (or what caused it) if it is a refusal of this
    client's TLS or SASL settings; ``None`` if it is not (an outage, say).

    >>> from aiokafka.errors import SaslAuthenticationFailed
    >>> connection = KafkaConnection("k:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
    ...                              sasl_plain_username="app", sasl_plain_password="123456")
    >>> print(refusal(SaslAuthenticationFailed("invalid credentials"), connection))
    Kafka at k:9093 refused the login of user 'app' (SCRAM-SHA-256: invalid credentials): check sasl_plain_username and sasl_plain_password (from the value given), and sasl_mechanism
    """
    at = f"{connection.server} ({host})" if host else connection.server
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return _untrusted_certificate(cause, connection, at)
        if isinstance(cause, ssl.SSLError):
            return _tls_refusal(cause, connection, at)
        if isinstance(cause, (SaslAuthenticationFailed, AuthenticationFailedError, IllegalSaslStateError)):
            return _login_refusal(cause, connection, at)
        if isinstance(cause, UnsupportedSaslMechanismError):
            return KafkaRefusedError(f"{at}: {cause}: set sasl_mechanism to one the broker offers")
    return None


def _untrusted_certificate(
    cause: ssl.SSLCertVerificationError, connection: KafkaConnection, at: str
) -> KafkaRefusedError:
    """The broker's certificate names another host, has expired, or is signed by a CA not trusted."""
    detail = cause.verify_message or cause.reason or str(cause)
    if cause.verify_code in _HOST_MISMATCH:
        return KafkaRefusedError(
            f"{at}: the broker's certificate does not name the host connected to ({detail}): "
            "connect by a name the certificate carries (bootstrap_servers), or set ssl_check_hostname = false"
        )
    if cause.verify_code == _EXPIRED:
        return KafkaRefusedError(f"{at}: the broker's certificate has expired ({detail}): the broker needs a new one")
    trusted = f"ssl_cafile ({connection.ssl_cafile})" if connection.ssl_cafile else "the system's CAs (no ssl_cafile)"
    return KafkaRefusedError(
        f"{at}: the broker's certificate is not trusted ({detail}; trusting {trusted}): "
        "set ssl_cafile to the PEM file of the CA that signed the brokers' certificates"
    )


def _tls_refusal(cause: ssl.SSLError, connection: KafkaConnection, at: str) -> KafkaRefusedError | None:
    """The handshake failed: a client certificate wanted, no TLS on the port, or else; None
    when the broker hung up (its alert, if it sent one, says why: :func:`diagnose` reads it)."""
    reason = (cause.reason or str(cause)).upper()
    if "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason or "UNKNOWN_CA" in reason:
        given = "none given" if connection.ssl_certfile is None else f"{connection.ssl_certfile} was refused"
        return KafkaRefusedError(
            f"{at}: the broker requires a client certificate it trusts ({given}; "
            f"{cause.reason or cause}): set ssl_certfile and ssl_keyfile to one signed by the CA the broker trusts"
        )
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER_FAILURE" in reason:
        return KafkaRefusedError(
            f"{at}: the broker does not speak TLS on this port ({cause.reason}): use its TLS "
            "listener's port, or security_protocol PLAINTEXT / SASL_PLAINTEXT"
        )
    if isinstance(cause, ssl.SSLEOFError):
        return None
    return KafkaRefusedError(
        f"{at}: TLS failed ({cause.reason or cause}): check security_protocol and the ssl_* settings"
    )


def _login_refusal(cause: KafkaError, connection: KafkaConnection, at: str) -> KafkaRefusedError:
    """The broker refused the SASL login: the user's (or the OAUTHBEARER token's)."""
    said = " ".join(map(str, cause.args)).strip() or getattr(cause, "description", type(cause).__name__)
    if connection.sasl_mechanism == "OAUTHBEARER":
        who, fix = "the OAUTHBEARER token", "check the token provider (sasl_oauth_token_provider) and its credentials"
    else:
        source = connection.sasl_plain_password.source if connection.sasl_plain_password is not None else ""
        who = f"user {connection.sasl_plain_username!r}"
        fix = f"check sasl_plain_username and sasl_plain_password (from {source}), and sasl_mechanism"
    return KafkaRefusedError(f"{at} refused the login of {who} ({connection.sasl_mechanism}: {said}): {fix}")


async def diagnose(connection: KafkaConnection, within: float | None = None) -> KafkaRefusedError | None:
    """Connect to each bootstrap server once, as every client does (TLS, then SASL), and
    return the refusal that stopped the first to refuse; ``None`` when one accepts, or none
    answers at all (an outage, or a wrong address: not a refusal).

    Some refusals close the connection without aiokafka saying why: a broker that wants a
    client certificate says so in a TLS alert after the handshake (TLS 1.3), and a TLS
    listener given plaintext just hangs up. A plain TLS handshake and one request, made
    with the standard library, read those; and a plaintext listener given TLS may wait for
    more bytes instead of answering, so a client of TLS first asks in plaintext."""
    kwargs = connection.client_kwargs()
    timeout = connection.request_timeout if within is None else within
    hosts = collect_hosts(connection.bootstrap_servers)
    for host, port, _family in hosts:
        where = f"{host}:{port}" if len(hosts) > 1 else ""
        if connection.tls and await anyio.to_thread.run_sync(_answers_plaintext, host, port, min(timeout, 2.0)):
            return KafkaRefusedError(
                f"{connection.server}{f' ({where})' if where else ''}: the broker does not speak TLS on this port "
                "(it answers plaintext): use its TLS listener's port, or security_protocol PLAINTEXT / SASL_PLAINTEXT"
            )
        try:
            with anyio.fail_after(timeout):
                conn = await create_conn(
                    host,
                    port,
                    request_timeout_ms=int(timeout * 1000),
                    **{k: v for k, v in kwargs.items() if k.startswith(("ssl_", "sasl_", "security_", "client_id"))},
                )
        except (OSError, KafkaError, TimeoutError) as exc:
            refused = refusal(exc, connection, where)
            if refused is None and not isinstance(exc, TimeoutError):
                refused = await anyio.to_thread.run_sync(_tls_probe, connection, host, port, where, timeout)
            if refused is not None:
                return refused
            continue
        conn.close()
        return None
    return None


# An ApiVersions request (v0, correlation id 1, client "headrace"): any broker answers it.
_API_VERSIONS = struct.pack(">ihhih", 18, 18, 0, 1, 8) + b"headrace"


def _answers_plaintext(host: str, port: int, timeout: float) -> bool:
    """Whether a Kafka request sent in plaintext gets an answer (a plaintext listener)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_API_VERSIONS)
            return len(sock.recv(8)) >= 4
    except OSError:
        return False


def _tls_probe(
    connection: KafkaConnection, host: str, port: int, where: str, timeout: float
) -> KafkaRefusedError | None:
    """With TLS: the handshake, one request and its answer, and the refusal a TLS alert on
    the way says. Without: whether a TLS handshake succeeds there (a TLS listener)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if connection.tls:
                context = connection.ssl_context or connection.new_ssl_context()
                with context.wrap_socket(sock, server_hostname=host) as tls:
                    tls.sendall(_API_VERSIONS)
                    tls.recv(4)
                return None
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            with context.wrap_socket(sock, server_hostname=host):
                pass
    except ssl.SSLEOFError:
        if not connection.tls:
            return None
        return KafkaRefusedError(
            f"{connection.server}{f' ({where})' if where else ''}: the broker closed the TLS connection without "
            "saying why: check security_protocol, and ssl_certfile and ssl_keyfile if it wants a client certificate"
        )
    except ssl.SSLError as exc:
        return refusal(exc, connection, where) if connection.tls else None
    except OSError:
        return None
    return KafkaRefusedError(
        f"{connection.server}{f' ({where})' if where else ''}: the broker speaks TLS on this port: "
        "set security_protocol = SSL (or SASL_SSL), and ssl_cafile to its CA"
    )
