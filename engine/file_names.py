"""What a file name may be on Windows, the strictest system the app runs on, so a name that passes here is
valid everywhere: the one place for the rules the app's exports (app.export) and the hub's downloads
(engine.hub.download) both follow."""
from __future__ import annotations

import re

# Not allowed in a name: path separators, wildcards, quotes, redirections, the drive colon (also NTFS's
# alternate data streams: "x.gguf:stream"), and control characters.
FORBIDDEN_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
# Device names, with any suffix ("nul.md" is the null device too), in any case; Windows counts the superscript
# digits ¹ ² ³ as digits there ("COM¹" is a port), and Microsoft's list has 0 and the console too.
_DEVICE_NAMES = {"con", "conin$", "conout$", "prn", "aux", "nul",
                 *(f"{port}{n}" for port in ("com", "lpt") for n in "0123456789¹²³")}


def names_a_device(name: str) -> bool:
    """Whether Windows opens a device for `name` instead of a file."""
    return name.split(".")[0].rstrip().lower() in _DEVICE_NAMES


def ends_badly(name: str) -> bool:
    """A trailing dot or space, which Windows drops (the file would be saved under another name)."""
    return name.endswith((".", " "))
