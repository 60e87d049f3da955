# syntax=docker/dockerfile:1
# Triton without a GPU (compose's `cpu` profile): the NGC server with onnxruntime for the
# python-backend repository that `photosearch model export --target cpu` writes.
FROM nvcr.io/nvidia/tritonserver:24.10-py3
# What the python backend imports beside Triton's own utilities, locked for this image's
# Python 3.10 at the versions the tests run (requirements/triton-cpu.txt, written by
# `make lock`), each package checked against its hash.
COPY requirements/triton-cpu.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
