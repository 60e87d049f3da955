# syntax=docker/dockerfile:1
# Triton on a GPU (compose's `gpu` profile, infra/k8s): the NGC server with onnxruntime-gpu for
# the python-backend repository that `photosearch model export --target gpu` writes. Both
# targets run model/python_backend/model.py; this one picks TensorRT, then CUDA, then the CPU,
# with a TensorRT engine cache per model version and precision.
#
# What the versions rest on (read, not run: no GPU or Docker where this was written):
# - onnxruntime-gpu 1.23 from PyPI is built for CUDA 12 and cuDNN 9 (onnxruntime.ai, "CUDA
#   Execution Provider", Requirements: a build for CUDA 12.x runs on any CUDA 12.x by NVIDIA's
#   minor version compatibility; cuDNN 8 and 9 builds do not mix). Its CUDA provider links
#   libcudart.so.12, libcublas(Lt).so.12, libcufft.so.11, libcurand.so.10 and libcudnn.so.9
#   (readelf of the cp310 wheel), which this image has: NGC 24.10 is CUDA 12.6.2, cuDNN 9.5,
#   Python 3.10 (NVIDIA's release notes and support matrix).
# - Its TensorRT provider links libnvinfer.so.10 and libnvonnxparser.so.10: TensorRT 10.5
#   here, while onnxruntime builds against a newer 10.x (its TensorRT table: 1.22 with 10.9),
#   and TensorRT does not promise an older minor than the build's. Where the TensorRT session
#   fails, the python backend opens CUDA's instead and logs why (model.py, open_session).
FROM nvcr.io/nvidia/tritonserver:24.10-py3
# What the python backend imports beside Triton's own utilities, locked for this image's
# Python 3.10 at the versions the tests run (requirements/triton-gpu.txt, written by
# `make lock`), each package checked against its hash.
COPY requirements/triton-gpu.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
