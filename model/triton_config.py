"""config.pbtxt for clip_image and clip_text, built with Triton's own protobuf schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from core.embedding.manifest import (
    IMAGE_INPUT,
    IMAGE_MODEL,
    IMAGE_OUTPUT,
    MAX_BATCH_SIZE,
    TEXT_INPUT,
    TEXT_MODEL,
    TEXT_OUTPUT,
    Priority,
)
from core.settings import MAX_TEXT_QUEUE_DELAY_US

Target = Literal["cpu", "gpu"]
# The image side runs nightly in batches: bigger batches keep a GPU busy.
IMAGE_PREFERRED_BATCHES = (16, 32, 64)
WARMUP_TEXT_LENGTH = 8
# Triton lets a request shorten its queue timeout (allow_timeout_override), never lengthen it,
# so the default is a ceiling: what a caller that sets no timeout waits at most in the queue.
# Ten minutes: longer than any deadline our clients set (the indexer's batch, 60 s).
MAX_QUEUE_WAIT_US = 600_000_000
# Searches queued in a model at most; past it Triton refuses one at once ("Exceeds maximum
# queue size": the client's TritonQueueFull, the API's 503). Each API replica bounds its own
# embeddings in flight (PHOTOSEARCH_API__MAX_EMBEDS_IN_FLIGHT, 16); this bounds what many
# replicas together queue in one Triton: 64 is under half a second of a CPU's text encoder,
# and a GPU's few milliseconds. Indexing batches are bounded by the indexer's own queue.
SEARCH_QUEUE_MAX = 64


@dataclass(frozen=True)
class BatchingOptions:
    """How each model batches and runs; the text side trades a little delay for batching."""

    text_queue_delay_us: int = 5_000
    image_queue_delay_us: int = 50_000
    ort_threads: int = 0
    instances: int = 1
    # Two text instances, whatever the target: Triton 2.51's dynamic batcher wakes on a new
    # request only if an instance is free then, and not when an execution ends; with one
    # instance a query that arrives as the previous one finishes sleeps out the batcher's
    # 500 ms idle wait (6.5% of back-to-back single queries here, p99 523 ms; with two, none
    # of 600). The image side runs batches that fill its instance anyway.
    text_instances: int = 2
    # One onnxruntime thread per text instance: a query is a few milliseconds of small ops,
    # and splitting each op over two threads that block between ops (spinning is off, so
    # that idle sessions leave the cores to the rest) cost more than it saved. Two instances
    # of one thread each ran 100 int8 queries/s at p99 30 ms where two of all cores took
    # 145 ms on these 2 cores.
    text_ort_threads: int = 1
    tensorrt: bool = True
    trt_cache_dir: str = "/tmp/triton-trt-cache"

    def __post_init__(self) -> None:
        if not 0 <= self.text_queue_delay_us <= MAX_TEXT_QUEUE_DELAY_US:
            raise ValueError(
                f"text queue delay must be 0..{MAX_TEXT_QUEUE_DELAY_US} us "
                f"(the design asks for under 10 ms), got {self.text_queue_delay_us}"
            )
        if (
            self.image_queue_delay_us < 0
            or min(self.ort_threads, self.text_ort_threads) < 0
            or min(self.instances, self.text_instances) < 1
        ):
            raise ValueError("queue delays and thread counts are >= 0, instances >= 1")


@dataclass(frozen=True)
class Shapes:
    """Per-request tensor shapes; -1 where the served versions disagree."""

    image_size: int
    embedding_dim: int
    context_length: int
    # The text input's length: 0 where every version takes any length up to its context
    # (causal towers), that length where every version takes exactly it (fixed-length
    # graphs), -1 where they differ. A warmup length every version takes; -1: none.
    text_length: int = 0
    text_warmup_length: int = WARMUP_TEXT_LENGTH


def _param(value: str) -> mc.ModelParameter:
    return mc.ModelParameter(string_value=value)


def _base(
    name: str, target: Target, opts: BatchingOptions, instances: int, threads: int
) -> mc.ModelConfig:
    """Both targets run model/python_backend/model.py (onnxruntime on the best provider).

    The GPU target too, rather than Triton's onnxruntime backend: that one takes one set of
    TensorRT options for every version of a model, and onnxruntime names a cached engine by
    the file name and the graph, not the weights, so a version N+1 of the same architecture
    would run version N's engine. The python backend gives each version its own cache and
    precision (tensorrt_options there).
    """
    config = mc.ModelConfig(name=name, max_batch_size=MAX_BATCH_SIZE, backend="python")
    # Every exported version serves: a reindex embeds with N+1 while searches still use N.
    config.version_policy.all.SetInParent()
    kind = mc.ModelInstanceGroup.KIND_CPU if target == "cpu" else mc.ModelInstanceGroup.KIND_GPU
    config.instance_group.add(kind=kind, count=instances)
    config.parameters["intra_op_thread_count"].CopyFrom(_param(str(threads)))
    if target == "gpu":
        config.parameters["tensorrt"].CopyFrom(_param("1" if opts.tensorrt else "0"))
    return config


def _scheduling(config: mc.ModelConfig) -> None:
    """Searches ahead of indexing, and no work for callers that have given up.

    Both sides share each model's instances: with two priority levels a search queued behind
    indexing batches is served first (it still waits for the batch that is running). A
    request with no priority gets the low one. Each client passes its remaining deadline as
    the request's timeout; one still queued past it is rejected ("Request timeout expired")
    instead of being computed for nobody, which sheds load under overload.
    """
    batching = config.dynamic_batching
    batching.priority_levels = max(Priority)
    batching.default_priority_level = Priority.INDEXING
    policy = batching.default_queue_policy
    policy.timeout_action = mc.ModelQueuePolicy.REJECT
    policy.default_timeout_microseconds = MAX_QUEUE_WAIT_US
    policy.allow_timeout_override = True
    # The same policy named per level: Triton then keeps each level's queue for the model's
    # life instead of creating and erasing it as it fills and empties (Triton 2.51 crashed
    # once with SIGSEGV under our soak's load with erasable queues; never with fixed ones).
    for level in Priority:
        batching.priority_queue_policy[level].CopyFrom(policy)
    batching.priority_queue_policy[Priority.SEARCH].max_queue_size = SEARCH_QUEUE_MAX


def _tensorrt(config: mc.ModelConfig, opts: BatchingOptions, profile: tuple[str, str, str]) -> None:
    """TensorRT's options that every version shares; its precision and engine folder are each
    version's own (the python backend reads the version's manifest)."""
    for key, value in {
        "trt_cache_dir": opts.trt_cache_dir,
        "trt_max_workspace_size": str(4 << 30),
        "trt_profile_min_shapes": profile[0],
        "trt_profile_opt_shapes": profile[1],
        "trt_profile_max_shapes": profile[2],
    }.items():
        config.parameters[key].CopyFrom(_param(value))


def image_config(target: Target, shapes: Shapes, opts: BatchingOptions) -> mc.ModelConfig:
    """The throughput side: large preferred batches and a long queue delay."""
    config = _base(IMAGE_MODEL, target, opts, opts.instances, opts.ort_threads)
    size = shapes.image_size
    config.input.add(name=IMAGE_INPUT, data_type=mc.TYPE_UINT8, dims=[size, size, 3])
    config.output.add(name=IMAGE_OUTPUT, data_type=mc.TYPE_FP32, dims=[shapes.embedding_dim])
    config.dynamic_batching.preferred_batch_size.extend(IMAGE_PREFERRED_BATCHES)
    config.dynamic_batching.max_queue_delay_microseconds = opts.image_queue_delay_us
    _scheduling(config)
    if size > 0:  # a warmup needs concrete shapes
        warm = config.model_warmup.add(name="warmup", batch_size=1)
        warm.inputs[IMAGE_INPUT].CopyFrom(
            mc.ModelWarmup.Input(data_type=mc.TYPE_UINT8, dims=[size, size, 3], zero_data=True)
        )
    if target == "gpu" and opts.tensorrt and size > 0:
        shape = f"{size}x{size}x3"
        _tensorrt(
            config,
            opts,
            (f"{IMAGE_INPUT}:1x{shape}", f"{IMAGE_INPUT}:32x{shape}", f"{IMAGE_INPUT}:64x{shape}"),
        )
    return config


def text_config(target: Target, shapes: Shapes, opts: BatchingOptions) -> mc.ModelConfig:
    """The latency side: the queue delay bounds what batching may add to a search."""
    config = _base(TEXT_MODEL, target, opts, opts.text_instances, opts.text_ort_threads)
    fixed = shapes.text_length > 0
    dims = [shapes.text_length] if fixed else [-1]
    text_input = config.input.add(name=TEXT_INPUT, data_type=mc.TYPE_INT64, dims=dims)
    if not fixed:
        # The python backend pads each batch to its longest request itself, so requests
        # of different lengths can share one execution (a fixed-length version refuses
        # other lengths there: its padding is the client's).
        text_input.allow_ragged_batch = True
    config.output.add(name=TEXT_OUTPUT, data_type=mc.TYPE_FP32, dims=[shapes.embedding_dim])
    config.dynamic_batching.max_queue_delay_microseconds = opts.text_queue_delay_us
    _scheduling(config)
    if shapes.text_warmup_length > 0:
        warm = config.model_warmup.add(name="warmup", batch_size=1)
        warm.inputs[TEXT_INPUT].CopyFrom(
            mc.ModelWarmup.Input(
                data_type=mc.TYPE_INT64, dims=[shapes.text_warmup_length], zero_data=True
            )
        )
    # Optimization profiles need concrete lengths: not where versions disagree (-1).
    if target == "gpu" and opts.tensorrt and shapes.text_length >= 0 and shapes.context_length > 0:
        ctx = shapes.context_length
        short, typical = (ctx, ctx) if fixed else (2, 16)
        _tensorrt(
            config,
            opts,
            (
                f"{TEXT_INPUT}:1x{short}",
                f"{TEXT_INPUT}:8x{typical}",
                f"{TEXT_INPUT}:{MAX_BATCH_SIZE}x{ctx}",
            ),
        )
    return config


def render(config: mc.ModelConfig) -> str:
    """The config as Triton reads it from config.pbtxt."""
    return str(text_format.MessageToString(config))


def parse(text: str) -> mc.ModelConfig:
    """Parse a config.pbtxt with Triton's schema (raises on an unknown field or bad value)."""
    return text_format.Parse(text, mc.ModelConfig())
