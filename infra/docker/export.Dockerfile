# syntax=docker/dockerfile:1
# The one-shot model export: open_clip + torch (CPU build: exporting takes seconds, no GPU
# needed) write a model version into the shared Triton repository.
FROM python:3.11-slim-bookworm
# /models and /data/hf exist, owned by the user, so fresh named volumes mounted there are too.
RUN useradd --system --uid 10001 --gid 0 --home-dir /data --create-home photosearch \
    && mkdir -p /models /data/hf && chown 10001:0 /models /data/hf
WORKDIR /src
# Exactly the lock of ".[export]" with onnxruntime (requirements/export.txt, written by
# `make lock`), each package checked against its hash. Its torch==2.13.0+cpu, the CPU build,
# comes from PyTorch's CPU index: PyPI's build pulls several GB of CUDA libraries the export
# does not use.
COPY requirements/export.txt ./requirements/
RUN pip install --no-cache-dir --require-hashes --no-deps \
        --extra-index-url https://download.pytorch.org/whl/cpu -r requirements/export.txt
COPY pyproject.toml README.md ./
COPY core ./core
COPY photosearch ./photosearch
COPY indexer ./indexer
COPY query_api ./query_api
COPY model ./model
# This project, which resolves nothing more: the lock above holds what ".[export]" needs.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps ".[export]"
USER 10001
ENV PHOTOSEARCH_DATA_DIR=/data \
    PHOTOSEARCH_MODEL__REPOSITORY=/models \
    HF_HOME=/data/hf \
    PYTHONUNBUFFERED=1
WORKDIR /data
ENTRYPOINT ["photosearch"]
CMD ["model", "export", "--target", "gpu", "--precision", "fp16", "--fallback", "--repository", "/models"]
