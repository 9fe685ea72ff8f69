"""Throw-away TLS certificates for servers the tests start, made with the openssl command."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.servers import LOOPBACK


def make_certificates(directory: Path, common_name: str) -> None:
    """In ``directory``: ``ca.pem``, a CA of its own, and ``server.pem`` / ``server.key``,
    a certificate it signed for 127.0.0.1."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    # The extensions strict verification asks for (Python 3.13's default contexts set
    # VERIFY_X509_STRICT): a CA that says it signs certificates, a server certificate
    # naming the key that signed it and what it is for.
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=toolbus test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    openssl(
        "req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={common_name}"
    )
    (directory / "san.ext").write_text(
        f"subjectAltName=IP:{LOOPBACK}\n"
        "authorityKeyIdentifier=keyid\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "1",
            "-extfile", "san.ext")  # fmt: skip
