"""The model path: open_clip export to ONNX, the Triton repository, a local Triton server."""
