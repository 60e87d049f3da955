# syntax=docker/dockerfile:1
# Triton without a GPU (compose's `cpu` profile): the NGC server with onnxruntime for the
# python-backend repository that `photosearch model export --target cpu` writes.
FROM nvcr.io/nvidia/tritonserver:24.10-py3
RUN pip install --no-cache-dir "onnxruntime==1.20.1" "numpy<2.3"
