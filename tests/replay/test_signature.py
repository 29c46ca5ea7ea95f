"""Tests of signatures and bindings (docs/replay-invariants.md, invariants 7-12)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from lucid_yolo.replay import Binding, RetireReason, TensorSpec, signature
from lucid_yolo.replay.signature import UnsupportedInputError, backend_flags, input_specs


def test_tensor_spec_distinguishes_stride_dtype_and_requires_grad() -> None:
    x = torch.zeros(2, 3)
    specs = {
        TensorSpec.of(x),
        TensorSpec.of(x.t().contiguous().t()),
        TensorSpec.of(x.half()),
        TensorSpec.of(x.clone().requires_grad_()),
    }
    assert len(specs) == 4


def test_tensor_spec_empty_has_exact_layout() -> None:
    x = torch.zeros(2, 3).t()
    y = TensorSpec.of(x).empty()
    assert y.stride() == x.stride()
    assert y.shape == x.shape


def test_input_specs_keep_scalars_and_reject_containers() -> None:
    assert input_specs([1, 2.5, None])[0] == 1
    with pytest.raises(UnsupportedInputError, match="argument 0 is a 'dict'"):
        input_specs([{}])


def test_signature_changes_with_backend_flags() -> None:
    binding = Binding([nn.Linear(2, 2)])
    before = binding.signature([torch.zeros(1, 2)], "cpu")
    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = not saved
    try:
        after = binding.signature([torch.zeros(1, 2)], "cpu")
    finally:
        torch.backends.cudnn.deterministic = saved
    assert before != after
    assert backend_flags() == before.backend


def test_signature_changes_with_grad_requirement_of_parameters() -> None:
    net = nn.Linear(2, 2)
    binding = Binding([net])
    before = binding.signature([torch.zeros(1, 2)], "cpu")
    net.bias.requires_grad_(False)
    assert binding.signature([torch.zeros(1, 2)], "cpu") != before


def test_binding_check_passes_for_untouched_module() -> None:
    assert Binding([nn.Sequential(nn.Linear(2, 2), nn.ReLU())]).check() is None


def test_binding_check_detects_instance_forward_override() -> None:
    net = nn.Sequential(nn.Linear(2, 2))
    binding = Binding([net])
    net[0].forward = lambda x: x  # type: ignore[method-assign]
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.FORWARD_ALTERED


def test_binding_check_detects_buffer_replacement() -> None:
    net = nn.BatchNorm1d(2)
    binding = Binding([net])
    net.running_mean = torch.zeros(2)
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.PARAMETER_REPLACED


def test_binding_collects_shared_parameters_once() -> None:
    shared = nn.Linear(2, 2)
    assert len(Binding([nn.Sequential(shared, shared)]).parameters) == 2


# -- the private torch internals signature.py reads ------------------------------------------
# A torch upgrade that renames one of them would make the signature blind to hooks or replaced
# tensors, silently. Each test registers through the public API and checks the private place.


def _internal_message(internal: str) -> str:
    return (
        f"torch {torch.__version__}: {internal} no longer holds what replay/signature.py reads; "
        "update the signature's reads (docs/replay-invariants.md, invariants 10-11)"
    )


_GLOBAL_REGISTRARS = {
    "_global_forward_hooks": nn.modules.module.register_module_forward_hook,
    "_global_forward_pre_hooks": nn.modules.module.register_module_forward_pre_hook,
    "_global_backward_hooks": nn.modules.module.register_module_full_backward_hook,
    "_global_backward_pre_hooks": nn.modules.module.register_module_full_backward_pre_hook,
}


@pytest.mark.parametrize("name", signature._GLOBAL_HOOK_DICTS)
def test_torch_global_module_hook_dict_is_where_signature_reads(name: str) -> None:
    internal = f"torch.nn.modules.module.{name}"
    assert name in _GLOBAL_REGISTRARS, _internal_message(internal)
    handle = _GLOBAL_REGISTRARS[name](lambda *args: None)
    try:
        assert len(getattr(nn.modules.module, name, ())) > 0, _internal_message(internal)
    finally:
        handle.remove()


@pytest.mark.parametrize(
    ("key", "register"),
    [
        ("_forward_hooks", lambda m: m.register_forward_hook(lambda *args: None)),
        ("_forward_pre_hooks", lambda m: m.register_forward_pre_hook(lambda *args: None)),
        ("_backward_hooks", lambda m: m.register_full_backward_hook(lambda *args: None)),
        ("_backward_pre_hooks", lambda m: m.register_full_backward_pre_hook(lambda *args: None)),
    ],
)
def test_torch_module_hook_dict_is_where_signature_reads(
    key: str, register: Callable[[nn.Module], object]
) -> None:
    module = nn.Linear(2, 2)
    assert not signature._has_hooks(vars(module))
    register(module)
    assert len(vars(module).get(key, ())) > 0, _internal_message(f"Module.__dict__[{key!r}]")
    assert signature._has_hooks(vars(module))


@pytest.mark.parametrize(
    ("attribute", "register"),
    [
        ("_backward_hooks", lambda p: p.register_hook(lambda g: g)),
        ("_post_accumulate_grad_hooks", lambda p: p.register_post_accumulate_grad_hook(print)),
    ],
)
def test_torch_tensor_hook_attribute_is_where_signature_reads(
    attribute: str, register: Callable[[nn.Parameter], object]
) -> None:
    parameter = nn.Parameter(torch.ones(2))
    assert not signature._has_tensor_hooks(parameter)
    register(parameter)
    assert getattr(parameter, attribute, None), _internal_message(f"Tensor.{attribute}")
    assert signature._has_tensor_hooks(parameter)


def test_torch_module_registries_are_where_binding_reads() -> None:
    module = nn.BatchNorm1d(2)
    registry = vars(module)
    assert set(registry.get("_parameters", {})) == {"weight", "bias"}, _internal_message(
        "Module.__dict__['_parameters']"
    )
    assert set(registry.get("_buffers", {})) == {
        "running_mean",
        "running_var",
        "num_batches_tracked",
    }, _internal_message("Module.__dict__['_buffers']")
    module.eval()
    assert registry.get("training") is False, _internal_message("Module.__dict__['training']")


def test_binding_check_detects_a_replaced_submodule() -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    binding = Binding([net])
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    assert converted is net  # the root stays, its BatchNorm child is a new SyncBatchNorm
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.FORWARD_ALTERED
    assert "SyncBatchNorm.convert_sync_batchnorm" in problem[1]


def _retire_reason(binding: Binding) -> RetireReason | None:
    problem = binding.check()
    return None if problem is None else problem[0]


def test_binding_check_detects_parameter_replacement() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    binding = Binding([net])
    net[0].weight = nn.Parameter(net[0].weight.detach().clone())
    assert _retire_reason(binding) is RetireReason.PARAMETER_REPLACED


def test_binding_check_detects_a_newly_registered_parameter() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    binding = Binding([net])
    net[1].register_parameter("scale", nn.Parameter(torch.ones(1)))
    assert _retire_reason(binding) is RetireReason.PARAMETER_REPLACED


def test_binding_check_detects_a_parameter_whose_storage_moved() -> None:
    net = nn.Linear(2, 2)
    binding = Binding([net])
    net.weight.data = torch.zeros(2, 2)
    assert _retire_reason(binding) is RetireReason.PARAMETER_REPLACED


def test_binding_check_detects_a_module_hook_deep_in_the_tree() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
    binding = Binding([net])
    net[1][1].register_forward_pre_hook(lambda *args: None)
    assert _retire_reason(binding) is RetireReason.MODULE_HOOKS


def test_binding_check_detects_a_tensor_hook_on_the_last_parameter() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    binding = Binding([net])
    net[1].bias.register_post_accumulate_grad_hook(print)
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.PARAMETER_HOOKS
    assert "[3]" in problem[1]


def test_binding_check_detects_a_child_swapped_between_parents() -> None:
    left, right = nn.Sequential(nn.ReLU()), nn.Sequential()
    net = nn.Sequential(left, right)
    binding = Binding([net])
    right.append(left[0])
    del left[0]
    assert _retire_reason(binding) is RetireReason.FORWARD_ALTERED


def test_binding_check_detects_a_forward_replaced_on_the_class() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    net = nn.Sequential(Scaled())
    binding = Binding([net])
    Scaled.forward = lambda self, x: x * 3  # type: ignore[method-assign]
    problem = binding.check()
    assert problem is not None
    assert problem[0] is RetireReason.FORWARD_ALTERED
    assert "Scaled" in problem[1]
