"""Kernel by kernel: the GPU ops of a trace's forward ranges, one row per kernel name (`per_kernel`: `nsys_cc.kernels`,
`nsys-cc kernels`), and two traces or two ranges side by side, where the draft saves time (`compare`:
`nsys_cc.kernel_diff`). The ranges are read as `coefficient` reads a model's forwards, so this room sits above it."""
