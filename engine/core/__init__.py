"""The engine core's pure parts: scheduler, KV block accounting, step batching. No device code here."""
