"""DuHL (Dünner, Parnell, Jaggi, NIPS 2017): the host holds all data, a device holds a
budget of it, and coordinate-wise duality gaps choose what the device holds.

- ``solver``: the DuHL loop (rounds, gap memory, certification)
- ``selection``: which coordinates are resident next (gap, sequential, random, importance)
- ``resident``: resident sets (dense rows, CSR entries; staging for prefetch)
- ``devices``: cpu, cuda (CuPy: the only CuPy importer), cuda_sim
- ``budget``: a memory budget in bytes and its split
- ``estimators``: scikit-learn estimators solved by DuHL
- ``warmup``: compile the kernels before anything is timed
"""
