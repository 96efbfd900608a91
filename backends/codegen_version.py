"""Version of the code generators, recorded with every tuning result.

``CODEGEN_VERSION`` must be bumped by every change that alters generated code (Triton or C++
source, launch parameters, how a config is interpreted). Winners measured under another version
are then found stale by the tuning DB: kept as warm starts, never served as measured.
"""

CODEGEN_VERSION = 7
