"""Thin runtime bindings: one module per way of reaching a GPU runtime (cuda-python, hip-python, ctypes).

Each binding implements `RuntimeBinding` (binding.py) over integer handles, so `engine.backends.gpu` is written
once. Importing any module here loads no driver: libraries are opened in `load()`.
"""
