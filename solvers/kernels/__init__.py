"""Compute kernels: ``cpu`` (Numba, nogil, cached); GPU kernels come with the GPU backend."""
