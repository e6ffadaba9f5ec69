"""``tilejit.torch.op``: functions that launch tilejit kernels as PyTorch custom ops, traced by
``torch.compile(fullgraph=True)`` with no graph break (static and dynamic shapes), with their
outputs' shapes from the function run on fake tensors with launches skipped, gradients through
``register_autograd``, in-place ops, and clear errors.  On the CPU the kernels run on the
interpret backend with CPU tensors; the CUDA-graph test needs a GPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tilejit as tj  # noqa: E402
import tilejit.torch as tjt  # noqa: E402
from tilejit.errors import LaunchError  # noqa: E402
from tilejit.kernel import launches_skipped  # noqa: E402


@tj.kernel
def scale_rows_kernel(x, y, s, BLOCK: tj.constexpr):
    r = tj.program_id(0)
    tj.store(y, (r, 0), tj.load(x, (r, 0), (1, BLOCK)) * s + 1.0)


def launch_scale_rows(kernel, x, s):
    y = torch.empty_like(x)
    kernel[(x.shape[0],)](x, y, s, BLOCK=tj.next_power_of_2(x.shape[1]))
    return y


@tjt.op("tilejit_test::scale_rows")
def scale_rows(x: torch.Tensor, s: float) -> torch.Tensor:
    return launch_scale_rows(scale_rows_kernel, x, s)


@tjt.op("tilejit_test::scale_rows_backward")
def scale_rows_backward(g: torch.Tensor, s: float) -> torch.Tensor:
    return launch_scale_rows(scale_rows_kernel, g, s) - 1.0       # the kernel adds 1


def _setup(ctx, inputs, output):
    ctx.s = inputs[1]


scale_rows.register_autograd(lambda ctx, g: (scale_rows_backward(g, ctx.s), None), setup_context=_setup)


@tj.kernel
def add_into_kernel(x, y, BLOCK: tj.constexpr):
    r = tj.program_id(0)
    tj.store(y, (r, 0), tj.load(y, (r, 0), (1, BLOCK)) + tj.load(x, (r, 0), (1, BLOCK)))


@tjt.op("tilejit_test::add_into", mutates_args=("y",))
def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    add_into_kernel[(x.shape[0],)](x, y, BLOCK=tj.next_power_of_2(x.shape[1]))


@pytest.fixture(autouse=True)
def cpu_backend(monkeypatch):
    if not torch.cuda.is_available():
        monkeypatch.setenv("TILEJIT_BACKEND", "interpret")


def model(x):
    return torch.relu(scale_rows(x * 3, 0.5)) + 1


def reference(x):
    return torch.relu(x * 1.5 + 1) + 1


def test_the_op_runs_the_kernel_and_is_in_torch_ops():
    x = torch.randn(6, 10)
    torch.testing.assert_close(scale_rows(x, 2.0), x * 2 + 1)
    torch.testing.assert_close(torch.ops.tilejit_test.scale_rows(x, 2.0), x * 2 + 1)


def test_fake_tensors_get_the_functions_outputs_and_launch_nothing():
    from torch._subclasses.fake_tensor import FakeTensorMode
    scale_rows_kernel._cache.clear()
    with FakeTensorMode():
        out = scale_rows(torch.empty(5, 12, dtype=torch.float64), 1.5)
    assert out.shape == (5, 12) and out.dtype == torch.float64
    assert not scale_rows_kernel._cache                 # no specialisation, no compile, no launch


tuned_scale_kernel = tj.autotune(configs=[tj.Config(num_warps=1), tj.Config(num_warps=2)], key=["x"])(
    scale_rows_kernel)


@tjt.op("tilejit_test::tuned_scale_rows")
def tuned_scale_rows(x: torch.Tensor, s: float) -> torch.Tensor:
    return launch_scale_rows(tuned_scale_kernel, x, s)


def test_an_autotuned_kernel_is_not_tuned_on_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = tuned_scale_rows(torch.empty(3, 8), 2.0)
    assert out.shape == (3, 8) and tuned_scale_kernel.best_config is None
    x = torch.randn(3, 8)
    torch.testing.assert_close(torch.compile(lambda t: tuned_scale_rows(t, 2.0), fullgraph=True,
                                             backend="aot_eager")(x), x * 2 + 1)


def test_torch_compile_fullgraph_has_no_graph_break():
    x = torch.randn(8, 16)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), reference(x))


def test_torch_compile_with_dynamic_shapes():
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for n in (5, 7, 33):
        x = torch.randn(n, n + 3)
        torch.testing.assert_close(compiled(x), reference(x))


def test_gradients_through_the_registered_backward():
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: scale_rows(t, 0.75), (x,))
    compiled = torch.compile(lambda t: scale_rows(t, 0.75).sum(), fullgraph=True, backend="aot_eager")
    compiled(x).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 0.75))


def test_an_in_place_op_under_compile():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    want = x + y

    def f(x, y):
        add_into(x, y)
        return y * 2

    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x, y)
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(out, want * 2)


def test_missing_annotations_and_bad_names_are_clear_errors():
    def unannotated(x, s: float) -> torch.Tensor:
        return x
    with pytest.raises(LaunchError, match="unannotated needs type annotations on parameters x"):
        tjt.op("tilejit_test::unannotated")(unannotated)

    def fine(x: torch.Tensor) -> torch.Tensor:
        return x.clone()
    with pytest.raises(LaunchError, match="the name must be 'namespace::name'"):
        tjt.op("no_namespace")(fine)

    def odd_type(x: dict) -> torch.Tensor:
        return x
    with pytest.raises(LaunchError, match="PyTorch refused .*odd_type"):
        tjt.op("tilejit_test::odd_type")(odd_type)


def test_launches_skipped_is_restored_after_an_error():
    with pytest.raises(ValueError):
        with launches_skipped():
            raise ValueError
    x = torch.randn(2, 4)
    torch.testing.assert_close(scale_rows(x, 1.0), x + 1)       # launches run again


@pytest.mark.gpu
def test_cuda_graphs_replay_the_op():
    x = torch.randn(64, 128, device="cuda")
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        x.normal_()
        torch.testing.assert_close(compiled(x), reference(x))
