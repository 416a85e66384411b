"""Running kernels: arrays in, backends (the CPU interpreter so far), launch."""
