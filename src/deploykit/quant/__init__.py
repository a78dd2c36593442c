"""Quantization: calibration statistics, Q/DQ writing, TensorRT caches, the mixed-precision search.

Modules (each imports its heavy libraries lazily):

    config        QuantizeConfig, RepairConfig, per-precision tolerances
    graph         inspect and prepare an FP32 graph (Constant weights, opset, names)
    reader        sample streams and the CalibrationDataReaders handed to quantizers
    ranges        deploykit's streamed calibration (max / entropy / percentile / MSE / auto)
    thresholds    the clipping thresholds, pure functions on histograms
    scales        write calibrated ranges into a symmetric Q/DQ graph's activation scales
    flavours      the flavour protocol and registry: flavour_for(name) answers what a flavour decides
    modelopt_flavour   the tensorrt flavour (NVIDIA ModelOpt places Q/DQ)
    ort_flavour   the onnxruntime flavour (ONNX Runtime's own QDQ, uint8 activations)
    reasons       reasons as data: a code next to its sentence (why a node stayed in float, ...)
    exclusions    which nodes stay out of quantization, and why
    fp16          FP16 for the rest of the graph, overflowing nodes kept FP32
    evaluate      run a graph as written (TensorRT's numerics) or as ONNX Runtime computes it
    check         compare a quantized graph with its FP32 graph on a few samples
    judge         judge a candidate as parity does (its data, tolerances, task checks); scores per limit
    groups        the layer groups of a quantized graph (a conv with its activation, an attention block)
    patch         precision patches (group -> INT8/FP8/FP16/FP32) applied as graph edits
    latency_cost  what a layer in higher precision costs: a CPU roofline for ORT, a GPU one for TensorRT
    search        the search core: ranked prefix, bisection, confirmation on all samples, trimming
    sensitivity   first-order ranking, causal per-layer measurement, the search, the measurement cache
    mixed         mixed precision for one quantize job: the configured patch, or the search
    trt_cache     the legacy TensorRT INT8 calibration cache
    calib_source  --calib-data PATH -> a calibration config section
    range_choice  method auto: each method's range set scored, the best kept
    candidates    one candidate graph: Q/DQ placed by the flavour, its float rest finished
    quantize      quantize_model(): all of the above, what the quantize stage runs
"""
