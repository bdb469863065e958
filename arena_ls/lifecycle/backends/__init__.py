"""Where runs execute: the back-end seam (``base``) and its implementations (``local``)."""
