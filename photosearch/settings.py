"""The one settings tree: PHOTOSEARCH_-prefixed environment variables, groups split by `__`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The design asks for a text queue delay under 10 ms; Triton's unit is microseconds.
MAX_TEXT_QUEUE_DELAY_US = 10_000


def _default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "photosearch"


class TritonSettings(BaseModel):
    """How the API and the workers reach Triton, and how `photosearch triton serve` starts it."""

    url: str = Field("127.0.0.1:8001", description="Triton gRPC endpoint (host:port).")
    text_timeout_s: float = Field(2.0, gt=0, description="Deadline of one text-embedding call.")
    image_timeout_s: float = Field(60.0, gt=0, description="Deadline of one image-batch call.")
    retries: int = Field(2, ge=0, le=10, description="Retries after a transient Triton error.")
    retry_backoff_s: float = Field(0.1, ge=0, description="First retry delay; doubles each retry.")
    http_port: int = Field(8003, description="Local server: HTTP port (8000 is the API's).")
    grpc_port: int = Field(8001, description="Local server: gRPC port.")
    metrics_port: int = Field(8002, description="Local server: Prometheus metrics port.")
    startup_timeout_s: float = Field(
        120.0, gt=0, description="Local server: wait this long for ready."
    )


class ModelSettings(BaseModel):
    """Where the exported model versions live and how Triton batches them."""

    repository: Path | None = Field(
        None, description="Triton model repository; default DATA_DIR/models."
    )
    text_queue_delay_us: int = Field(
        5_000,
        ge=0,
        le=MAX_TEXT_QUEUE_DELAY_US,
        description="Dynamic batching delay of the text model (latency side).",
    )
    image_queue_delay_us: int = Field(
        50_000, ge=0, description="Dynamic batching delay of the image model (throughput side)."
    )
    ort_threads: int = Field(
        0, ge=0, description="onnxruntime intra-op threads in the CPU target (0: all cores)."
    )
    text_pad_multiple: int = Field(
        8,
        ge=1,
        description="Text batches are padded to a multiple of this so requests share shapes.",
    )


class ImageSettings(BaseModel):
    """Limits on the images the client decodes."""

    max_pixels: int = Field(
        120_000_000, gt=0, description="Refuse images with more pixels (decompression bombs)."
    )
    max_bytes: int = Field(50 * 1024 * 1024, gt=0, description="Refuse larger encoded files.")


class Settings(BaseSettings):
    """Everything PhotoSearch reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix="PHOTOSEARCH_", env_nested_delimiter="__", extra="ignore"
    )

    data_dir: Path = Field(default_factory=_default_data_dir, description="Local state.")
    triton: TritonSettings = TritonSettings()
    model: ModelSettings = ModelSettings()
    images: ImageSettings = ImageSettings()

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        if self.model.repository is None:
            self.model.repository = self.data_dir / "models"
        return self

    @property
    def repository(self) -> Path:
        """The model repository, resolved against the data directory."""
        assert self.model.repository is not None  # filled by _derive_paths
        return self.model.repository


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
