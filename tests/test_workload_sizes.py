"""Size classes of the built-in workloads: every workload has each class, and its cache-resident
inputs hold 2-8 MB (they fit in L2/L3, the point of the class)."""
import pytest

from loopnest.autotune.options import SIZE_CLASSES
from loopnest.autotune.workloads import WORKLOADS

MB = 1 << 20


def input_bytes(inputs) -> int:
    return sum(t.numel() * t.element_size() for t in inputs)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_size_class_and_cache_inputs_of_2_to_8_mb(name):
    w = WORKLOADS[name]
    assert set(w.sizes) == set(SIZE_CLASSES)
    cache = input_bytes(w.inputs("cache"))
    assert 2 * MB <= cache <= 8 * MB, f"{name}: cache-size inputs hold {cache / MB:.2f} MB"
    assert cache < input_bytes(w.inputs("cpu"))


def test_unknown_size_class_names_the_classes():
    with pytest.raises(ValueError, match="cache"):
        WORKLOADS["softmax"].inputs("l2")
