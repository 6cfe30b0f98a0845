"""nsys_cc: the cost coefficient c of speculative decoding, measured from Nsight Systems traces."""

__version__ = "0.1.0"
