"""What the CPU gate cannot run, it must still see: the device compilers' view of the text, state outside the ISV,
guard and non-finite cases from other starting λ, and messages that say what happened.

In process (the candidates here neither crash nor hang, except where the test says so); the candidates' own
headers (tests/candidates/) are checked through the gate's command line in the slow run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analysis.cli.evaluate import evaluate
from analysis.judge.diagnosis import behaves_as
from analysis.judge.property_checks import device_view
from analysis.judge.property_records import judge_rows
from analysis.present import render
from repro.backends import device_view as views
from repro.backends.ptx import outside_stores
from repro.core.f32 import F32
from repro.core.kernel_source import KernelSource, load_kernel
from repro.runners.campaign import run_group
from repro.runners.gather import gather
from repro.runners.inference import depends_on_history

CANDIDATES = Path(__file__).parent / "candidates"
SYMBOL = "rl_q_distill_lambda_controller"


def candidate(name: str) -> KernelSource:
    return load_kernel(CANDIDATES / f"{name}.cu", SYMBOL)


def line_of(source: KernelSource, text: str) -> int:
    """The 1-based line of ``source`` that starts with ``text`` (stripped)."""
    return next(n for n, line in enumerate(source.text.splitlines(), 1) if line.strip().startswith(text))


@pytest.fixture(scope="module")
def fixed_evidence(contract, host):
    return gather(host, contract.source("fixed"), contract.slots, contract.controller("fixed"), static=False,
                  coverage=False, isolate=False)


def judged_views(evidence, host, source: KernelSource):
    return device_view(replace(evidence, device_views=views.measure(host.cxx, source)))


def test_the_fixed_kernel_and_a_conditional_that_changes_no_token_are_one_view(contract, host, fixed_evidence,
                                                                              monkeypatch):
    # the static checks as the gate asks for them; NVRTC's PTX rules (where installed) are not this test's subject
    monkeypatch.setattr("repro.backends.ptx.nvrtc_unavailable", lambda: "not this test's subject")
    evidence = gather(host, contract.source("fixed"), contract.slots, contract.controller("fixed"), coverage=False,
                      isolate=False)
    assert evidence.device_views is not None
    row = next(f for f in judge_rows(evidence) if f.key == "device_view")
    assert row.ok and row.measured == len(views.device_macros()) == row.documented
    text = contract.source("fixed").text.replace("extern \"C\"", "#ifdef __CUDACC__\n// the GPU build\n#endif\nextern \"C\"")
    assert judged_views(fixed_evidence, host, KernelSource(text, SYMBOL, "commented.cu")).ok


@pytest.mark.parametrize("name, directive", [("arch_decay", "#if defined(__CUDA_ARCH__)"),
                                             ("rtc_floor", "#ifdef __CUDACC_RTC__")])
def test_text_only_the_gpu_compiles_fails_naming_its_conditional(host, fixed_evidence, name, directive):
    source = candidate(name)
    measured = views.measure(host.cxx, source)
    row = device_view(replace(fixed_evidence, device_views=measured))
    assert not row.ok
    first = line_of(source, directive)
    assert [c[0] for c in row.detail["conditionals"]] == [first]
    # the views that differ are exactly those whose macros take the conditional's device branch
    macro = directive.split("(")[-1].split()[-1].rstrip(")")  # every arch the team builds for is ≥ 800
    takes = {v.name for v in measured.devices if any(m.split("=")[0] == macro for m in v.macros)}
    assert {d["view"] for d in row.detail["differing"]} == takes
    assert f"lines {first}–" in render.where(row.where)


def test_an_error_only_the_device_sees_fails(host, fixed_evidence, contract):
    text = "#ifdef __CUDA_ARCH__\n#error no GPU build\n#endif\n" + contract.source("fixed").text
    row = judged_views(fixed_evidence, host, KernelSource(text, SYMBOL, "errs.cu"))
    assert not row.ok and all(d["error"] for d in row.detail["differing"])


def test_host_state_names_the_device_variables_a_run_changed(contract, host):
    controller = contract.controller("fixed")
    for name, changed in (("device_global_kl", {"g_last_kl"}), ("call_counter", {"g_calls"}), ("constant_memory", set())):
        kernel = host.compile(candidate(name), contract.slots)
        run_group(kernel, controller, "catalogue")
        state = run_group(kernel, controller, "state")
        assert state.measured and state.objects and state.runs, name
        assert {n for n, _ in state.changed} == changed, name
    assert run_group(host.compile(contract.source("fixed"), contract.slots), controller, "state").objects == ()


def test_ptx_stores_not_through_a_parameter_are_outside_the_isv():
    ptx = """
        ld.param.u64 	%rd2, [k_param_0];
        cvta.to.global.u64 	%rd1, %rd2;
        add.s64 	%rd4, %rd1, 8;
        st.global.f32 	[%rd1+1944], %f13;
        @%p1 st.global.f32 	[%rd4], %f13;
        st.global.f32 	[g_last_kl], %f1;
        mov.u64 	%rd3, kBounds;
        st.f32 	[%rd3+4], %f2;
        st.volatile.local.u32 	[%rd9], %r1;
    """
    assert outside_stores(ptx) == ("st.global.f32 [g_last_kl]", "st.f32 [%rd3+4]")


def rows_of(contract, host, name: str) -> dict:
    """The rows of candidate ``name`` judged in process (no NVRTC, no coverage, no inference)."""
    evidence = gather(host, candidate(name), contract.slots, contract.controller("fixed"), static=False,
                      coverage=False, isolate=False)
    return {f.key: f for f in judge_rows(evidence)}


@pytest.mark.parametrize("name", ["device_global_kl", "call_counter"])
def test_state_outside_the_isv_fails_on_the_cpu(contract, host, name):
    rows = rows_of(contract, host, name)
    row = rows["outside_state"]
    assert not row.ok and row.detail["changed"] and row.detail["sources"] == ["host build's data"]
    assert rows["isolation"].ok  # the ISV itself is left intact: this is the row that sees it


def test_nonfinite_cases_from_other_starting_lambdas_are_judged_by_the_spec(contract, host, fixed_evidence):
    ctrl = contract.controller("fixed")
    rows = {f.key: f for f in judge_rows(fixed_evidence)}
    for key in ("nonfinite", "guards"):
        assert rows[key].ok and rows[key].detail["start_cases"] > 0
        starts = rows[key].detail["starts"]
        assert {F32(starts["floor"]), F32(starts["ceiling"])} == {F32(ctrl.value("floor")), F32(ctrl.value("ceiling"))}
        assert F32(starts["above floor"]) == np.nextafter(F32(ctrl.value("floor")), F32(np.inf))
    row = rows_of(contract, host, "nan_reset")["nonfinite"]
    assert not row.ok and row.measured == row.documented  # every pinned case holds: only other λ0 show it
    assert row.where.scenario.startswith("kl=nan from λ0")


def test_a_write_before_the_isv_is_not_reported_as_the_neighbours_slot(contract, host):
    source = candidate("oob_before_3")
    row = rows_of(contract, host, "oob_before_3")["isolation"]  # no inference: its unpadded ISV faults, here
    offset = -int(source.text.split("isv[-", 1)[1].split("]", 1)[0])
    assert not row.ok and row.detail["written"] == [offset] and row.where.slots == (offset,)


def test_a_kernel_whose_lambda_depends_on_earlier_calls_says_so_once(contract, host):
    ctrl = contract.controller("fixed")
    lambdas, tol = (ctrl.value("seed_lambda"), 0.5), ctrl.value("tolerance")
    assert not depends_on_history(host.compile(contract.source("fixed"), contract.slots), lambdas, tol)
    assert depends_on_history(host.compile(candidate("state_hysteresis"), contract.slots), lambdas, tol)
    verdict = evaluate(candidate("state_hysteresis"), "fixed", host, contract, static=False, coverage=False,
                       isolate=False)
    line = render.behaves_as(behaves_as(verdict.behaviour, ctrl, contract))
    assert "depends on earlier calls" in line and "also reads" not in line
    assert not any(d.name == "reads" for d in verdict.differences)


@pytest.mark.parametrize("condition", ["#if __CUDACC_VER_MAJOR__ >= 12", "#ifdef __CUDA_ARCH_LIST__",
                                       "#if defined(__clang__) && defined(__CUDA__)"])
def test_a_condition_on_a_macro_no_view_defines_fails_naming_it(host, fixed_evidence, contract, condition):
    """A compiler's macro the views do not model may choose other code on the GPU: the row fails naming it; a
    reserved name the candidate defines itself, and the modelled ones, do not."""
    text = f"{condition}\n#define RLQ_D 0.99f\n#else\n#define RLQ_D 0.998f\n#endif\n" + contract.source("fixed").text
    row = judged_views(fixed_evidence, host, KernelSource(text, SYMBOL, "unmodelled.cu"))
    named = [name for line, name in row.detail["unmodelled"]]
    assert not row.ok and row.detail["unmodelled"][0][0] == 1 and named[0] in condition
    assert named[0] in render.where(row.where)
    own = "#define __RLQ_OWN 1\n#if __RLQ_OWN && defined(__GNUC__)\n#endif\n" + contract.source("fixed").text
    assert judged_views(fixed_evidence, host, KernelSource(own, SYMBOL, "own.cu")).ok


def test_the_nvrtc_view_predefines_what_nvrtc_does(host):
    """Each macro the NVRTC view's preprocessor predefines, NVRTC defines with the same value, and those it leaves
    out (device_view.NOT_NVRTC) NVRTC does not define: asked of NVRTC itself, one #error per macro."""
    from repro.backends import ptx

    reason = ptx.nvrtc_unavailable()
    if reason:
        pytest.skip(reason)
    macros = views.predefined(host.cxx, "NVRTC")
    assert macros and not set(macros) & set(views.NOT_NVRTC)
    checks = [f"#if !defined({name}) || !({name} == {value})\n#error {name}\n#endif" for name, value in macros.items()]
    checks += [f"#ifdef {name}\n#error {name}\n#endif" for name in views.NOT_NVRTC]
    ptx.compile_ptx("\n".join(checks) + '\nextern "C" __global__ void k() {}\n', "predefined.cu")
