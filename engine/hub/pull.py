"""`python -m engine pull REPO[:FILE or QUANT]`: download one GGUF from the hub with a progress bar.

Without FILE or QUANT the repo's only GGUF is taken, or its Q4_K_M; otherwise the choices are listed.
An interrupted pull resumes from its `.part` file when run again.
"""
from __future__ import annotations

import sys
from pathlib import Path

from engine.errors import DownloadError
from engine.hub.client import HubClient, RemoteFile
from engine.hub.download import download_file
from engine.hub.quants import group_by_quant
from engine.hub.token import load_token
from engine.paths import models_dir

DEFAULT_QUANT = "Q4_K_M"


def choose(files: list[RemoteFile], selector: str | None) -> RemoteFile:
    """The file `selector` names (a path in the repo, a file name, or a quantization), or the default."""
    groups = group_by_quant(files)
    if not groups:
        raise DownloadError("The repo has no GGUF files.")
    if selector:
        for f in files:
            if selector in (f.filename, f.filename.rsplit("/", 1)[-1]):
                return f
        picked = [g for g in groups if g.quant.lower() == selector.lower()]
    else:
        picked = groups if len(groups) == 1 else [g for g in groups if g.quant == DEFAULT_QUANT]
    if len(picked) != 1:
        listing = ", ".join(f"{g.quant} ({g.files[0].filename}{', split' if g.split else ''})" for g in groups)
        what = f"{selector!r} matches {len(picked)} files" if selector else "Say which file"
        raise DownloadError(f"{what}; the repo has: {listing}")
    return picked[0].files[0]


def cmd_pull(args) -> int:
    from tqdm import tqdm

    repo, _, selector = args.spec.partition(":")
    client = HubClient(token=args.token or load_token())
    f = choose(client.repo_files(repo), selector or None)
    folder = Path(args.dir) if args.dir else models_dir()
    print(f"{repo}: {f.filename} ({f.size / 1e6:.1f} MB) -> {folder}", file=sys.stderr)
    with tqdm(total=f.size, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
              mininterval=0.5) as bar:
        def progress(done: int, total: int) -> None:
            bar.update(done - bar.n)

        path = download_file(client, f, folder, progress)
    print(path)
    return 0
