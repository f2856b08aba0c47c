"""Ed25519 keys and signatures for packs (the ``cryptography`` library does the maths).

A pack is trusted because its manifest is signed and the manifest names every entry's
BLAKE3: one signature over a few kilobytes covers gigabytes of entries. Keys are
standard files any tool reads: the private key is PKCS#8 PEM (written 0600, never
overwritten), the public key SubjectPublicKeyInfo PEM. A key is named by its *key
id*, the first 16 hex digits of BLAKE3 over the raw 32-byte public key, so a refusal
can say which key signed a pack and which keys this node trusts.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from ..errors import InvalidParameter, MissingDependency

log = logging.getLogger("voxcache.packs")

ALGORITHM = "ed25519"
MAX_KEY_FILE_BYTES = 16 * 1024


class UntrustedPack(InvalidParameter):
    """A pack whose signature is missing, altered, or made by a key this node does not trust."""


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise MissingDependency(
            "signed packs need the [packs] extra: pip install 'voxcache[packs]'") from None
    return serialization, ed25519


def key_id(raw_public: bytes) -> str:
    """The short name of a public key: BLAKE3 of its raw bytes, 16 hex digits."""
    return blake3.blake3(raw_public).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A trusted public key and where it came from (for messages)."""

    id: str
    key: Any
    source: str

    def verifies(self, signature: bytes, message: bytes | bytearray) -> bool:
        """True when ``signature`` is this key's signature of ``message``."""
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A private key loaded for signing."""

    id: str
    key: Any

    def sign(self, message: bytes) -> dict[str, str]:
        """The signature block stored beside a manifest (``manifest.sig``)."""
        return {"algorithm": ALGORITHM, "key_id": self.id,
                "signature": base64.b64encode(self.key.sign(message)).decode()}


def generate(path: str | Path) -> str:
    """Write a new private key to ``path`` (0600, refusing to overwrite) and its public key
    to ``path.pub``; return the key id."""
    serialization, ed25519 = _crypto()
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = private.public_key()
    public_pem = public.public_bytes(serialization.Encoding.PEM,
                                     serialization.PublicFormat.SubjectPublicKeyInfo)
    target = Path(path)
    pub_target = Path(f"{target}.pub")
    for existing in (target, pub_target):
        if existing.exists():
            raise InvalidParameter(f"{existing} already exists; a key is never overwritten — "
                                   "choose another path or remove it first")
    _write_new(target, pem, 0o600)
    _write_new(pub_target, public_pem, 0o644)
    return key_id(_raw(public))


def load_signing_key(path: str | Path) -> SigningKey:
    """Read a private key written by ``generate`` (or any Ed25519 PKCS#8 PEM)."""
    serialization, ed25519 = _crypto()
    data = _read_key_file(path)
    mode = os.stat(path).st_mode
    if mode & 0o077:
        log.warning("private key %s is readable by others (mode %o); chmod 600 it", path,
                    mode & 0o777)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidParameter(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InvalidParameter(f"{path} is not an Ed25519 key (make one with "
                               "`voxcache pack keygen -o KEY`)")
    return SigningKey(key_id(_raw(key.public_key())), key)


def load_public_key(path: str | Path) -> PublicKey:
    """Read a trusted public key (``KEY.pub``)."""
    serialization, ed25519 = _crypto()
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise InvalidParameter(f"{path} is not a PEM public key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InvalidParameter(f"{path} is not an Ed25519 public key")
    return PublicKey(key_id(_raw(key)), key, str(path))


def verify(signature_block: bytes | bytearray, manifest: bytes | bytearray,
           trusted: list[PublicKey]) -> PublicKey:
    """Return the trusted key that signed ``manifest``, or raise ``UntrustedPack`` saying why."""
    if not trusted:
        raise UntrustedPack("no trusted key given: name the publisher's public key with "
                            "--trust KEY.pub")
    try:
        block = json.loads(signature_block)
        signature = base64.b64decode(block["signature"], validate=True)
        algorithm, signer = block["algorithm"], str(block["key_id"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise UntrustedPack("the pack's signature block is unreadable; nothing was "
                            "imported") from None
    if algorithm != ALGORITHM:
        raise UntrustedPack(f"the pack is signed with {algorithm!r}; only {ALGORITHM} is "
                            "accepted")
    named = [key for key in trusted if key.id == signer]  # the block names its key: every
    if not named:                                          # byte of it counts
        names = ", ".join(f"{k.id} ({k.source})" for k in trusted)
        raise UntrustedPack(f"the pack is signed by key {signer}, which is not trusted here "
                            f"(trusted: {names}); nothing was imported")
    if not named[0].verifies(signature, manifest):
        raise UntrustedPack(f"the pack's manifest does not match its signature by key {signer} "
                            "(the manifest or the signature was altered); nothing was imported")
    return named[0]


def _raw(public: Any) -> bytes:
    serialization, _ = _crypto()
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _read_key_file(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidParameter(f"cannot read key file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise InvalidParameter(f"{path} is too large to be a key file")
    return data


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        raise InvalidParameter(f"{path} already exists; a key is never overwritten") from None
    except OSError as exc:
        raise InvalidParameter(f"cannot write {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)
