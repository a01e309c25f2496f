"""The load predictor: features, a small numpy model, baselines, ONNX export and runtime."""
