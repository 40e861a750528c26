"""A secured Kafka cluster for the tests, made of the session's Tansu broker and the standard
library: certificates made with ``openssl``, a TLS terminator in front of the broker, and a
tiny SASL responder that records what a client's login sends.

Tansu's build here speaks plaintext only. :class:`TlsTerminator` accepts TLS on a loopback
port and forwards the plaintext bytes; behind it, a Tansu proxy whose advertised address is
the terminator's port, so that the clients, told by metadata where the broker is, come back
through TLS for every connection (as to a real TLS listener)::

    client --TLS--> TlsTerminator :T --> TansuProxy :P (advertises :T) --> session broker

Tansu's memory storage holds no credentials, so a successful SASL login cannot be made here;
:class:`SaslResponder` answers ApiVersions and SaslHandshake as a broker does, records the
mechanism and the SaslAuthenticate bytes, and refuses the login.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from aiokafka.protocol.admin import ApiVersionResponse_v0, SaslAuthenticateResponse_v0, SaslHandShakeResponse_v1

from tests.kafka_broker import HOST, _TansuProcess, free_port

KEY_PASSPHRASE = "tls-key-passphrase-5ec2e7"  # client-encrypted.key's: the tests grep outputs for it


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _key_and_request(name: str, subject: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)  # fmt: skip


def _signed(name: str, ca: str, extensions: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(extensions + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=cwd)  # fmt: skip


@dataclass(frozen=True)
class Certificates:
    """PEM files in ``directory``: a CA, a server certificate for 127.0.0.1 and localhost, one
    for another host only, a client certificate (its key also encrypted with
    :data:`KEY_PASSPHRASE`), all signed by the CA; and another CA that signed none of them."""

    directory: Path

    @classmethod
    def make(cls, directory: Path) -> Certificates:
        directory.mkdir(parents=True, exist_ok=True)
        for ca in ("ca", "other-ca"):
            _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=headrace test {ca}", "-days", "2",
                     cwd=directory)  # fmt: skip
        for name, subject, extensions in (
            ("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            ("wrong-host", "/CN=broker.example", "subjectAltName=DNS:broker.example"),
            ("client", "/CN=headrace-client", "extendedKeyUsage=clientAuth"),
        ):
            _key_and_request(name, subject, directory)
            _signed(name, "ca", extensions, directory)
        _openssl("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSPHRASE}",
                 "-out", "client-encrypted.key", cwd=directory)  # fmt: skip
        return cls(directory)

    def __getitem__(self, name: str) -> str:
        """The path of ``name`` (``"ca.pem"``, ``"client.key"``, ...)."""
        return str(self.directory / name)

    def server_context(self, certificate: str = "server", client_ca: str | None = None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self[f"{certificate}.pem"], self[f"{certificate}.key"])
        if client_ca is not None:  # mutual TLS: a client certificate signed by client_ca, required
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self[f"{client_ca}.pem"])
        return context


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:  # ssl.SSLError included: either side went away
        pass
    finally:
        for side in (source, sink):
            try:
                side.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class TlsTerminator:
    """Accepts TLS (``context``) on a loopback port and forwards each connection's bytes,
    decrypted, to ``target`` (``host:port``), and the answers back: a thread a direction.
    Blocking sockets, so that a refused handshake sends its alert as a broker's would."""

    def __init__(self, target: str, context: ssl.SSLContext, port: int | None = None) -> None:
        self.target = target
        self.context = context
        self.port = port if port is not None else free_port()
        self._listener: socket.socket | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        host, port = self.target.rsplit(":", 1)
        try:
            client.settimeout(10)
            tls = self.context.wrap_socket(client, server_side=True)
            tls.settimeout(None)
            upstream = socket.create_connection((host, int(port)))
        except OSError:  # the handshake refused (its alert sent), or no upstream
            client.close()
            return
        with tls, upstream:
            back = threading.Thread(target=_pump, args=(upstream, tls), daemon=True)
            back.start()
            _pump(tls, upstream)
            back.join()

    def start(self) -> TlsTerminator:
        self._listener = socket.create_server((HOST, self.port))
        threading.Thread(target=self._serve, args=(self._listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()


class AdvertisingProxy(_TansuProcess):
    """Tansu's proxy on a plaintext loopback port in front of ``origin``, telling clients
    (in metadata) that the broker is at ``advertised`` (a TLS terminator's port)."""

    def __init__(self, origin: str, advertised: int) -> None:
        super().__init__()
        self.origin = origin
        self.advertised = advertised

    def _arguments(self) -> list[str]:
        return [
            "proxy",
            "--listener-url",
            self.url,
            "--advertised-listener-url",
            f"tcp://{HOST}:{self.advertised}",
            "--origin-url",
            f"tcp://{self.origin}",
        ]


class SecuredCluster:
    """The session broker behind TLS: ``bootstrap`` (server certificate only), ``mtls``
    (a client certificate required), ``wrong_host`` (a certificate naming another host)."""

    def __init__(self, broker: str, certificates: Certificates) -> None:
        self.certificates = certificates
        ports = free_port(), free_port()
        self.proxies = [AdvertisingProxy(broker, port) for port in ports]
        self.terminators = [
            TlsTerminator(self.proxies[0].bootstrap, certificates.server_context(), ports[0]),
            TlsTerminator(self.proxies[1].bootstrap, certificates.server_context(client_ca="ca"), ports[1]),
            TlsTerminator(self.proxies[0].bootstrap, certificates.server_context("wrong-host")),
        ]

    @property
    def bootstrap(self) -> str:
        return self.terminators[0].bootstrap

    @property
    def mtls(self) -> str:
        return self.terminators[1].bootstrap

    @property
    def wrong_host(self) -> str:
        return self.terminators[2].bootstrap

    def start(self) -> SecuredCluster:
        for terminator in self.terminators:
            terminator.start()
        for proxy in self.proxies:
            proxy.start()
        return self

    def stop(self) -> None:
        for proxy in self.proxies:
            proxy.stop()
        for terminator in self.terminators:
            terminator.stop()


# -- SASL ---------------------------------------------------------------------------------

_API_VERSIONS, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 17, 36
_SASL_AUTHENTICATION_FAILED = 58


@dataclass
class Login:
    """What one client's login sent: the mechanism it asked for, its SaslAuthenticate bytes."""

    mechanism: str
    auth_bytes: bytes


class SaslResponder:
    """A Kafka-protocol listener that takes a client as far as its first SaslAuthenticate,
    records it (:attr:`logins`), and refuses it with ``refusal`` (Kafka's error 58)."""

    def __init__(
        self, mechanisms: tuple[str, ...], refusal: str = "Authentication failed: Invalid username or password"
    ) -> None:
        self.mechanisms = mechanisms
        self.refusal = refusal
        self.logins: list[Login] = []
        self._listener = socket.create_server((HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        mechanism = ""
        with connection:
            while request := _read_frame(connection):
                api_key, _version, correlation = struct.unpack(">hhi", request[:8])
                (client_id_length,) = struct.unpack(">h", request[8:10])
                body = request[10 + max(client_id_length, 0) :]
                if api_key == _API_VERSIONS:
                    versions = [(_API_VERSIONS, 0, 0), (_SASL_HANDSHAKE, 1, 1), (_SASL_AUTHENTICATE, 0, 0), (3, 0, 1)]
                    answer = ApiVersionResponse_v0(0, versions).encode()
                elif api_key == _SASL_HANDSHAKE:
                    (length,) = struct.unpack(">h", body[:2])
                    mechanism = body[2 : 2 + length].decode()
                    answer = SaslHandShakeResponse_v1(0, list(self.mechanisms)).encode()
                elif api_key == _SASL_AUTHENTICATE:
                    (length,) = struct.unpack(">i", body[:4])
                    self.logins.append(Login(mechanism, body[4 : 4 + length]))
                    answer = SaslAuthenticateResponse_v0(_SASL_AUTHENTICATION_FAILED, self.refusal, b"").encode()
                else:
                    return  # no request past a refused login
                connection.sendall(struct.pack(">ii", 4 + len(answer), correlation) + answer)

    def close(self) -> None:
        self._listener.close()


def _read_frame(connection: socket.socket) -> bytes:
    header = _read_exactly(connection, 4)
    if not header:
        return b""
    (size,) = struct.unpack(">i", header)
    return _read_exactly(connection, size)


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        try:
            chunk = connection.recv(size - len(data))
        except OSError:
            return b""
        if not chunk:
            return b""
        data += chunk
    return data
