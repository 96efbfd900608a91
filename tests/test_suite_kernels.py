"""The ten suite workloads (autotune/workloads.py TEN) as users get them, through torch.compile and
ATen, on every backend at tiny sizes: how many kernels each becomes, no fallbacks, eager results."""
import pytest
import torch

from conftest import assert_close
from loopnest.autotune.workloads import TEN, WORKLOADS

pytestmark = [pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),  # Triton's interpreter
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")]

# The row losses and their mean reduce over different loops (each row, then all rows): the
# mean is a second kernel. Every other suite graph is one kernel, as with Inductor's C++ backend.
EXPECTED_KERNELS = {"logsumexp_ce": 2}


def flat(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("name", TEN)
def test_suite_graph_kernel_count_and_results(backend, name):
    workload = WORKLOADS[name]
    args = workload.inputs("tiny", backend.device)
    graphs = []
    torch._dynamo.reset()
    compiled = torch.compile(workload.fn, backend="loopnest",
                             options={"backend": backend.name, "tune": "off", "recorder": graphs.append})
    got = compiled(*args)
    kernels = [k.name for g in graphs for k in g.compiled.schedule.kernels]
    fallbacks = [f.op for g in graphs for f in g.program.fallbacks]
    assert len(kernels) == EXPECTED_KERNELS.get(name, 1) and not fallbacks, (kernels, fallbacks)
    for k, (g, w) in enumerate(zip(flat(got), flat(workload.fn(*args)), strict=True)):
        if w.dtype == torch.bfloat16:
            torch.testing.assert_close(g, w, atol=2e-2, rtol=1.6e-2)  # one bf16 rounding apart
        else:
            assert_close(g, w, f"{name} output {k}")
