"""The pytorch layer: frametrace with real torch (tests/README.md).  A test
module starts with ``from torch_support import torch``, which skips the
module, saying why, where torch cannot be imported, and fails it instead
under FRAMETRACE_TORCH_REQUIRED=1 (CI's torch stage, which installs it);
or with ``pytest.importorskip("torch")``.  Kept generic: nothing here."""
