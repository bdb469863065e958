"""The allowlist of jobs: ``training/manifest.json``, its model and its diagnostics."""

from arena_ls.manifest.loader import ManifestResult, load_manifest, load_manifest_text
from arena_ls.manifest.model import Job

__all__ = ["Job", "ManifestResult", "load_manifest", "load_manifest_text"]
