"""runtime.bus.connect with each kind of NATS credential against a nats-server that requires it: a token, an
nkey, TLS with a private CA and a client certificate. The right credential connects; none, or a wrong one,
is a NatsAuthError of one line that names the refusal and never carries the secret."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import nkeys
import pytest

from runtime.bus import NatsAuth, NatsAuthError, close, connect
from runtime.natsserver import binary
from runtime.ports import free_port


@asynccontextmanager
async def server(tmp_path: Path, config: str) -> AsyncIterator[int]:
    """A nats-server with `config` on a free port, listening."""
    port = free_port()
    path = tmp_path / f"nats-{port}.conf"
    path.write_text(config)
    proc = subprocess.Popen([binary(), "-c", str(path), "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            assert proc.poll() is None, f"nats-server exited with {proc.returncode}"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                assert loop.time() < deadline, "nats-server did not listen"
                await asyncio.sleep(0.02)  # polling a port that is about to open
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def refused(url: str, auth: NatsAuth) -> str:
    with pytest.raises(NatsAuthError) as caught:
        nc = await connect(url, "kubus-test", reconnect=True, timeout=15, auth=auth)
        await close(nc)
    text = str(caught.value)
    assert "\n" not in text
    return text


async def test_token(tmp_path: Path) -> None:
    async with server(tmp_path, 'authorization { token: "s3cret-token-1" }\n') as port:
        url = f"nats://127.0.0.1:{port}"
        nc = await connect(url, "kubus-test", auth=NatsAuth(token="s3cret-token-1"))
        assert nc.is_connected
        await close(nc)
        for auth in (NatsAuth(), NatsAuth(token="wrong-token-2")):
            text = await refused(url, auth)
            assert f"NATS at {url} refused kubus-test: authorization violation" in text
            assert "KUBUS_NATS_TOKEN" in text and "wrong-token-2" not in text and "s3cret" not in text


async def test_nkey(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    async with server(tmp_path, f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n') as port:
        url = f"nats://127.0.0.1:{port}"
        nc = await connect(url, "kubus-test", auth=NatsAuth(nkey=str(seed_file)))
        assert nc.is_connected
        await close(nc)
        assert "authorization violation" in await refused(url, NatsAuth())
        with pytest.raises(NatsAuthError, match=r"--nats-nkey .*: no such file"):
            await connect(url, "kubus-test", auth=NatsAuth(nkey=str(tmp_path / "missing.nk")))


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed; and another CA."""
    d = tmp_path / "pki"
    d.mkdir()
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ca}",
                "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"))
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{who}.ext").write_text(ext + "\n")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", str(d / f"{who}.key"),
                "-out", str(d / f"{who}.csr"))
        openssl("x509", "-req", "-in", str(d / f"{who}.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
                "-CAcreateserial", "-days", "2", "-extfile", str(d / f"{who}.ext"), "-out", str(d / f"{who}.pem"))
    yield d


async def test_tls_with_a_private_ca_and_a_client_certificate(tmp_path: Path, pki: Path) -> None:
    config = (f'tls {{ cert_file: "{pki / "server.pem"}", key_file: "{pki / "server.key"}", '
              f'ca_file: "{pki / "ca.pem"}", verify: true }}\n')
    async with server(tmp_path, config) as port:
        url = f"tls://127.0.0.1:{port}"
        good = NatsAuth(tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "client.pem"), tls_key=str(pki / "client.key"))
        nc = await connect(url, "kubus-test", auth=good)
        assert nc.is_connected
        await close(nc)
        # the server's certificate is not of the CA we trust
        text = await refused(url, NatsAuth(tls_ca=str(pki / "other-ca.pem"), tls_cert=str(pki / "client.pem"),
                                           tls_key=str(pki / "client.key")))
        assert "TLS: CERTIFICATE_VERIFY_FAILED" in text, text
        with pytest.raises(NatsAuthError, match="--nats-tls-cert and --nats-tls-key go together"):
            await connect(url, "kubus-test",
                          auth=NatsAuth(tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "client.pem")))
        with pytest.raises(NatsAuthError, match="cannot load the NATS TLS files"):
            await connect(url, "kubus-test", auth=NatsAuth(tls_ca=str(tmp_path / "missing.pem")))


def test_secrets_stay_out_of_reprs_and_messages() -> None:
    from runtime.bus import where

    auth = NatsAuth(user="kubus-ingest", password="pw-in-repr-1", token=None)
    assert "pw-in-repr-1" not in repr(auth) and "kubus-ingest" in repr(auth)
    assert "tok-2" not in repr(NatsAuth(token="tok-2"))
    assert where("nats://u:pw-3@nats-0:4222,nats-1:4222") == "nats://nats-0:4222,nats://nats-1:4222"
    with pytest.raises(NatsAuthError, match="given twice"):
        NatsAuth(user="u", password="p", token="t").options()
