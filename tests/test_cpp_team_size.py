"""How many threads a C++ kernel's parallel region wakes (``KernelWriter._team_size``): one per
PARALLEL_MIN_WORK elements of work, within OpenMP's threads, so that small kernels on many-core
machines do not pay for a team they cannot use."""
import pytest
import torch

import loopnest as ln
from loopnest.backends.cpp.codegen import PARALLEL_MIN_WORK, generate
from loopnest.backends.cpp.params import CppConfig, MAX_THREADS
from test_backends import kernels_of, softmax


def source_of(outputs, inputs, config=CppConfig()) -> str:
    (kernel,) = kernels_of(outputs, inputs)
    return generate(kernel, config)


def pragmas(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "#pragma omp parallel" in line]


@pytest.mark.parametrize("elements, team", [(PARALLEL_MIN_WORK, 1), (PARALLEL_MIN_WORK + 1, 2),
                                            (5 * PARALLEL_MIN_WORK - 7, 5)])
def test_known_work_wakes_one_thread_per_grain(elements, team):
    x = ln.placeholder("x", (elements,), ln.float32)
    (pragma,) = pragmas(source_of([x * 2.0], [x]))
    assert f"num_threads(std::min(omp_get_max_threads(), {team}))" in pragma


def test_small_work_stays_on_one_thread_and_huge_work_takes_every_core():
    small = ln.placeholder("s", (PARALLEL_MIN_WORK - 1,), ln.float32)
    assert all("num_threads" not in p for p in pragmas(source_of([small * 2.0], [small])))
    huge = ln.placeholder("h", (MAX_THREADS, PARALLEL_MIN_WORK), ln.float32)
    assert all("num_threads" not in p and "if(" not in p for p in pragmas(source_of([huge * 2.0], [huge])))


def test_a_configured_thread_count_is_kept():
    x = ln.placeholder("x", (3 * PARALLEL_MIN_WORK,), ln.float32)
    (pragma,) = pragmas(source_of([x * 2.0], [x], CppConfig(threads=1)))
    assert "num_threads(1)" in pragma and "omp_get_max_threads" not in pragma


def test_symbolic_work_sizes_its_team_at_run_time_and_computes_what_eager_does():
    x = ln.placeholder("x", ("N", 640), ln.float32)
    out = softmax(x)
    assert all("omp_get_max_threads(), 1 + ((" in p for p in pragmas(source_of([out], [x])))
    f = ln.compile(out, backend="cpp")
    threads = torch.get_num_threads()
    try:
        for n_threads in (1, 2):
            torch.set_num_threads(n_threads)
            for rows in (1, 51, 52, 300):  # 51 x 640 is one grain, 52 x 640 two
                a = torch.randn(rows, 640)
                torch.testing.assert_close(f(a), torch.softmax(a, -1))
    finally:
        torch.set_num_threads(threads)
