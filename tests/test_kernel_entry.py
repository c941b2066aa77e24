"""Which kernel production launches by name (repro.backends.kernel_entry), against NVRTC's own PTX.

Production launches ``RawModule(code=text).get_function(SYMBOL)``: that works where NVRTC's PTX has an
``.entry SYMBOL``. Each form below, and each candidate of the catalogue, is judged by the gate's reading of the
preprocessed tokens and by NVRTC itself; the two must agree wherever NVRTC compiles the text.
"""

from __future__ import annotations

import re

import pytest

from repro.backends import translation_unit
from repro.backends.kernel_entry import declarations, launchable
from repro.backends.translation_unit import entry
from repro.core.errors import SuiteError
from repro.core.kernel_source import KernelSource
from tests.catalogue import CANDIDATES, SYMBOL

BODY = "{ if (threadIdx.x != 0) return; isv[486] = fminf(1.0f, isv[486] * 1.2f); }"
K = "rlq_k"
#: name -> the text (``K``: the kernel's name, ``B``: its body); each one NVRTC compiles
FORMS = {
    "plain": 'extern "C" __global__ void K(float* isv) B',
    "macro_name": '#define NAME K\nextern "C" __global__ void NAME(float* isv) B',
    "pasted_name": '#define NAME(x) x##_k\nextern "C" __global__ void NAME(rlq)(float* isv) B',
    "macro_specifiers": '#define KERNEL extern "C" __global__ void\nKERNEL K(float* isv) B',
    "namespace": 'namespace rlq { extern "C" __global__ void K(float* isv) B }',
    "nested_namespaces": 'namespace a { namespace b { extern "C" __global__ void K(float* isv) B } }',
    "nested_namespace_definition": 'namespace a::b { extern "C" __global__ void K(float* isv) B }',
    "inline_namespace": 'inline namespace v1 { extern "C" __global__ void K(float* isv) B }',
    "block": 'extern "C" {\n__global__ void K(float* isv) B\n}',
    "block_in_namespace": 'namespace q { extern "C" { __global__ void K(float* isv) B } }',
    "declared_then_defined": 'extern "C" __global__ void K(float* isv);\n__global__ void K(float* isv) B',
    "declared_in_namespace":
        'namespace a { extern "C" __global__ void K(float* isv); }\nextern "C" __global__ void K(float* isv) B',
    "using_declaration": 'namespace a { extern "C" __global__ void K(float* isv) B }\nusing a::K;',
    "void_before_global": 'extern "C" void __global__ K(float* isv) B',
    "launch_bounds": 'extern "C" __launch_bounds__(1) __global__ void __launch_bounds__(1) K(float* isv) B',
    "attributes": 'extern "C" [[maybe_unused]] __global__ void __attribute__((noinline)) K [[maybe_unused]] (float* isv) B',
    "comments_and_continuations": 'extern /* a */ "C" __global__ // b\n void K\\\n(float* isv) B',
    "name_split_by_continuation": 'extern "C" __global__ void rlq\\\n_k(float* isv) B',
    "trailing_return": 'extern "C" __global__ auto K(float* isv) -> void B',
    "inline_kernel": 'extern "C" inline __global__ void K(float* isv) B',
    "pragma": '_Pragma("once") extern "C" __global__ void K(float* isv) B',
    "only_under_nvrtc": '#ifdef __CUDACC_RTC__\nextern "C" __global__ void K(float* isv) B\n#endif',
    # refused: production cannot launch these by the name
    "not_extern_c": "__global__ void K(float* isv) B",
    "static": "static __global__ void K(float* isv) B",
    "static_in_block": 'extern "C" { static __global__ void K(float* isv) B }',
    "unnamed_namespace": 'namespace { extern "C" __global__ void K(float* isv) B }',
    "unnamed_inside_named": 'namespace a { namespace { extern "C" __global__ void K(float* isv) B } }',
    "extern_cxx_in_block": 'extern "C" { extern "C++" __global__ void K(float* isv) B }',
    "declared_only": 'extern "C" __global__ void K(float* isv);',
    "template": "template <int N> __global__ void K(float* isv) B\ntemplate __global__ void K<1>(float*);",
    "only_on_the_host": '#ifndef __CUDACC_RTC__\nextern "C" __global__ void K(float* isv) B\n#endif',
    "other_name": 'extern "C" __global__ void rlq_other(float* isv) B',
}


def _text(form: str) -> str:
    return FORMS[form].replace("K", K).replace("B", BODY)


def _nvrtc():
    from repro.backends import ptx

    reason = ptx.nvrtc_unavailable()
    if reason:
        pytest.skip(reason)
    return ptx


def _nvrtc_launches(ptx, text: str, symbol: str) -> bool | None:
    """Whether NVRTC's PTX of ``text`` has an ``.entry symbol`` (None: NVRTC rejects the text)."""
    try:
        code, _ = ptx.compile_ptx(text, "form.cu")
    except SuiteError:
        return None
    return re.search(rf"\.entry\s+{re.escape(symbol)}\s*\(", code) is not None


def _ours(source: KernelSource) -> bool:
    try:
        entry(source)
    except SuiteError as err:
        assert len(str(err).splitlines()) == 1
        return False
    return True


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_judged_as_nvrtc_builds_it(form):
    ptx = _nvrtc()
    text = _text(form)
    launches = _nvrtc_launches(ptx, text, K)
    assert launches is not None, f"NVRTC rejects the form {form}"
    assert _ours(KernelSource(text, K, f"{form}.cu")) == launches


def test_the_harness_calls_a_namespaced_kernel_by_its_qualified_name():
    found = entry(KernelSource(_text("nested_namespaces"), K, "ns.cu"))
    assert (found.symbol, found.call) == (K, f"::a::b::{K}")
    assert entry(KernelSource(_text("macro_name"), K, "m.cu")).call == K


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_each_candidate_is_judged_as_nvrtc_builds_it(path):
    ptx = _nvrtc()
    text = path.read_text()
    launches = _nvrtc_launches(ptx, text, SYMBOL)
    if launches is None:
        pytest.skip("NVRTC rejects it (its own exit 2)")
    assert _ours(KernelSource(text, SYMBOL, path.name)) == launches


@pytest.mark.parametrize("form", [f for f in FORMS if "name" not in f and f not in ("macro_specifiers", "pragma")
                                  and "only_" not in f])
def test_without_a_preprocessor_the_text_is_judged_alike(form, monkeypatch):
    """No C++ compiler (a GPU-only machine): the text's own tokens decide, alike wherever no macro is involved."""
    source = KernelSource(_text(form), K, f"{form}.cu")
    expected = _ours(source)
    monkeypatch.setattr(translation_unit, "find_cxx", lambda: None)
    tokens = translation_unit._entry_tokens(source)
    try:
        launchable(declarations(tokens), K, source.origin)
        ours = True
    except SuiteError:
        ours = False
    assert ours == expected


def test_the_refusals_say_why_in_one_line():
    def error(form: str) -> str:
        with pytest.raises(SuiteError) as err:
            entry(KernelSource(_text(form), K, f"{form}.cu"))
        return str(err.value)

    assert f"no kernel named '{K}' (found: rlq_other)" in error("other_name")
    assert 'is not extern "C"' in error("not_extern_c")
    assert "unnamed namespace" in error("unnamed_namespace") and "static" in error("static_in_block")
    assert "never defined" in error("declared_only")
