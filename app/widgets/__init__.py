"""The window's parts, one widget per file; none of them knows about the engine or the store."""
