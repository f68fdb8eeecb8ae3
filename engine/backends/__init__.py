"""Backends: the device layer. Only this package knows GPUs exist.

    base.py          the contract (DeviceBuffer, PinnedHostBuffer, Stream, Event, Kernel, Backend)
    cpu.py, gpu.py   the numpy backend, and the GPU backend written once over runtime/ bindings
    probe.py         facts from every backend, never raises; policy.py derives capabilities from facts
    async_output.py  the safe readback (fork event -> copy stream -> pinned D2H -> ready event)
    registry.py      names -> modules (packaging's hidden imports)

Importing this package (or any module in it) loads no driver.
"""
