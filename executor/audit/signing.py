"""Ed25519 signing of result records: the private key lives in a file the
database never sees; its public key is registered in shell.signing_keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from executor.errors import ConfigError
from executor.key_files import create_private_file


def key_id_of(public_key_hex: str) -> str:
    """First 16 hex digits of sha256 of the raw public key."""
    return hashlib.sha256(bytes.fromhex(public_key_hex)).hexdigest()[:16]


class Signer:
    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        raw = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                   serialization.PublicFormat.Raw)
        self.public_key_hex = raw.hex()
        self.key_id = key_id_of(self.public_key_hex)

    @classmethod
    def generate(cls) -> Signer:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_file(cls, path: str | Path) -> Signer:
        """Loads the key (PEM, PKCS#8); creates it, mode 0600, if the file is absent."""
        path = Path(path)
        try:
            if not path.exists():
                create_private_file(path, Ed25519PrivateKey.generate().private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption()))
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except OSError as exc:
            raise ConfigError(f"signing key {path}: {exc.strerror or exc} "
                              "(set PG_SHELL_SIGNING_KEY_FILE to a writable path)") from exc
        except ValueError as exc:
            raise ConfigError(f"signing key {path} is not a PEM Ed25519 private key") from exc
        if not isinstance(loaded, Ed25519PrivateKey):
            raise ConfigError(f"signing key {path} is not an Ed25519 key")
        return cls(loaded)

    def sign(self, text: str) -> str:
        return self._key.sign(text.encode("utf-8")).hex()


def signature_valid(public_key_hex: str, text: str, signature_hex: str) -> bool:
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex))
        key.verify(bytes.fromhex(signature_hex), text.encode("utf-8"))
    except (InvalidSignature, ValueError):
        return False
    return True
