"""Mistakes a kernel author makes get a tilejit error at their line, never a raw Python
exception or a silently wrong kernel; a rejected launch writes nothing."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

import tilejit as tj
from tilejit.frontend import compile_tile_ir
from tilejit.specs import ArraySpec

F32 = tj.float32
SPECS = [ArraySpec(F32, 2), ArraySpec(F32, 2)]


def compile_body(body: str, specs=SPECS, **consts):
    namespace = {"tj": tj}
    src = "def k(x, y, B: tj.constexpr):\n    t = tj.load(x, (0, 0), (B, B))\n" + \
          "".join(f"    {line}\n" for line in body.splitlines())
    linecache.cache["user_kernel.py"] = (len(src), None, src.splitlines(True), "user_kernel.py")
    exec(compile(src, "user_kernel.py", "exec"), namespace)
    return compile_tile_ir(namespace["k"], specs, {"B": 4, **consts})


@pytest.mark.parametrize("body,message", [
    ("tj.store(y, (0, 0), t.to(tj.int32, saturate=True).to(tj.float32))", "unexpected keyword argument 'saturate'"),
    ("tj.store(y, (0, 0), t.to(tj.int16, bitcast=True).to(tj.float32))", "must be non-bool types of one width"),
    ("tj.store(y, (0, 0), t.sum(axis=0, dtype=tj.float32)[None, :] + t)", "unexpected keyword argument 'dtype'"),
    ("tj.store(y, (0, 0), t.max(0, return_indices=True)[None, :] + t)", "return_indices"),
    ("tj.store(y, (0, 0), t.to())", "missing a required argument"),
    ("tj.store(y, (0, 0), t.reshape(shape=(2, 8), order='F').reshape((4, 4)))", "unexpected keyword argument 'order'"),
    ("tj.store(y, (0, 0), t.reshape().reshape((4, 4)))", "no shape given"),
    ("n = tj.program_id(0)\ntj.store(y, (0, 0), t + (n ** -1))", "negative exponent"),
    ("tj.store(y, (0, 0), t + float(t))", "only scalars convert"),
    ("tj.store(y, (0, 0), t + int(t))", "only scalars convert"),
    ("for i in tj.static_range(5000):\n    t = t + 1\ntj.store(y, (0, 0), t)", "5000 iterations"),
])
def test_a_mistake_is_a_compile_error_at_the_users_line(body, message):
    with pytest.raises(tj.CompileError, match=message) as err:
        compile_body(body)
    assert err.value.loc is not None and err.value.loc.file == "user_kernel.py"
    assert "^" in str(err.value)


def test_reshape_takes_shape_by_keyword_and_can_reorder():
    fn = compile_body("tj.store(y, (0, 0), t.reshape(shape=(2, 8), can_reorder=True).reshape((4, 4)))")
    shapes = [o.result.type.shape for o in fn.walk() if o.op is tj.ir.TileOp.RESHAPE]
    assert (2, 8) in shapes


def test_a_deep_chain_of_tj_funcs_is_not_called_recursive():
    namespace = {"tj": tj}
    src = "@tj.func\ndef f0(t):\n    return t + 1\n" + "".join(
        f"@tj.func\ndef f{i}(t):\n    return f{i - 1}(t)\n" for i in range(1, 40))
    src += "def k(x, y, B: tj.constexpr):\n    tj.store(y, (0, 0), f39(tj.load(x, (0, 0), (B, B))))\n"
    exec(compile(src, "chain.py", "exec"), namespace)
    compile_tile_ir(namespace["k"], SPECS, {"B": 4})


def test_real_recursion_is_named_as_such():
    namespace = {"tj": tj}
    src = ("@tj.func\ndef f(t):\n    return g(t)\n@tj.func\ndef g(t):\n    return f(t)\n"
           "def k(x, y, B: tj.constexpr):\n    tj.store(y, (0, 0), f(tj.load(x, (0, 0), (B, B))))\n")
    exec(compile(src, "rec.py", "exec"), namespace)
    with pytest.raises(tj.CompileError, match="recursive"):
        compile_tile_ir(namespace["k"], SPECS, {"B": 4})


@pytest.mark.parametrize("name", ["num_warps", "stream"])
def test_a_parameter_named_like_a_launch_option_is_refused_at_definition(name):
    namespace = {"tj": tj}
    exec(f"def k(x, {name}):\n    pass\n", namespace)
    with pytest.raises(tj.CompileError, match=f"cannot be named '{name}'"):
        tj.kernel(namespace["k"])


@tj.kernel
def two_outputs(x, y, z, B: tj.constexpr):
    t = tj.load(x, (0,), (B,))
    tj.store(y, (0,), t + 1)
    tj.store(z, (0,), t + 2)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_read_only_output_is_refused_before_anything_is_written(backend, monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    x, y, z = np.ones(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    z.flags.writeable = False
    with pytest.raises(tj.LaunchError, match="argument 'z' is a read-only NumPy array"):
        two_outputs[(1,)](x, y, z, B=8)
    assert not y.any()                                  # the other output is untouched


class BrokenInterface:
    @property
    def __cuda_array_interface__(self):
        raise KeyError("shape")


def test_an_array_protocol_that_raises_is_a_launch_error(monkeypatch):
    monkeypatch.setenv("TILEJIT_BACKEND", "interpret")
    with pytest.raises(tj.LaunchError, match="argument 'y'.*KeyError"):
        two_outputs[(1,)](np.ones(8, np.float32), BrokenInterface(), np.zeros(8, np.float32), B=8)


def test_a_torch_tensor_is_read_through_torch_not_its_array_interface(monkeypatch):
    # torch's __cuda_array_interface__ raises TypeError for float8 tensors (no typestr spells
    # them): a torch tensor must not be refused for it (a stand-in torch module, on the CPU)
    import sys
    import types
    kernel = sys.modules["tilejit.kernel"]           # (tj.kernel is the decorator)

    class Tensor:
        def __init__(self, host):
            self.host = host

        @property
        def __cuda_array_interface__(self):
            raise TypeError("dtype float8_e4m3fn is not supported by __cuda_array_interface__")

        def __dlpack__(self, **kwargs):
            return self.host.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.host.__dlpack_device__()

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor))
    host = np.arange(8, dtype=np.uint8)
    spec, value = kernel.classify_argument("a", Tensor(host))
    assert spec.dtype == tj.uint8 and spec.rank == 1 and value is not None
    with pytest.raises(tj.LaunchError, match="argument 'y'.*TypeError"):     # not a tensor: refused
        two_outputs[(1,)](np.ones(8, np.float32), Tensor.__new__(type("Other", (), {
            "__cuda_array_interface__": Tensor.__cuda_array_interface__})), np.zeros(8, np.float32), B=8)


@tj.kernel
def big_dot(a, b, c, B: tj.constexpr):
    acc = tj.dot(tj.load(a, (0, 0), (B, B)), tj.load(b, (0, 0), (B, B)))
    tj.store(c, (0, 0), acc)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_cpu_backends_refuse_what_the_gpu_cannot_hold_at_the_users_line(backend, monkeypatch):
    """A 512 x 512 dot: too many registers per thread.  The CPU backends refuse it with the
    cuda backend's error (they used to run it), naming the line."""
    monkeypatch.setenv("TILEJIT_BACKEND", backend)
    a = np.ones((512, 512), np.float16)
    c = np.zeros((512, 512), np.float32)
    with pytest.raises(tj.CompileError, match="too large for the registers") as err:
        big_dot[(1,)](a, a, c, B=512)
    assert err.value.loc is not None and err.value.loc.line > 0 and not c.any()
