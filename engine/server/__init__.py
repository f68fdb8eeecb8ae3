"""OpenAI-compatible HTTP server over the Engine: `python -m engine serve`, or in the app's process."""
