"""Where runs execute: the back-end seam (``base``) and this machine's implementation (``local``);
the Ray back end is ``arena_ls.cluster.backend``, a floor above."""
