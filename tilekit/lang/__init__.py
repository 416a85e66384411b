"""The user-facing language: ``@kernel``, tiles, tensors, control flow, builtins."""
