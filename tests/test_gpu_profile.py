"""The GPU check's reading of a step's profile (benchmarks/gpu_profile.py) and the floor it sets
under Muon's step (benchmarks/gpu_optim.py): kernels of the H100 check sort into the kinds of
work they do, annotation ranges are not counted twice, the kinds add up to the profiled time,
and the Newton-Schulz FLOP count is what torch's FLOP counter counts."""

from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lmlab.train.optim import orthogonalised
from tests.benchmark_module import load_benchmark

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


@pytest.fixture(scope="module")
def profile():
    return load_benchmark("gpu_profile")


# Kernel names as the H100 check recorded them (benchmarks/results/gpu_check_h100.json).
@pytest.mark.parametrize("name, kind", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "products"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64", "attention"),
    ("triton_per_fused__to_copy_add_native_layer_norm_backward_view_9",
     "compiled element-wise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
     "FusedOptimizerTensorListMetadata<4>, at::native::FusedAdamMathFunctor<float,",
     "optimizer"),
    ("Memcpy HtoD (Pageable -> Device)", "copies and casts"),
    ("triton_poi_fused__scaled_dot_product_efficient_attention__to_copy_add_cos_mul_0",
     "compiled element-wise"),
    ("triton_tem_fused_addmm_0", "products"),
    ("triton_tem_fused_flex_attention_0", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("aten::addmm", "products"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl", "other"),
])
def test_kernels_sort_into_the_work_they_do(profile, name, kind):
    assert profile.kernel_kind(name) == kind


def test_annotation_ranges_on_the_device_are_not_counted_again(profile):
    def event(key, device_type, own, annotation=False):
        return SimpleNamespace(key=key, device_type=device_type, self_device_time_total=own,
                               self_cpu_time_total=own, is_user_annotation=annotation)

    events = [event("nvjet_gemm", CUDA, 300.0), event("multi_tensor_apply_kernel", CUDA, 100.0),
              event("Optimizer.step#AdamW.step", CUDA, 100.0, annotation=True),
              event("Optimizer.step#AdamW.step", CPU, 20.0, annotation=True),
              event("aten::mm", CPU, 5.0)]
    assert profile.own_times(events, on_gpu=True) == {"nvjet_gemm": 300.0,
                                                      "multi_tensor_apply_kernel": 100.0}
    assert set(profile.own_times(events, on_gpu=False)) == {"nvjet_gemm",
                                                            "multi_tensor_apply_kernel",
                                                            "Optimizer.step#AdamW.step",
                                                            "aten::mm"}


def test_a_steps_kinds_add_up_to_its_profiled_time(profile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64))
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(128, 64)

    def step():
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    step()
    result = profile.step_profile(step, torch.device("cpu"), steps=2, count=5)
    kinds = result["ms_per_step_by_kind"]
    assert kinds["products"] > 0 and kinds["optimizer"] > 0
    assert list(kinds.values()) == sorted(kinds.values(), reverse=True)
    top = result["top_kernels"]
    assert len(top) == 5 and 0 < sum(k["share"] for k in top) <= 1 + 1e-9
    # each kernel's ms over its share is the same total: the kinds' sum
    total = top[0]["ms_per_step"] / top[0]["share"]
    assert sum(kinds.values()) == pytest.approx(total)


def test_the_newton_schulz_floor_counts_what_torch_counts():
    optim = load_benchmark("gpu_optim")
    stacks = [torch.randn(3, 48, 160), torch.randn(2, 96, 32)]  # wide and tall
    with FlopCounterMode(display=False) as counter:
        for stack in stacks:
            orthogonalised(stack, (3.4445, -4.775, 2.0315), 5, 1e-7)
    shapes = [s.shape[1:] for s in stacks for _ in range(s.shape[0])]
    assert optim.newton_schulz_flops(shapes, 5) == counter.get_total_flops()
