"""Graph surgery: passes, their registry and the runner that checks them.

    base.py                 Pass, PassResult, PassError / PassConfigError, NoParams
    registry.py             passes by name (built-ins, module:Class, deploykit.passes entry points), --list
    runner.py               applies passes; checker, shape inference and ONNX Runtime check after each
    ortcheck.py             running and comparing graphs under ONNX Runtime (inputs/outputs matched)
    graph.py                protobuf helpers shared by the passes
    patterns.py             declarative patterns for replace_with_plugin, and their registry
    plugin_bodies.py        ONNX function bodies for plugin ops, for lower_plugins
    shapefold.py, dedupe.py, dims.py      helpers of sanitize and set_dims/free_dims
    one module per pass:    sanitize, set_dims, free_dims, remove_noops, cut, extract, convert_opset,
                            fold_batchnorm, replace_with_plugin, lower_plugins, split_large_weights

Nothing here imports onnx at package import; each module imports what it needs.
"""
