"""A GGUF model as data: configuration from metadata, tensors, tokenizer, synthetic files.

Nothing here runs the forward pass (that is ``tracekit/runner/``); it imports only the kernels
and the quant table below it (tests/test_layout.py).
"""
