"""Host time per step of loopnest's call plan on CUDA, beside eager and Inductor per call."""
import sys, time, torch
sys.path.insert(0, 'bench')
from model_zoo import instantiate
import loopnest.runtime.compiled as rc
torch._dynamo.config.recompile_limit = 64

def host_us(fn, n=200):
    for _ in range(10): fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n): fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return best

for name in sys.argv[1:]:
    model, args = instantiate(name, 'cuda')
    torch._dynamo.reset()
    captured = []
    orig = rc.CallPlan.run
    def cap(self, a, p):
        captured.append((self, list(a))); return orig(self, a, p)
    with torch.no_grad():
        f = torch.compile(model, backend='loopnest', options={'backend': 'triton', 'tune': 'off'})
        g = torch.compile(model)
        f(*args); g(*args)
        rc.CallPlan.run = cap; f(*args); rc.CallPlan.run = orig
        plan, a = captured[0]
        print(f"{name}: eager {host_us(lambda: model(*args)):.1f} us, inductor {host_us(lambda: g(*args)):.1f}, "
              f"loopnest {host_us(lambda: f(*args)):.1f}, plan.run {host_us(lambda: plan.run(a, False)):.1f}")
        B = dict(zip(plan.inputs, a))
        for nm, sizes, strides, dtype, fill in plan.allocations: B[nm] = plan.empty(sizes, strides, dtype)
        if plan.views:
            arena = plan.empty((plan.arena,), (1,), torch.uint8)
            for nm, dtype, sizes, strides, offset, fill in plan.views:
                B[nm] = rc._reinterpret_tensor(arena.view(dtype), sizes, strides, offset)
        for s in plan.steps: s(B)
        total = 0
        for s in plan.steps:
            us = host_us(lambda: s(B)); total += us
            print(f"   {getattr(s, 'name', type(s).__name__):50s} {us:7.1f} us")
        print(f"   sum of steps {total:.1f} us")
        x = torch.empty(1, device='cuda')
        print(f"   torch.empty_strided cuda {host_us(lambda: torch.empty_strided((4,), (1,), device='cuda')):.2f} us; "
              f"current_device {host_us(lambda: torch.cuda.current_device(), 2000):.2f}; "
              f"_cuda_getDevice {host_us(lambda: torch._C._cuda_getDevice(), 2000):.2f}")
