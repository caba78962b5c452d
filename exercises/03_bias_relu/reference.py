"""Exercise 03 reference: the op, the benchmark inputs and the traffic model."""
import torch


def reference(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """relu(x * scale + bias), written as a user would.

    In eager mode this is three kernels (mul, add, relu), each reading and writing a full
    [M, N] tensor: the "eager" baseline. fp16/bf16 compute in float32 and round once (as the
    kernels must); float32 and float64 stay as they are (`.to` is then a no-op), so the tests
    get a float64 expectation, and float64 gradients through autograd, by calling it on
    `.double()` inputs.
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    return torch.relu(x.to(compute) * scale + bias.to(compute)).to(x.dtype)


def bench_inputs(case, dtype, device, generator):
    m, n = case["M"], case["N"]
    x = torch.randn(m, n, dtype=dtype, device=device, generator=generator)
    bias = torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (x, bias, 2.0)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move, and its flops.

    forward: read x [M, N] and bias [N], write y [M, N]; per element a mul, an add, a max.
    forward_backward adds the backward: read grad_y and y, write grad_x (all [M, N]), write
    grad_bias [N]; per element a compare/select, a mul by scale, an add into the column sum.
    """
    m, n = case["M"], case["N"]
    size = torch.tensor([], dtype=dtype).element_size()
    forward = {"bytes": (2 * m * n + n) * size, "flops": 3 * m * n}
    if mode == "forward":
        return forward
    return {"bytes": forward["bytes"] + (3 * m * n + n) * size, "flops": forward["flops"] + 3 * m * n}


# --- procedures the nn.Module checks run beside the submission ---------------------------------
# A module cannot cross to the process that runs the checks (it would carry the submission's
# code), so these build and use the track's BiasReLU where the track runs, and return plain data
# and tensors; the checks judge what comes back.

def module_report(impl, device, bias_values, x):
    """BiasReLU(24, scale=1.5): its parameters, state_dict, .to(device), outputs."""
    from torch import nn
    m = impl.BiasReLU(24, scale=1.5)
    params = dict(m.named_parameters())
    rep = {"params": {k: tuple(v.shape) for k, v in params.items()},
           "bias_is_parameter": isinstance(params.get("bias"), nn.Parameter),
           "bias_shape": tuple(m.bias.shape) if isinstance(getattr(m, "bias", None), torch.Tensor) else None,
           "scale": repr(getattr(m, "scale", None)),
           "scale_is_float_1_5": isinstance(getattr(m, "scale", None), float) and m.scale == 1.5,
           "state_dict_keys": sorted(m.state_dict())}
    if not rep["bias_is_parameter"] or "bias" not in rep["state_dict_keys"]:
        return rep
    with torch.no_grad():
        m.bias.copy_(bias_values)
    twin = impl.BiasReLU(24, scale=1.5)
    twin.load_state_dict(m.state_dict())
    m.to(device)
    twin.to(device)
    rep["after_to"] = {"type": type(m.bias).__name__, "device": m.bias.device.type,
                       "is_parameter": isinstance(m.bias, nn.Parameter)}
    xd = x.to(device)
    rep["y"], rep["y_twin"], rep["bias"] = m(xd), twin(xd), m.bias.detach().clone()
    m.double()
    rep["y64"] = m(xd.double())
    return rep


def sequential_report(impl, device, w, b_lin, bias, x, grad_y, scale):
    """nn.Linear -> BiasReLU in nn.Sequential, built on the CPU, moved with .to(device), one
    forward and backward: the output and every parameter's gradient (None where none came)."""
    from torch import nn
    K, N = w.shape[1], w.shape[0]
    model = nn.Sequential(nn.Linear(K, N), impl.BiasReLU(N, scale=scale))
    with torch.no_grad():
        model[0].weight.copy_(w)
        model[0].bias.copy_(b_lin)
        model[1].bias.copy_(bias)
    model.to(device)
    out = model(x.to(device))
    rep = {"out": out, "requires_grad": bool(out.requires_grad)}
    if out.requires_grad:
        out.backward(grad_y.to(device))
    rep.update(bias_grad=model[1].bias.grad, weight_grad=model[0].weight.grad,
               lin_bias_grad=model[0].bias.grad)
    return rep
