"""Whole models on the GPU: eager vs Inductor vs loopnest (Triton), with and without CUDA graphs.

Columns: Inductor's default and reduce-overhead modes; loopnest's defaults (``cudagraphs="auto"``:
small static graphs replayed, outputs copied out), without CUDA graphs, and with them always
(``cudagraphs=True``, reduce-overhead semantics).

Run on the device: python bench/gpu_models.py [--rounds N] [--train] [MODEL ...]
(``--train``: training steps; loopnest's defaults replay plain training graphs with their outputs
copied out, so ``cudagraphs=True`` adds nothing there and has no column.)
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
                  "loopnest_nocg": {"backend": "triton", "tune": "off", "cudagraphs": False},
                  "loopnest_cg": {"backend": "triton", "tune": "off", "cudagraphs": True}},
         torch.cuda.get_device_name, {"inductor": {}, "inductor_ro": {"mode": "reduce-overhead"}},
         train_variants={"loopnest": {"backend": "triton", "tune": "off"},
                         "loopnest_nocg": {"backend": "triton", "tune": "off", "cudagraphs": False}})
