"""Secrets kept out of sight: URLs redacted, locations shown by reference, passwords percent-encoded."""
