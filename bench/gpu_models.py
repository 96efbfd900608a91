"""Whole models on the GPU: eager vs Inductor vs loopnest (Triton), with and without CUDA graphs.

Run on the device: python bench/gpu_models.py [--rounds N] [MODEL ...]
Code caches start empty, so the cold columns are cold compiles.
"""
import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cold-"))
os.environ.setdefault("LOOPNEST_CACHE_DIR", tempfile.mkdtemp(prefix="loopnest-cold-"))

import torch  # noqa: E402

from model_bench import main  # noqa: E402

if __name__ == "__main__":
    main("cuda", {"loopnest": {"backend": "triton", "tune": "off"},
                  "loopnest_cg": {"backend": "triton", "tune": "off", "cudagraphs": True}},
         torch.cuda.get_device_name)
