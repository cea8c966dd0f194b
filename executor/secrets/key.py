"""The executor's secrets key: an OpenPGP key whose public half the database
encrypts secrets to (pgcrypto's pgp_pub_encrypt) and whose private half only
executors hold, in a file the database never sees.

pgcrypto encrypts to the one RSA subkey a public key has, and refuses a key
with more than one it could encrypt to; so the key is RSA, and the public
half given to the database is the primary key with its encryption subkey
only (the signing subkey, RSA too, is left out)."""

from __future__ import annotations

from pathlib import Path

from pysequoia import Cert, CipherSuite, Profile, Tsk, decrypt
from pysequoia.packet import Packet, PacketPile, Tag

from executor.errors import ConfigError
from executor.key_files import create_private_file

USER_ID = "pg_shell secrets"


class SecretsKey:
    def __init__(self, tsk: Tsk) -> None:
        self._decryptor = tsk.decryptor()
        cert = tsk.extract_certificate()
        self.fingerprint = cert.fingerprint.upper()
        self.public_key = str(Cert.from_packets(_encryption_only(cert)))

    @classmethod
    def from_file(cls, path: str | Path) -> SecretsKey:
        """Loads the key (an armored OpenPGP secret key); creates it, mode
        0600, if the file is absent."""
        path = Path(path)
        try:
            if not path.exists():
                create_private_file(path, generate_armored().encode())
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"secrets key {path}: {exc.strerror or exc} "
                              "(set PG_SHELL_SECRETS_KEY_FILE to a writable path, "
                              "or to nothing to run without secrets)") from exc
        try:
            return cls(Tsk.from_bytes(data))
        except Exception as exc:  # pysequoia raises plain exceptions for bad input
            raise ConfigError(f"secrets key {path} is not an OpenPGP secret key: {exc}") from exc

    def decrypt(self, ciphertext: bytes) -> str:
        """The value of one secret (ValueError if this key cannot open it)."""
        try:
            plain = decrypt(ciphertext, decryptor=self._decryptor).bytes
        except Exception as exc:
            raise ValueError(str(exc)) from exc
        if plain is None:
            raise ValueError("nothing decrypted")
        return plain.decode("utf-8")


def generate_armored() -> str:
    """A new secrets key, armored (RSA 3072, OpenPGP v4 as pgcrypto reads)."""
    return str(Tsk.generate(USER_ID, profile=Profile.RFC4880, cipher_suite=CipherSuite.RSA3k))


def _encryption_only(cert: Cert) -> list[Packet]:
    """The certificate's packets without the subkeys that cannot encrypt."""
    parts: list[list[Packet]] = [[]]
    for packet in PacketPile.from_bytes(bytes(cert)):
        if packet.tag == Tag.PublicSubkey:
            parts.append([])
        parts[-1].append(packet)

    def encrypts(part: list[Packet]) -> bool:
        return any(p.tag == Tag.Signature and p.key_flags is not None
                   and (p.key_flags.transport_encryption or p.key_flags.storage_encryption)
                   for p in part)

    return [p for i, part in enumerate(parts) if i == 0 or encrypts(part) for p in part]
