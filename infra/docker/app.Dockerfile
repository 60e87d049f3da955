# syntax=docker/dockerfile:1
# The API, the indexer worker and beat: one image, no torch, no open_clip, no onnxruntime
# (embedding is Triton's). The command picks the role: `api serve`, `worker`, `beat`.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core ./core
COPY photosearch ./photosearch
COPY indexer ./indexer
COPY query_api ./query_api
COPY model ./model
# The project's own wheel only: its dependencies come from the lock, below.
RUN pip wheel --no-cache-dir --wheel-dir /wheels . --no-deps

FROM python:3.11-slim-bookworm
# A fixed non-root uid, so Kubernetes' runAsNonRoot can check it and volumes can be owned by it.
RUN useradd --system --uid 10001 --gid 0 --home-dir /data --create-home photosearch
# Exactly the lock's packages (requirements/app.txt, written by `make lock`), each checked
# against its hash; then the project, which resolves nothing more.
COPY requirements/app.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels
USER 10001
ENV PHOTOSEARCH_DATA_DIR=/data \
    PHOTOSEARCH_MODEL__REPOSITORY=/models \
    PYTHONUNBUFFERED=1
WORKDIR /data
EXPOSE 8000 9464
ENTRYPOINT ["photosearch"]
CMD ["api", "serve", "--host", "0.0.0.0", "--port", "8000"]
