"""loopnest: a kernel compiler and autotuning service for PyTorch programs."""
