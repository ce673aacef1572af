"""The tiers below RAM: the coordinate-major file formats, the direct-I/O reader, and a
problem's data on disk. The only file I/O under ``solvers/``.

- ``files``: the aligned coordinate-major ``.npy`` (written without holding it in RAM),
  page-aligned buffers, the request type and the ``preadv`` loop
- ``reader``: :class:`~solvers.storage.reader.DiskMatrix`, coordinates read past the page cache
- ``on_disk``: :class:`~solvers.storage.on_disk.OnDisk`, what a Problem asks of its data on disk
- ``ram_tier``: a RAM tier between the disk and a GPU block
"""
