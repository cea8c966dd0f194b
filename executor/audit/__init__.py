"""The tamper-evident history: canonical result records (`records`), their
Ed25519 signatures (`signing`) and the verification of a chain (`verify`)."""
