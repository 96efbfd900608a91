"""Models on the CPU with and without the row-order rewrite of ``lowering/row_order.py``, in one
process with interleaved calls (this host's noise moves separate processes by more than the
rewrite's gain).

Run: python bench/row_order_ab.py [MODEL ...] [--rounds N]; MODEL is a ``model_zoo`` name, or
``mha_L<length>`` for the mha block over (1024 // length, length, 256) inputs.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

from common import reexec_with_malloc_thresholds

reexec_with_malloc_thresholds()

import torch  # noqa: E402

from loopnest.lowering import row_order  # noqa: E402
from model_zoo import MODELS  # noqa: E402


def model_and_inputs(name: str):
    """The eval-mode model and its inputs."""
    if name.startswith("mha_L"):
        length = int(name[len("mha_L"):])
        return MODELS["mha"].build().eval(), (torch.randn(max(1, 1024 // length), length, 256),)
    m = MODELS[name]
    return m.build().eval(), m.inputs(torch.Generator().manual_seed(0), "cpu")


def compiled(model, args, find):
    """``model`` compiled by loopnest (C++) with ``row_order.find`` set to ``find`` while lowering."""
    saved, row_order.find = row_order.find, find
    try:
        fn = torch.compile(copy.deepcopy(model), backend="loopnest", options={"backend": "cpp"})
        fn(*args)
    finally:
        row_order.find = saved
    return fn


def main() -> None:
    """Print each variant's median µs per call and eager / variant."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=["mha", "transformer_encoder"])
    p.add_argument("--rounds", type=int, default=30)
    a = p.parse_args()
    print("| model | eager µs | without µs | with µs | eager / without | eager / with |\n|---|---|---|---|---|---|")
    with torch.no_grad():
        for name in a.models:
            model, args = model_and_inputs(name)
            fns = {"eager": model, "without": compiled(model, args, lambda node: None),
                   "with": compiled(model, args, row_order.find)}
            want = model(*args)
            for label, fn in fns.items():
                torch.testing.assert_close(fn(*args), want, rtol=1e-4, atol=1e-4, msg=label)
            times = {k: [] for k in fns}
            for _ in range(a.rounds):
                for label, fn in fns.items():
                    start = time.perf_counter()
                    for _ in range(5):
                        fn(*args)
                    times[label].append((time.perf_counter() - start) / 5 * 1e6)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"| {name} | {med['eager']:.0f} | {med['without']:.0f} | {med['with']:.0f} | "
                  f"{med['eager'] / med['without']:.3f} | {med['eager'] / med['with']:.3f} |")


if __name__ == "__main__":
    main()
