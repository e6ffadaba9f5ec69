"""The CUDA runtime: driver and contexts (``driver``), device arrays and interop (``arrays``,
``dlpack``), argument packing (``packing``), loading and launching (``launch``), and the on-disk
kernel cache (``cache``). Nothing here needs a GPU to import."""
