"""Every generated config.pbtxt parses with Triton's own protobuf schema and says what we mean."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2 as mc

from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL, Priority
from core.settings import Settings
from model.triton_config import (
    MAX_QUEUE_WAIT_US,
    SEARCH_QUEUE_MAX,
    BatchingOptions,
    Shapes,
    Target,
    image_config,
    parse,
    render,
    text_config,
)

SHAPES = Shapes(image_size=224, embedding_dim=512, context_length=77)


def test_repository_configs_parse_with_tritons_schema(repository: Path) -> None:
    image = parse((repository / IMAGE_MODEL / "config.pbtxt").read_text())
    text = parse((repository / TEXT_MODEL / "config.pbtxt").read_text())
    assert (image.name, image.backend, text.name, text.backend) == (
        IMAGE_MODEL,
        "python",
        TEXT_MODEL,
        "python",
    )
    assert image.version_policy.HasField("all") and text.version_policy.HasField("all")
    assert list(image.input[0].dims) == [32, 32, 3] and image.input[0].data_type == mc.TYPE_UINT8
    assert list(text.input[0].dims) == [-1] and text.input[0].allow_ragged_batch
    assert text.dynamic_batching.max_queue_delay_microseconds == 5000
    assert len(image.model_warmup) == 1 and len(text.model_warmup) == 1


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_both_targets_round_trip_through_the_schema(target: Target) -> None:
    opts = BatchingOptions(text_queue_delay_us=8000, image_queue_delay_us=100_000)
    for config in (image_config(target, SHAPES, opts), text_config(target, SHAPES, opts)):
        parsed = parse(render(config))
        assert parsed == config
        assert parsed.max_batch_size == 64
        assert parsed.HasField("dynamic_batching")
        assert len(parsed.model_warmup) == 1


def test_gpu_target_runs_the_python_backend_on_gpu_with_tensorrt_options() -> None:
    config = parse(render(text_config("gpu", SHAPES, BatchingOptions(trt_cache_dir="/cache"))))
    # Not Triton's onnxruntime backend: its TensorRT options, engine cache included, are one
    # set for every version (tests/unit/model/test_python_backend.py: one cache per version).
    assert config.backend == "python" and not config.platform
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["tensorrt"] == "1" and params["trt_cache_dir"] == "/cache"
    assert params["trt_profile_max_shapes"] == "input_ids:64x77"
    assert "precision_mode" not in params  # each version's own, from its manifest
    assert config.input[0].allow_ragged_batch  # the python backend pads a batch itself
    no_trt = parse(render(image_config("gpu", SHAPES, BatchingOptions(tensorrt=False))))
    assert no_trt.parameters["tensorrt"].string_value == "0"
    assert "trt_profile_max_shapes" not in no_trt.parameters


def test_image_side_batches_for_throughput_and_text_side_for_latency() -> None:
    opts = BatchingOptions()
    image, text = image_config("cpu", SHAPES, opts), text_config("cpu", SHAPES, opts)
    assert list(image.dynamic_batching.preferred_batch_size) == [16, 32, 64]
    assert (
        image.dynamic_batching.max_queue_delay_microseconds
        > text.dynamic_batching.max_queue_delay_microseconds
    )


def test_text_queue_delay_above_10_ms_is_refused() -> None:
    with pytest.raises(ValueError, match="under 10 ms"):
        BatchingOptions(text_queue_delay_us=10_001)
    with pytest.raises(ValidationError):
        Settings(model={"text_queue_delay_us": 20_000})
    assert BatchingOptions(text_queue_delay_us=10_000).text_queue_delay_us == 10_000


def test_versions_of_different_sizes_get_variable_dims_and_no_image_warmup() -> None:
    mixed = Shapes(image_size=-1, embedding_dim=-1, context_length=77)
    image = parse(render(image_config("cpu", mixed, BatchingOptions())))
    assert list(image.input[0].dims) == [-1, -1, 3]
    assert list(image.output[0].dims) == [-1]
    assert len(image.model_warmup) == 0


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_searches_are_served_ahead_of_indexing_on_both_models(target: Target) -> None:
    for config in (
        parse(render(image_config(target, SHAPES, BatchingOptions()))),
        parse(render(text_config(target, SHAPES, BatchingOptions()))),
    ):
        batching = config.dynamic_batching
        # Level 1 is served first; the query API asks for it, the indexer for level 2, and a
        # caller that says nothing waits with the indexer.
        assert batching.priority_levels == 2
        assert (Priority.SEARCH, Priority.INDEXING) == (1, 2)
        assert batching.default_priority_level == Priority.INDEXING


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_request_still_queued_past_its_own_timeout_is_rejected(target: Target) -> None:
    for config in (
        parse(render(image_config(target, SHAPES, BatchingOptions()))),
        parse(render(text_config(target, SHAPES, BatchingOptions()))),
    ):
        policy = config.dynamic_batching.default_queue_policy
        assert policy.timeout_action == mc.ModelQueuePolicy.REJECT
        # Triton applies a request's timeout only below the default: the default is a ceiling
        # above every client deadline (the indexer's 60 s), so each caller's own one applies.
        assert policy.allow_timeout_override
        assert policy.default_timeout_microseconds == MAX_QUEUE_WAIT_US
        assert MAX_QUEUE_WAIT_US > Settings().triton.image_timeout_s * 1e6
        assert policy.max_queue_size == 0  # no size limit: the deadlines bound the queue
        # The same policy for each level, named, so Triton keeps each level's queue; the
        # searches' queue is bounded too, so that an overload is refused at once.
        levels = config.dynamic_batching.priority_queue_policy
        assert sorted(levels) == [Priority.SEARCH, Priority.INDEXING]
        assert levels[Priority.INDEXING] == policy
        bounded = mc.ModelQueuePolicy()
        bounded.CopyFrom(policy)
        bounded.max_queue_size = SEARCH_QUEUE_MAX
        assert levels[Priority.SEARCH] == bounded


def test_the_exported_repository_carries_the_priorities_and_the_queue_policy(
    repository: Path,
) -> None:
    for name in (IMAGE_MODEL, TEXT_MODEL):
        batching = parse((repository / name / "config.pbtxt").read_text()).dynamic_batching
        assert batching.priority_levels == 2
        assert batching.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT
        assert batching.default_queue_policy.allow_timeout_override


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_the_text_model_runs_two_instances_so_no_query_waits_out_the_batchers_idle_sleep(
    target: Target,
) -> None:
    # One instance lets a query that arrives as an execution ends wait 500 ms (triton_config).
    text = parse(render(text_config(target, SHAPES, BatchingOptions())))
    image = parse(render(image_config(target, SHAPES, BatchingOptions())))
    assert [g.count for g in text.instance_group] == [2]
    assert [g.count for g in image.instance_group] == [1]
    # One onnxruntime thread per text instance; the image model's batches take every core.
    assert text.parameters["intra_op_thread_count"].string_value == "1"
    assert image.parameters["intra_op_thread_count"].string_value == "0"
    custom = BatchingOptions(instances=3, text_instances=1)
    assert parse(render(text_config(target, SHAPES, custom))).instance_group[0].count == 1
    assert parse(render(image_config(target, SHAPES, custom))).instance_group[0].count == 3
