"""Find GGUF models on the Hugging Face Hub (or a mirror named by HF_ENDPOINT) and download them.

    client = HubClient()                            # endpoint: HF_ENDPOINT or huggingface.co
    repos = client.search("qwen gguf")              # [RepoSummary]
    files = client.repo_files(repos[0].repo_id)     # [RemoteFile] with size and LFS sha256
    groups = group_by_quant(files)                  # [QuantGroup]: Q4_K_M, Q8_0, ... (split files marked)
    header = client.read_header(files[0])           # GGUFHeader via HTTP Range, through our bounded parser
    fit_verdict(header, current_machine())          # "fits on the GPU" / "fits on the CPU only" / ...
    DownloadManager(models_dir()).enqueue(files[0]) # .part + Range resume, sha256 checked, then moved in

No Qt here; the app wraps the manager's callbacks into signals (app.discover).
Importing this package raises InvalidEndpointError when HF_ENDPOINT is set but is no http(s) URL, and
InvalidTimeoutError when HF_HUB_ETAG_TIMEOUT or HF_HUB_DOWNLOAD_TIMEOUT is set but is no whole number.
"""
from engine.hub.endpoint import InvalidEndpointError, InvalidTimeoutError, check_timeouts, checked_endpoint

# Before huggingface_hub is imported: it parses these variables at import and fails with a bare ValueError.
checked_endpoint()
check_timeouts()

from engine.hub.client import (  # noqa: E402
    HubAccessError,
    HubClient,
    HubUnreachableError,
    InvalidRepoIdError,
    RemoteFile,
    RepoSummary,
)
from engine.hub.download import DownloadManager, DownloadState, download_file  # noqa: E402
from engine.hub.quants import QuantGroup, group_by_quant, quant_of, split_part  # noqa: E402
from engine.hub.verdict import Machine, Verdict, current_machine, fit_verdict  # noqa: E402

__all__ = ["HubClient", "HubUnreachableError", "HubAccessError", "InvalidEndpointError", "InvalidTimeoutError",
           "InvalidRepoIdError", "RemoteFile", "RepoSummary", "DownloadManager", "DownloadState",
           "download_file", "QuantGroup", "group_by_quant", "quant_of", "split_part", "Machine", "Verdict",
           "current_machine", "fit_verdict"]
