"""Kernels only: SCD epochs and coordinate gaps for the CPU (``cpu``, Numba) and
the GPU (``cuda``, numba.cuda TPA-SCD)."""
