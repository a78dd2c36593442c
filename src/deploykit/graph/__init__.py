"""The graph layer: what surgery, quantization, the backends and the CLI share about ONNX graphs.

    files     load/save with the external-data rules, the checker, temporary files for large models
    proto     structure (producers, consumers, subgraph reads), validity, order, constants, types, opsets
    emulate   evaluating FP16/BF16 graphs as written; the ORT rewrites that are wrong for FP8 graphs
    run       the one maker of ONNX Runtime sessions (evaluator as a parameter) and the Session type

Nothing here imports anything above it (``python -m deploykit.tools.layers`` checks).
"""
