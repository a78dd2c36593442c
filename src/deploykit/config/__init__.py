"""deploykit.yaml: frozen dataclasses with their real defaults, read and validated at the edge."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.choices import (
    BackendName,
    CudaGraphMode,
    EqualizeHardSwish,
    Exporter,
    Flavour,
    InputDtype,
    InputKind,
    LayerPrecision,
    LintRun,
    Method,
    OptimizationLevel,
    Precision,
    Provider,
    QuantizeTarget,
    TargetPrecision,
    TensorRTVersion,
)
from deploykit.config.typed import from_value
from deploykit.data.memory import InMemoryModel
from deploykit.data.sources import DataConfig
from deploykit.errors import ConfigError
from deploykit.safety.limits import LimitsConfig

CALIBRATED: tuple[Precision, ...] = ("int8", "fp8")  # the precisions whose activation ranges a method calibrates


@dataclass(frozen=True)
class Source:
    """Where the model comes from: a torch factory ``module:function`` or an ONNX file."""

    factory: str | None = None
    onnx: str | None = None
    weights: str | None = None  # a state_dict file, read with torch.load(weights_only=True)
    depends: tuple[str, ...] = ()  # extra files the factory reads; they enter the cache key
    # a module or ModelProto passed to deploykit.convert as an object (never from a file)
    memory: InMemoryModel | None = field(default=None, metadata={"internal": True})

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.factory, self.onnx, self.memory)) != 1:
            raise ValueError("give exactly one of 'factory' (module:function) or 'onnx' (a file)")
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f"factory {self.factory!r} must be 'module:function'")

    @property
    def is_torch(self) -> bool:
        """A torch model (a factory or a module in memory): exported, and a torch reference for parity."""
        return self.factory is not None or (self.memory is not None and self.memory.kind == "torch")

    @property
    def is_onnx(self) -> bool:
        """An ONNX model (a file or a ModelProto in memory): ingested."""
        return not self.is_torch


@dataclass(frozen=True)
class Dim:
    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"needs 1 <= min <= opt <= max, got min={self.min} opt={self.opt} max={self.max}")


@dataclass(frozen=True)
class InputSpec:
    """One model input. ``kind`` says what the values mean, so the inputs deploykit makes up (the
    export check, parity without validation data, the gate) look like real ones:

    * ``tensor`` (default): standard normal floats, integers in [0, 16), random booleans;
    * ``image``: floats uniform in [0, 1] (what ``preprocess`` makes), uint8 in [0, 255];
    * ``tokens``: token features, standard normal;
    * ``mask``: True/1 marks a valid element; ``padding_mask``: True/1 marks padding (torch's
      ``key_padding_mask``). Either way every row (the last axis) keeps at least one valid element:
      a fully masked attention row is NaN in any runtime, and torch's fast path raises on it.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: InputDtype = "float32"
    kind: InputKind = "tensor"

    def __post_init__(self) -> None:
        if self.kind in ("mask", "padding_mask") and not self.shape:
            raise ValueError(f"input {self.name!r}: a {self.kind} needs at least one axis (its rows are the last)")
        if self.kind in ("image", "tokens") and self.dtype == "bool":
            raise ValueError(f"input {self.name!r}: kind {self.kind} cannot be bool (use mask or padding_mask)")


@dataclass(frozen=True)
class ExportConfig:
    exporter: Exporter = "auto"
    opset: int = 18
    check_atol: float = 1e-4  # ONNX Runtime vs torch at export, on random inputs
    check_rtol: float = 1e-3
    check_samples: int = 2
    seed: int = 0


@dataclass(frozen=True)
class SurgeryConfig:
    passes: tuple[str | dict[str, Any], ...] = ("sanitize",)
    check_atol: float = 1e-4  # outputs before/after a pass that declares it keeps numerics
    check_rtol: float = 1e-3


@dataclass(frozen=True)
class TensorRTOptions:
    """Builder settings of the TensorRT backend (precision is not here: it lives in the ONNX)."""

    workspace_mib: int = 4096
    builder_optimization_level: int = 3  # 0-5, TensorRT's default is 3
    hardware_compatibility: Literal["none", "ampere_plus", "same_compute_capability"] = "none"
    # The plan embeds its lean runtime (a few MB larger) and its plugin libraries, so any later TensorRT
    # runs it; it may run slower than a plan built for one version.
    version_compatible: bool = False
    sparse_weights: bool = False
    refit: bool = False
    strip_plan: bool = False
    timing_cache: bool = True  # persist the timing cache as its own artifact
    timing_cache_file: str | None = None  # also read it from / write it to this file (trtexec's --timingCacheFile)
    error_on_timing_cache_miss: bool = False
    cuda_graphs: bool = True  # replay a captured CUDA graph when benchmarking
    # TensorRT runs FP32 convolutions/GEMMs in TF32 unless told not to: off keeps FP32 parity strict.
    tf32: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.builder_optimization_level <= 5:
            raise ValueError(f"builder_optimization_level must be 0-5, got {self.builder_optimization_level}")
        if self.workspace_mib < 1:
            raise ValueError(f"workspace_mib must be positive, got {self.workspace_mib}")


@dataclass(frozen=True)
class BuildConfig:
    backend: BackendName = "onnxruntime"
    # onnxruntime backend
    optimization_level: OptimizationLevel = "extended"
    intra_op_threads: int = 0  # 0 = ONNX Runtime's choice (one per physical core)
    provider: Provider = "cpu"
    # tensorrt backend
    tensorrt: TensorRTOptions = TensorRTOptions()
    plugins: tuple[str, ...] = ()  # plugin libraries loaded before parsing; their digests enter the key


@dataclass(frozen=True)
class LintConfig:
    """The TensorRT compatibility check (``deploykit lint``; a stage before the build)."""

    # auto: for graphs bound for TensorRT (build.backend tensorrt, or a tensorrt-flavour quantization)
    run: LintRun = "auto"
    versions: tuple[TensorRTVersion, ...] = ("10.13", "11")  # the TensorRT versions the graph must parse with

    def __post_init__(self) -> None:
        if not self.versions:
            raise ValueError("versions lists no TensorRT version (leave it out for every supported one)")


@dataclass(frozen=True)
class Tolerance:
    """Elementwise limits for one output.

    A field left out inherits: ``parity.outputs.<name>`` -> ``parity.default`` -> the preset for
    ``quantize.precision`` (``parity_preset``). A field still unset after that is reported but
    not checked; to switch a preset check off write ``.inf`` (``-.inf`` for the minimums cosine
    and snr_db).
    """

    max_abs: float | None = None
    mean_abs: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None  # a minimum
    snr_db: float | None = None  # a minimum; the same measure as rel_l2 (snr = -20 log10 rel_l2)
    max_rel: float | None = None  # on elements with |ref| >= rel_floor * max|ref|
    rel_floor: float | None = None  # a fraction of the output's max |ref|
    # Polygraphy's elementwise rule (--atol/--rtol): every element within atol, or within rtol x |ref|
    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and math.isnan(value):
                raise ValueError(f"{f.name} is NaN: give a number (.inf turns a limit off)")
        if self.cosine is not None and not (0.0 <= self.cosine <= 1.0 or self.cosine == -math.inf):
            raise ValueError(f"cosine must be in [0, 1] (-.inf: off), got {self.cosine}")
        for name in ("max_abs", "mean_abs", "rel_l2", "max_rel", "atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0 (.inf: off), got {value}")

    def over(self, base: Tolerance) -> Tolerance:
        """This tolerance with its unset fields taken from ``base``."""
        mine = dataclasses.asdict(self)
        return Tolerance(
            **{k: base_v if mine[k] is None else mine[k] for k, base_v in dataclasses.asdict(base).items()}
        )


# FP32 builds (surgery, ORT graph optimizations) reach these on real data. Quantized builds default
# to the quantize stage's own tolerance for their precision (quantize.tolerances), so parity and the
# repair loop judge by the same numbers; see parity_preset.
FP32_TOLERANCE = Tolerance(max_abs=1e-3, mean_abs=1e-4, rel_l2=1e-4, cosine=0.9999, rel_floor=1e-2)


@dataclass(frozen=True)
class QuantTolerances:
    """The tolerance for each quantized precision, against the FP32 graph (worst sample); parity
    judges a quantized model by the same numbers (:func:`parity_preset`).

    rel_l2 and cosine are scale-free and catch what matters (a dropped Relu: cosine 0.57, a crushed
    Sigmoid); max_abs/mean_abs depend on an output's scale, so they stay off unless set. A field
    left out keeps the default below (``int8: {rel_l2: 0.05}`` keeps cosine 0.995).
    """

    fp16: Tolerance = Tolerance(rel_l2=0.01, cosine=0.9999)
    int8: Tolerance = Tolerance(rel_l2=0.1, cosine=0.995)
    fp8: Tolerance = Tolerance(rel_l2=0.1, cosine=0.995)
    int4: Tolerance = Tolerance(rel_l2=0.2, cosine=0.98)

    def __post_init__(self) -> None:
        # A precision's entry merges into its preset (``--set quantize.tolerances.int8.rel_l2=0.045``
        # keeps cosine 0.995), so `config show` and the cache key see the values that apply.
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, getattr(self, f.name).over(f.default))


@dataclass(frozen=True)
class RepairConfig:
    """The mixed-precision search (``--auto-repair``): when the quantized model misses parity, raise
    the layer groups whose measured effect on parity's metrics is largest per latency they cost, the
    fewest that pass parity's check on its data, then lower what is not needed
    (``deploykit.quant.sensitivity``, ``deploykit.quant.search``)."""

    enabled: bool = False
    # also run it, without enabled, when the plain graph misses a task check of parity's on its validation
    # data (a user who configured both asked to be judged by the task; false: fail with the hint instead)
    auto: bool = True
    max_iterations: int = 32  # states the search evaluates after measuring (the base and confirmations included)
    # layer groups the search may raise above the stage's precision; None: any number, the latency ceiling
    # bounds it (ViT-S passed IoU 0.97 with 202 of its 549 groups in FP32, 1.33x faster than FP32; a cap of 64: 0.954)
    max_nodes: int | None = None
    nodes_per_step: int = 1  # groups the first step raises; each later step raises twice as many
    samples: int = 4  # judging samples each search evaluation runs on (a pass is confirmed on all of them)
    screen_samples: int = 1  # samples for the first-order ranking (each group quantized alone)
    candidates: int = 12  # top-ranked groups measured leave-one-out to choose FP8 or FP16 (tensorrt INT8)
    # a bisection step that could save less than this share of the estimated latency is not run, and trims
    # that save less are tried together (0: every step, one at a time; such steps were 10 to 17 of a search's
    # 32 states on four real models, each for under 2 % of the latency)
    min_saving: float = 0.02

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_nodes", "nodes_per_step", "samples", "screen_samples", "candidates"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"repair.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_saving < 1:
            raise ValueError(f"repair.min_saving must be at least 0 and below 1, got {self.min_saving}")


@dataclass(frozen=True)
class QuantizeConfig:
    """What the quantize stage writes into the ONNX graph, and from which calibration statistics."""

    precision: Precision = "fp32"  # fp32 skips the stage
    target: QuantizeTarget = "auto"  # auto: follows build.backend (fp8/int4: tensorrt)
    # auto: max, percentile, MSE and entropy ranges from the same pass; the one whose quantized model checks best.
    # Only int8 and fp8 calibrate activation ranges (CALIBRATED): other precisions take auto (or max).
    method: Method = "auto"
    percentile: float = 99.99  # of |x| (tensorrt) or of each tail (onnxruntime)
    num_bins: int = 2048  # histogram bins for entropy / percentile / mse
    bounded: Literal["max", "exclude"] = "max"  # Sigmoid/Softmax/Tanh outputs: max calibration, or unquantized
    high_precision: Literal["fp16", "fp32"] = "fp16"  # tensorrt: what the non-quantized rest runs in
    fp16_limit: float = 16384.0  # |x| above this (weights or calibration activations) keeps a node FP32
    fp16_overflow: Literal["keep_fp32", "refuse"] = "keep_fp32"
    per_channel: bool = True  # per-channel weight scales
    reduce_range: Literal["auto", "on", "off"] = "auto"  # onnxruntime: 7-bit weights; auto = on without VNNI
    already_quantized: Literal["refuse", "pass"] = "refuse"  # a model with Q/DQ or ConvInteger
    # cross-layer equalization of Conv pairs before calibration (quant/equalize.py); HardSwish between
    # them: rewritten per channel (exact), kept (approximate: changes the FP32 function) or not equalized
    equalize: bool = False
    equalize_hardswish: EqualizeHardSwish = "exact"
    bias_correction: bool = False  # subtract each quantized layer's mean output error from its bias (quant/bias.py)
    exclude_nodes: tuple[str, ...] = ()  # node names kept out of quantization
    exclude_op_types: tuple[str, ...] = ()
    exclude_patterns: tuple[str, ...] = ()  # regular expressions matched against node names
    keep_fp32_nodes: tuple[str, ...] = ()  # node names kept in FP32 even where the rest is FP16
    # Normalisations kept out of INT8/FP8 by default: on the example planner (MatMul-heavy), quantizing
    # them added error and cost time; see examples/planner/README.md. [] quantizes them too.
    high_precision_ops: tuple[str, ...] = ("LayerNormalization", "Softmax")
    int4_block_size: int = 128
    check_samples: int = 16  # calibration samples held out of the ranges; the check runs on them
    auto_samples: int = 4  # of those, how many method auto compares its range sets on
    repair: RepairConfig = RepairConfig()
    # layer group (named after its first node) -> precision, applied to the quantized graph; the
    # search writes the one it chose into precision.json ready to paste here (then it is replayed)
    layer_precisions: dict[str, LayerPrecision] = field(default_factory=dict)
    tolerances: QuantTolerances = QuantTolerances()

    def __post_init__(self) -> None:
        if self.enabled and self.precision not in CALIBRATED and self.method not in ("auto", "max"):
            raise ValueError(
                f"method {self.method!r} does not apply to precision {self.precision}: only "
                f"{' and '.join(CALIBRATED)} calibrate activation ranges (set method: auto or max)"
            )
        if not 50.0 < self.percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {self.percentile}")
        if self.num_bins < 256:
            raise ValueError(f"num_bins must be >= 256 (entropy needs 128 quantized bins), got {self.num_bins}")
        if not 0 < self.fp16_limit <= 65504:
            raise ValueError(f"fp16_limit must be in (0, 65504], got {self.fp16_limit}")
        if self.check_samples < 1:
            raise ValueError(f"check_samples must be >= 1, got {self.check_samples}")
        if self.auto_samples < 1:
            raise ValueError(f"auto_samples must be >= 1, got {self.auto_samples}")
        for pattern in self.exclude_patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"exclude_patterns: {pattern!r} is not a regular expression ({e})") from e

    @property
    def enabled(self) -> bool:
        return self.precision != "fp32"

    def tolerance(self) -> Tolerance:
        """The tolerance for this precision, unset fields from the defaults (fp32 has none: the
        stage does not run)."""
        return getattr(self.tolerances, self.precision)  # merged into the preset at load

    def flavour(self, backend: str) -> Flavour:
        """The target flavour: as configured, else the build backend's; FP8 and INT4 exist only as
        the tensorrt flavour (ONNX Runtime's CPU kernels have no FP8 or INT4 convolution)."""
        if self.target != "auto":
            return self.target
        if backend == "tensorrt" or self.precision in ("fp8", "int4"):
            return "tensorrt"
        return "onnxruntime"


def parity_preset(quantize: QuantizeConfig) -> Tolerance:
    """The tolerance parity uses for what ``parity.default`` and ``parity.outputs`` leave unset."""
    if quantize.precision == "fp32":
        return FP32_TOLERANCE
    q = quantize.tolerance()
    # max_abs/mean_abs depend on each output's scale: off unless the quantize tolerance sets them finite.
    off = {k: None for k in ("max_abs", "mean_abs") if getattr(q, k) in (None, math.inf)}
    return dataclasses.replace(q.over(Tolerance(rel_floor=1e-2)), **off)


@dataclass(frozen=True)
class ClassificationCheck:
    """Top-1 and top-k agreement of a score/logit output; tied scores count as agreeing."""

    output: str
    k: int = 5  # capped at the output's number of classes (min(5, classes) by default)
    axis: int = -1  # the class axis
    min_top1: float = 0.99  # fraction of rows whose top-1 class agrees
    min_topk: float = 0.95  # mean overlap of the top-k sets

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


@dataclass(frozen=True)
class HeadDecode:
    """The decode a raw detector head needs before its boxes are pixels (``packed.decode``).

    The head's boxes are laid out level by level (one per stride), each level row-major over its
    (input / stride) grid, anchors first within a level for ``yolov5``:

    * ``yolox`` (anchor-free, YOLOX): centre = (t_xy + cell) * stride, size = exp(t_wh) * stride;
    * ``yolov5`` (anchor-based, YOLOv5/v7): centre = (2 sigmoid(t_xy) - 0.5 + cell) * stride,
      size = (2 sigmoid(t_wh))^2 * anchor;
    * ``dfl`` (YOLOv8, PicoDet: distances as a distribution over ``reg_max`` bins per side): each of
      left/top/right/bottom is the expectation of the softmax over its bins, from the cell centre
      (cell + 0.5), times the stride.

    Scores (objectness, classes) go through a sigmoid when ``sigmoid`` (the head writes logits).
    """

    style: Literal["yolox", "yolov5", "dfl"]
    strides: tuple[int, ...]
    input_size: tuple[int, int]  # (height, width) of the network input: each level's grid is input / stride
    anchors: tuple[tuple[float, ...], ...] = ()  # yolov5: per stride, w0, h0, w1, h1, ... in input pixels
    reg_max: int = 16  # dfl: bins per box side
    sigmoid: bool = True  # objectness and class scores are logits

    def __post_init__(self) -> None:
        if not self.strides or any(s < 1 for s in self.strides):
            raise ValueError(f"strides must be positive, got {list(self.strides)}")
        if self.style == "yolov5" and (
            len(self.anchors) != len(self.strides) or any(not a or len(a) % 2 for a in self.anchors)
        ):
            raise ValueError(
                "yolov5 decoding needs anchors: one list of w, h pairs per stride "
                f"({len(self.strides)} strides, {len(self.anchors)} anchor lists)"
            )
        if self.reg_max < 1:
            raise ValueError(f"reg_max must be >= 1, got {self.reg_max}")

    def box_attributes(self) -> int:
        """Attributes per box the head writes before its scores."""
        return 4 * self.reg_max if self.style == "dfl" else 4


@dataclass(frozen=True)
class PackedDetections:
    """One YOLO-style output holding every candidate box: ``[B, N, 4(+1)+C]`` or ``[B, 4(+1)+C, N]``
    (YOLOv5/YOLOX write the first, YOLOv8 the second), decoded before matching: boxes are the first
    four attributes, the class scores the rest (times the objectness at attribute 4, if any). A raw
    head (grid offsets, anchors, distance bins, logits) declares its ``decode``; its boxes then come
    out in pixels, centre and size."""

    output: str
    box_format: Literal["cxcywh", "xyxy"] = "cxcywh"  # YOLO exports write centre and size
    objectness: bool = False  # attribute 4 is an objectness score (YOLOv5/YOLOX); YOLOv8 has none
    layout: Literal["auto", "boxes_by_attributes", "attributes_by_boxes"] = (
        "auto"  # auto: the shorter axis holds the attributes
    )
    decode: HeadDecode | None = None  # None: the boxes are already decoded
    # a head written as one tensor per stride: the further levels, joined after ``output`` along the boxes
    levels: tuple[str, ...] = ()
    # class scores written apart from the boxes (PicoDet): one tensor per level, in the same order,
    # appended to each box's attributes
    scores: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.scores and len(self.scores) != 1 + len(self.levels):
            raise ValueError(
                f"scores names one tensor per level: {len(self.scores)} given for "
                f"{1 + len(self.levels)} levels (output and levels)"
            )

    def tensors(self) -> tuple[str, ...]:
        """Every output the head is read from: the levels, then their scores."""
        return (self.output, *self.levels, *self.scores)


@dataclass(frozen=True)
class DetectionCheck:
    """Boxes matched by IoU between reference and candidate, independent of their order.

    The boxes come from ``boxes`` + ``scores`` (+ ``classes``) outputs, or from one ``packed``
    output as exported detectors write it (no surgery needed).
    """

    boxes: str | None = None  # output (..., N, 4)
    scores: str | None = None  # output (..., N) or (..., N, classes)
    classes: str | None = None  # output (..., N) of class ids, when scores hold one score per box
    packed: PackedDetections | None = None  # instead of boxes/scores/classes
    box_format: Literal["xyxy", "xywh", "cxcywh"] = "xyxy"  # of ``boxes`` (``packed`` has its own)
    score_threshold: float = 0.3  # boxes scoring below it on both sides are ignored
    score_margin: float = 0.05  # a box just under the threshold on one side may still match
    match_iou: float = 0.5  # pairs below this IoU are no match
    min_matched: float = 0.95  # matched boxes / boxes above threshold, both sides counted
    min_mean_iou: float = 0.9
    max_score_delta: float = 0.05  # mean |score difference| over matched pairs
    max_class_flips: float = 0.0  # fraction of matched pairs whose class differs
    # false for post-NMS outputs: their number and order of boxes are data-dependent, so only this
    # check compares them (an elementwise comparison would need equal shapes and order).
    elementwise: bool = True
    min_recall: float = 0.0  # reference boxes above threshold that the candidate matches (reported always)

    def __post_init__(self) -> None:
        if self.packed is not None and (self.boxes or self.scores or self.classes):
            raise ValueError("give either packed or boxes/scores/classes, not both")
        if self.packed is None and not (self.boxes and self.scores):
            raise ValueError("needs boxes and scores (the output names), or packed: {output: NAME}")


@dataclass(frozen=True)
class SegmentationCheck:
    """Pixel agreement and mIoU of the two argmax maps of a (..., classes, H, W) output."""

    output: str
    axis: int = 1  # the class axis
    min_pixel_agreement: float = 0.99
    min_miou: float = 0.95


@dataclass(frozen=True)
class DepthCheck:
    """AbsRel and the delta < 1.25 accuracy of a depth output against the reference depth."""

    output: str
    min_depth: float = 1e-3  # reference pixels below this are invalid and ignored
    max_abs_rel: float = 0.01
    min_delta1: float = 0.99


@dataclass(frozen=True)
class TrajectoryCheck:
    """ADE/FDE between trajectories (..., T, 2 or 3), in the output's units.

    With ``scores`` (an output (..., K) scoring the K modes of trajectories (..., K, T, D)), each
    side's best-scored mode is compared (what a planner acts on), and the share of rows whose best
    mode agrees (tie-aware) is held to ``min_top1``.
    """

    output: str
    max_ade: float = 0.05
    max_fde: float = 0.1
    scores: str | None = None
    min_top1: float = 0.95


@dataclass(frozen=True)
class ProbabilityMapCheck:
    """IoU of the thresholded maps; elementwise max_abs is not checked for this output."""

    output: str
    threshold: float = 0.5
    min_iou: float = 0.95


@dataclass(frozen=True)
class TaskChecks:
    classification: tuple[ClassificationCheck, ...] = ()
    detection: tuple[DetectionCheck, ...] = ()
    segmentation: tuple[SegmentationCheck, ...] = ()
    depth: tuple[DepthCheck, ...] = ()
    trajectory: tuple[TrajectoryCheck, ...] = ()
    probability_map: tuple[ProbabilityMapCheck, ...] = ()


@dataclass(frozen=True)
class ParityConfig:
    samples: int = 4  # random samples per input shape, when no validation data is configured
    seed: int = 1
    torch_reference: bool = True  # also compare against torch when the source is a torch factory
    default: Tolerance = Tolerance()  # unset fields: parity_preset(quantize), by precision
    outputs: dict[str, Tolerance] = field(default_factory=dict)
    tasks: TaskChecks = TaskChecks()
    vacuous_below: float = 1e-6  # a reference output whose max |value| is below this proves nothing
    inconclusive: Literal["fail", "warn"] = "fail"  # what a comparison that proves nothing does
    diagnose: bool = True  # on failure, compare the two ONNX graphs tensor by tensor
    diagnose_top: int = 10
    # all: elementwise limits and task checks judge; tasks: the task checks alone judge, by the limits
    # each sets away from its defaults (all its defaults where it sets none); elementwise metrics and the
    # other limits are reported, not judged (NaN/Inf still fails)
    judge: Literal["all", "tasks"] = "all"

    def __post_init__(self) -> None:
        if self.judge == "tasks" and not any(getattr(self.tasks, f.name) for f in dataclasses.fields(self.tasks)):
            raise ValueError(
                "judge: tasks needs a task check (parity.tasks: detection, classification, ...) to judge by"
            )

    @property
    def elementwise_judged(self) -> bool:
        """Whether the elementwise limits decide (``judge: all``) or are only reported."""
        return self.judge == "all"

    def tolerance(self, output: str, preset: Tolerance = FP32_TOLERANCE) -> Tolerance:
        """The resolved tolerance of one output; ``preset`` fills what the config leaves unset
        (``parity_preset(config.quantize)``). An output given ``atol``/``rtol`` (Polygraphy's rule) is
        judged by them and the fields set here, not by the preset's other limits."""
        own = self.outputs.get(output, Tolerance()).over(self.default)
        if own.atol is not None or own.rtol is not None:
            preset = Tolerance(rel_floor=preset.rel_floor)
        return own.over(preset)


@dataclass(frozen=True)
class Target:
    """One platform's budget. ``fps`` is judged on wall-clock throughput of the timing loop (samples/s,
    trtexec's "Throughput"), ``latency_ms_p99`` on the median over trials of each trial's p99,
    ``deadline_ms`` on the share of every timed iteration over it (held to ``max_miss_rate``)."""

    fps: float | None = None
    latency_ms_p99: float | None = None
    deadline_ms: float | None = None  # a per-frame budget: the share of iterations over it is judged
    max_miss_rate: float = 0.0  # the share of frames allowed past deadline_ms
    batch: int | None = None  # None: the batch of the opt shape (what --shapes / --opt-shapes set)
    precision: TargetPrecision = "any"  # the build this target is for

    def __post_init__(self) -> None:
        if self.fps is None and self.latency_ms_p99 is None and self.deadline_ms is None:
            raise ValueError("a target needs 'fps', 'latency_ms_p99' or 'deadline_ms'")
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.deadline_ms is not None and not (self.deadline_ms > 0 and math.isfinite(self.deadline_ms)):
            raise ValueError(f"deadline_ms must be a positive number of milliseconds, got {self.deadline_ms}")
        if not 0.0 <= self.max_miss_rate <= 1.0:
            raise ValueError(f"max_miss_rate must be a share from 0 to 1, got {self.max_miss_rate}")


@dataclass(frozen=True)
class SoakLimits:
    """``gate.soak``: what a soak (``gate.soak_s`` > 0) may show before the gate fails."""

    window_s: float = 60.0  # drift compares the first and the last window (a third of a shorter soak)
    max_drift: float = 0.10  # last window's median latency over the first's, minus 1
    max_rss_growth_mib: float = 64.0  # resident memory growth from the first to the last window
    max_device_growth_mib: float = 64.0  # device memory growth (GPU sessions that can tell)
    check_every_s: float = 1.0  # how often outputs are checked for NaN/Inf and memory is sampled

    def __post_init__(self) -> None:
        for name in ("window_s", "check_every_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("max_drift", "max_rss_growth_mib", "max_device_growth_mib"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class GateConfig:
    warmup: int = 20  # warm-up runs at least this many iterations ...
    warmup_s: float = 0.25  # ... and for at least this long (clocks, caches, allocator); --warmup-ms
    iterations: int = 200  # per trial (at least)
    duration_s: float = 0.0  # timed seconds at least, over all trials: more iterations per trial when needed
    trials: int = 5  # the report gives the median of trials and their spread
    batches: tuple[int, ...] = ()  # extra batch sizes to measure throughput at (batch x FPS)
    concurrency: int = 1  # > 1: also measure throughput with this many sessions in parallel
    targets: dict[str, Target] = field(default_factory=dict)
    allow_missing_target: bool = False
    baseline: str | None = None  # a previous gate.json to compare against
    regression_threshold: float = 0.10  # slowdown allowed vs the baseline, on top of the measured spread
    spread_warning: float = 0.10  # warn when the trials' p50 spread (max - min over median) exceeds this
    profile: bool = False  # also profile per layer (the backend's profiler, roofline columns): profile.json
    # trtexec's timing flags: --useCudaGraph (on; auto follows build.tensorrt.cuda_graphs), --noDataTransfers
    # (data_transfers false: the engine alone, inputs and outputs stay on the device), --avgRuns
    cuda_graph: CudaGraphMode = "auto"
    data_transfers: bool = True
    avg_runs: int = 1  # latency percentiles over means of this many consecutive runs (deadlines: every run)
    soak_s: float = 0.0  # > 0: after the trials, run this long and check drift, memory, NaN/Inf, errors
    soak: SoakLimits = SoakLimits()

    def __post_init__(self) -> None:
        for name in ("iterations", "trials", "concurrency", "avg_runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.warmup_s < 0 or self.duration_s < 0 or self.soak_s < 0:
            raise ValueError("warmup, warmup_s, duration_s and soak_s must be >= 0")
        if any(b < 1 for b in self.batches):
            raise ValueError(f"batches must be >= 1, got {list(self.batches)}")


@dataclass(frozen=True)
class Config:
    name: str
    source: Source
    inputs: tuple[InputSpec, ...]
    dims: dict[str, Dim] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # output names to give the exported model (torch sources)
    export: ExportConfig = ExportConfig()
    surgery: SurgeryConfig = SurgeryConfig()
    quantize: QuantizeConfig = QuantizeConfig()
    calibration: DataConfig | None = None  # samples for quantization; random inputs are refused there
    validation: DataConfig | None = None  # samples for parity; random inputs when absent (the report says so)
    build: BuildConfig = BuildConfig()
    lint: LintConfig = LintConfig()
    parity: ParityConfig = ParityConfig()
    gate: GateConfig = GateConfig()
    limits: LimitsConfig = LimitsConfig()  # time per stage, memory per input
    # The folder the config's relative paths start from: where the file lives, not a YAML key.
    base_dir: Path = field(default=Path("."), compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("'inputs' lists no input")
        for spec in self.inputs:
            for d in spec.shape:
                if isinstance(d, str) and d not in self.dims:
                    raise ValueError(f"input {spec.name!r} uses dim {d!r}, which 'dims' does not define")
                if isinstance(d, int) and d < 1:
                    raise ValueError(f"input {spec.name!r} has a non-positive dim {d}")

    @classmethod
    def from_dict(cls, raw: dict[str, Any], base_dir: str | Path = ".") -> Config:
        """A Config from a mapping written as ``deploykit.yaml`` is (``{"name": ..., "source": {...},
        "inputs": [...]}``), validated like the file: unknown keys name the valid ones (with a did-you-mean),
        bad values name their field; relative paths start at ``base_dir``."""
        if not isinstance(raw, dict):
            raise ConfigError(f"config: expected a mapping, got {type(raw).__name__}")
        return config_from_dict(raw, Path(base_dir).resolve())

    def path(self, relative: str) -> Path:
        """A path from the config, resolved against the config file's folder."""
        p = Path(relative)
        return p if p.is_absolute() else (self.base_dir / p)

    def shape(self, spec: InputSpec, which: Literal["min", "opt", "max"]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else getattr(self.dims[d], which) for d in spec.shape)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
    """Read ``deploykit.yaml``, apply dotted ``overrides`` (``{"gate.iterations": 50}``) and validate."""
    path = Path(path)
    return config_from_raw(read_raw(path), overrides or {}, path.parent.resolve(), str(path))


def read_raw(path: Path) -> dict[str, Any]:
    """A config file's mapping as parsed (bounded, safe YAML), not yet validated."""
    from deploykit.config.load import load_yaml, read_text

    raw = load_yaml(read_text(path), str(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw


def config_from_raw(
    raw: dict[str, Any],
    overrides: dict[str, Any],
    base_dir: Path,
    where: str = "",
    spelled: dict[str, str] | None = None,
) -> Config:
    """``raw`` (a parsed file, ``where``; or a mapping from the Python API, ``where=""``) with dotted
    ``overrides`` applied, validated; an error names the override it came from (as ``spelled`` writes
    it, e.g. ``precision='int9'`` for the API's parameter), else ``where``."""
    try:
        return config_from_dict(apply_overrides(raw, overrides), base_dir)
    except ConfigError as e:
        hint = e.hint or "the README's 'Configuration' section lists every key"
        key = next((k for k in overrides if e.message.startswith((f"config.{k}:", f"config.{k}."))), None)
        if key is not None:  # the bad value came from the command line (or the API's overrides), not the file
            said = (spelled or {}).get(key) or f"override {key}={overrides[key]!r}"
            raise ConfigError(f"{said}: {e.message}", hint=hint) from e
        raise ConfigError(f"{where}: {e.message}" if where else e.message, hint=hint) from e


def config_from_dict(raw: dict[str, Any], base_dir: Path = Path(".")) -> Config:
    """Validate a parsed config; ``base_dir`` is the folder its relative paths start from."""
    from deploykit.config.load import validate

    cfg = from_value(Config, raw, "config")
    validate(cfg)
    return dataclasses.replace(cfg, base_dir=base_dir)


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set ``a.b.c``-style keys in a copy of ``raw``; the result is validated like the file."""
    out = _deep_copy(raw)
    for dotted, value in overrides.items():
        node = out
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {dotted!r}: {key!r} is not a section")
            node = child
        node[leaf] = value
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
