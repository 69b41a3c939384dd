"""What ppexec measures: ``stats`` and ``microbench`` (inside the ranks), the ``profile`` (from the launcher), the device.
``stats`` imports nothing, ``microbench`` and ``device_bench`` the model (``runtimes``); ``profile`` also launch and worker."""
