"""A throwaway certificate authority and serving certificate for `kubus sim --authz rbac`.

client-go (and so kubectl) sends credentials only over TLS: against an `http://` server it drops the
bearer token from the kubeconfig without a word (kubernetes/kubectl#744). A sim that authenticates must
therefore serve HTTPS, with a CA its kubeconfig carries as `certificate-authority-data`. The keys are
made with the `openssl` command (present wherever kubectl is used; the sim has no crypto library) in a
private temporary directory and live only in the sim's memory once loaded.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import ssl
import subprocess
import tempfile
from dataclasses import dataclass


class TlsUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class ServingCerts:
    context: ssl.SSLContext
    ca_pem: bytes


def _san(hosts: list[str]) -> str:
    entries: list[str] = []
    for host in dict.fromkeys(["127.0.0.1", "localhost", *hosts]):
        if not host or host in ("0.0.0.0", "::"):
            continue
        try:
            ipaddress.ip_address(host)
            entries.append(f"IP:{host}")
        except ValueError:
            entries.append(f"DNS:{host}")
    return ",".join(entries)


def serving_certs(hosts: list[str]) -> ServingCerts:
    """A fresh CA, and a server certificate it signs for ``hosts`` (and 127.0.0.1, localhost)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsUnavailable("--authz needs the `openssl` command to make the sim's serving certificate "
                             "(kubectl sends credentials only over TLS); install openssl")
    with tempfile.TemporaryDirectory(prefix="kubus-sim-tls-") as tmp:
        def path(name: str) -> str:
            return os.path.join(tmp, name)

        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        with open(path("ext"), "w") as handle:
            handle.write(f"subjectAltName={_san(hosts)}\nextendedKeyUsage=serverAuth\n"
                         "keyUsage=critical,digitalSignature,keyEncipherment\n")
        steps = [
            [openssl, "req", "-x509", *ec, "-keyout", path("ca.key"), "-out", path("ca.crt"), "-days", "3650",
             "-subj", "/CN=kubus-sim-ca"],
            [openssl, "req", *ec, "-keyout", path("server.key"), "-out", path("server.csr"),
             "-subj", "/CN=kube-apiserver"],
            [openssl, "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.crt"), "-CAkey", path("ca.key"),
             "-CAcreateserial", "-out", path("server.crt"), "-days", "3650", "-extfile", path("ext")],
        ]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise TlsUnavailable(f"openssl {cmd[1]} failed making the sim's certificates: "
                                     f"{done.stderr.strip()[-400:]}")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(path("server.crt"), path("server.key"))
        with open(path("ca.crt"), "rb") as pem:
            ca_pem = pem.read()
    return ServingCerts(context, ca_pem)
