"""OpenAI-compatible HTTP server over the Engine: `python -m engine serve`, or in the app's process."""

# Here, not in guard.py: the CLI's parser and the app's panel need the default without importing starlette
# (the GPU machine and a bare `python -m engine bench` have no server dependencies).
DEFAULT_PORT = 8080
