"""How split_sync kernels of one row per program read their softmax partials and address their rows
(what keeps wide_softmax's kernel at 80 registers, three programs per H200 multiprocessor; see
``codegen._Generator._reduce_partials`` and ``emit.TritonEmitter.address``). The kernels' results
are checked on a GPU by test_triton_split.py; the interpreter runs split_sync as split."""
from loopnest.backends.triton import settings as triton_settings
from loopnest.backends.triton.codegen import generate
from loopnest.backends.triton.params import TritonConfig
from test_backends import log_softmax, softmax
from test_triton_split import _kernel

GPU = triton_settings.TritonSettings(interpret=False, debug=False)


def _source(fn, xblock, rblock, split, shape=(8, 4096)):
    cfg = TritonConfig(XBLOCK=xblock, RBLOCK=rblock, strategy="split_sync", SPLIT=split)
    return generate(_kernel(shape, fn), cfg, GPU).source


def test_one_row_reads_softmax_partials_as_vectors():
    source = _source(softmax, 1, 1024, 4)
    assert "acc0_part_max = tl.load(ws_acc0_max + ((pid // SPLIT) * SPLIT + svector)" in source
    assert "acc0_max = tl.reduce(acc0_part_max, 0, tl.standard._elementwise_max)" in source
    assert "(xindex * SPLIT + sindex)" not in source
    masked = _source(log_softmax, 1, 1024, 3, shape=(8, 3000))  # SPLIT 3 of SBLOCK 4: masked partials
    assert "svmask = svector < SPLIT" in masked and "mask=svmask, other=" in masked


def test_rows_of_several_programs_keep_tiled_partials():
    source = _source(softmax, 2, 1024, 4)
    assert "(xindex * SPLIT + sindex)" in source and "svector" not in source


def test_slices_of_one_block_address_rows_before_elements():
    source = _source(softmax, 1, 1024, 4)
    assert "tl.load(b_x + (xindex*4096) + (rindex)" in source
    assert "tl.store(b_buf5 + (xindex*4096) + (rindex), " in source
    looped = _source(softmax, 1, 256, 4)  # slices of 1024 in blocks of 256: one int32 offset
    assert "+ (xindex*4096) + (rindex)" not in looped and "(rindex + xindex*4096)" in looped
