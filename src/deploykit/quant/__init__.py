"""Quantization: calibration statistics, Q/DQ writing, TensorRT caches, the precision-repair loop."""
