"""Secrets: the executor's key that decrypts them, the values a command gets,
and the masking that keeps those values out of what is stored."""
