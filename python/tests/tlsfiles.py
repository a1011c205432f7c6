"""Throwaway certificate authorities and certificates for the TLS tests, made with the
``openssl`` command line (which Debian's ca-certificates, needed to fetch Go modules,
depends on). Python's standard library cannot make certificates, and the client must not
depend on anything outside it, not even for its tests' sake."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# A configuration of our own, so that the system's openssl.cnf adds nothing.
_REQ_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = {san}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("the TLS tests need the openssl command (apt-get install openssl)")
    subprocess.run([exe, *args], check=True, timeout=60, capture_output=True)


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(path))


@dataclass(frozen=True)
class Cert:
    cert: Path
    key: Path


class CA:
    """A certificate authority in dir: ``file`` is its certificate, ``issue`` signs a
    certificate for server and client use."""

    def __init__(self, dir: Path, name: str) -> None:
        self.dir = dir
        self.name = name
        dir.mkdir(parents=True, exist_ok=True)
        self.key = dir / f"{name}-ca.key"
        self.file = dir / f"{name}-ca.crt"
        cfg = self._config(f"{name} test CA", "IP:127.0.0.1")
        _key(self.key)
        _openssl("req", "-config", str(cfg), "-new", "-x509", "-key", str(self.key),
                 "-out", str(self.file), "-days", "2", "-extensions", "ca", "-sha256")

    def _config(self, cn: str, san: str) -> Path:
        cfg = self.dir / f"{cn.replace(' ', '-')}.cnf"
        cfg.write_text(_REQ_CONFIG.format(cn=cn, san=san))
        return cfg

    def issue(self, name: str, san: str = "IP:127.0.0.1") -> Cert:
        """A certificate naming san (by default 127.0.0.1), signed by this CA."""
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        crt = self.dir / f"{name}.crt"
        cfg = self._config(name, san)
        _key(key)
        _openssl("req", "-config", str(cfg), "-new", "-key", str(key), "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.file), "-CAkey",
                 str(self.key), "-CAcreateserial", "-out", str(crt), "-days", "2",
                 "-extfile", str(cfg), "-extensions", "leaf", "-sha256")
        return Cert(crt, key)
