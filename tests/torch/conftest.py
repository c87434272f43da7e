"""The torch layer: frametrace with real torch (tests/README.md).  Each test
module starts with ``from torch_support import torch``, which skips the
module, saying why, where torch cannot be imported, and fails it instead
under FRAMETRACE_TORCH_REQUIRED=1 (CI's torch stage, which installs it).
Kept generic: other test modules of this layer share it."""
