"""The tiers below RAM: the coordinate-major file formats, the direct-I/O reader, and a
problem's data on disk. The only file I/O under ``solvers/``.

- ``files``: the aligned coordinate-major ``.npy`` (written without holding it in RAM),
  page-aligned buffers, the request type and the ``preadv`` loop
- ``reader``: :class:`~solvers.storage.reader.DiskMatrix`, coordinates read past the page cache
- ``on_disk``: :class:`~solvers.storage.on_disk.OnDisk`, what a Problem asks of its data on disk
- ``ram_tier``: a RAM tier between the disk and a GPU block
- ``sparse_store``: the sparse store (coordinate-major CSR / CSC, indptr in RAM, indices and optional
  values on disk, aligned, checksummed), its streaming writer
- ``sparse_reader``: :class:`~solvers.storage.sparse_reader.SparseReader`, scattered variable-length
  coordinates read past the page cache into a two-half buffer
- ``sparse_on_disk``: :class:`~solvers.storage.sparse_on_disk.SparseOnDisk`, what a Problem asks of a
  sparse store (gaps, A^T a, row stats, blocks)
- ``sparse_transpose``: the other layout of a store, by an external transpose in bounded RAM
"""
