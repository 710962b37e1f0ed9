"""The control plane's certificate authority, serving and client certificates, and ServiceAccount key pair.

Made with the `openssl` command (as `kubus sim --authz rbac` makes its own: sim/tls.py), under the data
directory's ``pki/``, private keys readable by their owner only. One CA signs everything: kube-apiserver's
serving certificate (for 127.0.0.1, localhost and the `kubernetes` Service's names and address), and a client
certificate for each user of the API: the admin (group system:masters), kube-controller-manager and
kube-scheduler (the users the default RBAC policy binds: system:kube-controller-manager,
system:kube-scheduler), and kwok (group system:masters: it acts as every node's kubelet).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class CertificateError(RuntimeError):
    """A certificate cannot be made: the message says which and why (never a key's content)."""


@dataclass(frozen=True)
class Identity:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Identity
    apiserver: Identity
    admin: Identity
    controller_manager: Identity
    scheduler: Identity
    kwok: Identity
    service_account_key: Path  # the private key kube-apiserver signs tokens with (and the controller-manager)
    service_account_pub: Path  # the public key it verifies them with


# the client identities: file stem -> subject (O is the group, CN the user name)
CLIENTS = {"admin": "/O=system:masters/CN=kubus-admin",
           "kube-controller-manager": "/CN=system:kube-controller-manager",
           "kube-scheduler": "/CN=system:kube-scheduler",
           "kwok": "/O=system:masters/CN=kwok"}

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl() -> str:
    found = shutil.which("openssl")
    if found is None:
        raise CertificateError("the control plane needs the `openssl` command to make its certificates; "
                               "install openssl")
    return found


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CertificateError(f"openssl failed making {what}: {done.stderr.strip()[-400:]}")


def make(directory: Path, service_ip: str) -> Pki:
    """A fresh CA and every certificate the control plane needs, in ``directory`` (created)."""
    openssl = _openssl()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)

    def path(name: str) -> str:
        return str(directory / name)

    _run([openssl, "req", "-x509", *EC, "-keyout", path("ca.key"), "-out", path("ca.crt"), "-days", "3650",
          "-subj", "/CN=kubus-controlplane-ca",
          "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
         "the certificate authority")

    def signed(stem: str, subject: str, extensions: str, what: str) -> Identity:
        (directory / f"{stem}.ext").write_text(extensions)
        _run([openssl, "req", *EC, "-keyout", path(f"{stem}.key"), "-out", path(f"{stem}.csr"), "-subj", subject],
             what)
        _run([openssl, "x509", "-req", "-in", path(f"{stem}.csr"), "-CA", path("ca.crt"), "-CAkey", path("ca.key"),
              "-CAcreateserial", "-out", path(f"{stem}.crt"), "-days", "3650", "-extfile", path(f"{stem}.ext")],
             what)
        return Identity(directory / f"{stem}.crt", directory / f"{stem}.key")

    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    san = ",".join([f"IP:127.0.0.1,IP:{service_ip}", *(f"DNS:{name}" for name in names)])
    apiserver = signed("apiserver", "/CN=kube-apiserver",
                       f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\n", "kube-apiserver's serving certificate")
    clients = {stem: signed(stem, subject, "extendedKeyUsage=clientAuth\n"
                            "keyUsage=critical,digitalSignature,keyEncipherment\n", f"the {stem} client certificate")
               for stem, subject in CLIENTS.items()}
    _run([openssl, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", path("sa.key")],
         "the ServiceAccount signing key")
    _run([openssl, "pkey", "-in", path("sa.key"), "-pubout", "-out", path("sa.pub")], "the ServiceAccount public key")
    for key in directory.glob("*.key"):
        key.chmod(0o600)
    return Pki(directory, Identity(directory / "ca.crt", directory / "ca.key"), apiserver, clients["admin"],
               clients["kube-controller-manager"], clients["kube-scheduler"], clients["kwok"],
               directory / "sa.key", directory / "sa.pub")
