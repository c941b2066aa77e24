"""The scenario catalogue: seeded reproducibility, band edges, CSV replay."""

from __future__ import annotations

import numpy as np
import pytest

from repro.core.errors import SuiteError
from repro.core.f32 import F32, bits
from repro.core.spec import Rule, band_edges
from repro.runners.scenarios import REGIMES, case, catalogue, from_csv, range_probes


@pytest.mark.parametrize("controller", ["fixed", "original"])
def test_same_seed_same_bits_other_seed_other_noise(contract, controller):
    entry = contract.controller(controller)
    a, b, c = catalogue(entry, seed=3), catalogue(entry, seed=3), catalogue(entry, seed=4)
    assert [s.name for s in a] == [s.name for s in b]
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(bits(x.kl), bits(y.kl)) and np.array_equal(bits(x.target), bits(y.target))
    noisy = [i for i, s in enumerate(a) if s.family == "noise"]
    assert noisy and all(not np.array_equal(a[i].kl, c[i].kl) for i in noisy)


def test_catalogue_covers_the_issue_families(contract):
    families = {s.family for s in catalogue(contract.controller("fixed"))}
    assert {"sustained", "band", "step", "oscillation", "drift", "noise", "bad_values"} <= families
    names = {s.name for s in catalogue(contract.controller("fixed"))}
    for slot in ("kl", "target"):
        assert {f"{slot}=nan", f"{slot}=+inf", f"{slot}=-inf", f"{slot}=0", f"{slot}=-1", f"{slot}=1e-40"} <= names


@pytest.mark.parametrize("target", [1e-4, 0.02, 0.37, 5.0, 1e-38])
@pytest.mark.parametrize("tol", [1.5, 3.0])
def test_band_edges_are_neighbouring_floats(target, tol):
    e = band_edges(target, tol)
    assert e["upper"] == F32(F32(target) * F32(tol)) and e["lower"] == F32(F32(target) / F32(tol))
    assert bits(e["above"]) == bits(e["upper"]) + 1 and bits(e["inside_upper"]) == bits(e["upper"]) - 1
    assert bits(e["below"]) == bits(e["lower"]) - 1 and bits(e["inside_lower"]) == bits(e["lower"]) + 1


def test_case_regimes_place_kl_relative_to_target(contract):
    entry = contract.controller("fixed")
    for regime, factor in REGIMES.items():
        sc = case(entry, f"lambda=nan,kl={regime}")
        assert np.isnan(sc.lambda0) and sc.kl[0] == F32(sc.target[0] * factor)


@pytest.mark.parametrize("spec", ["lambda", "speed=1", "kl=fast", "lambda=1,,"])
def test_malformed_case_is_a_clear_error(contract, spec):
    with pytest.raises(SuiteError, match="malformed case"):
        case(contract.controller("fixed"), spec)


def test_csv_replay_reads_the_named_columns(tmp_path):
    with_target = tmp_path / "run.csv"
    with_target.write_text("step,kl,kl_target\n1,0.01,0.02\n2,0.5,0.02\n3,nan,0.02\n")
    with pytest.raises(SuiteError, match=r"run.csv:4: 'nan' is not finite"):
        from_csv(with_target)
    sc = from_csv(with_target, allow_nonfinite=True)
    assert sc.steps == 3 and np.isnan(sc.kl[2]) and sc.target.dtype == np.float32
    only_kl = tmp_path / "kl.csv"
    only_kl.write_text("kl\n0.01\n0.02\n0.03\n")
    sc = from_csv(only_kl, target=0.02)
    assert sc.kl.tolist() == [F32(0.01), F32(0.02), F32(0.03)]


@pytest.mark.parametrize(
    "text,kwargs,message",
    [
        ("", {}, "empty trace file"),
        ("loss\n1\n", {}, "no 'kl' column"),
        ("kl\n0.1\nabc\n", {"target": 0.02}, ":3: not a number"),
        ("0.1\n0.2\n", {"target": 0.02}, ":1: no header"),
        ("kl\n0.1\n", {}, "give the target"),
        ("kl,kl_target\n0.1,0.02\n", {"target": 0.02}, "use one of them"),
        ("kl\n0.1\n", {"target": 0.0}, "positive finite"),
        ("kl\n0.1\n", {"target": float("nan")}, "positive finite"),
        ("kl\n0.1\ninf\n", {"target": 0.02}, ":3: 'inf' is not finite"),
        ("kl,kl_target\n0.1,\n", {}, ":2: not a number"),
    ],
)
def test_malformed_trace_file(tmp_path, text, kwargs, message):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(SuiteError, match=message):
        from_csv(path, **kwargs)


def test_missing_trace_file(tmp_path):
    with pytest.raises(SuiteError, match="trace file not found"):
        from_csv(tmp_path / "nope.csv", target=0.02)


@pytest.mark.slow  # 2 s (the plot); replay's CLI runs in the fast run through test_bad_input and test_gate_cli
def test_replay_cli(tmp_path, capsys):
    from analysis.cli import replay

    trace = tmp_path / "run.csv"
    trace.write_text("kl\n" + "\n".join(["0.0002"] * 40 + ["2.0"] * 5) + "\n")
    out, plot = tmp_path / "out.csv", tmp_path / "out.png"
    assert replay.main([str(trace), "--target", "0.02", "--backend", "host", "--csv", str(out), "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    # 40 steps below the band, then 5 above: each controller moves on every step
    assert "40 down" in text and "5 up" in text and "0 unchanged" in text.splitlines()[0]
    assert plot.read_bytes()[:4] == b"\x89PNG" and len(out.read_text().splitlines()) == 1 + 2 * 45
    assert replay.main([str(trace), "--backend", "host"]) == 2
    assert "give the target" in capsys.readouterr().err


def test_trace_reading_chunked_and_row_by_row_agree(tmp_path, monkeypatch):
    """The chunked reading (pandas) and the row-by-row one (csv, float) give the same float32 bits, chunk edges
    included; a file the chunked reading refuses (a NaN written out, a blank row of commas) is read row by row."""
    from repro.runners import trace_file

    rng = np.random.default_rng(3)
    kl = 0.02 * np.exp(3.0 * rng.standard_normal(2500))
    text = "step,kl,kl_target\n" + "".join(f"{i},{float(v)!r},{0.02 + i * 1e-7!r}\n" for i, v in enumerate(kl))
    path = tmp_path / "t.csv"
    path.write_text("\n" + text.replace("\n7,", "\n\n7,", 1))  # blank lines before the header and among the rows
    monkeypatch.setattr(trace_file, "CHUNK_ROWS", 1000)
    chunked = trace_file.read(path)
    by_row = trace_file._by_row(path, 2, 1, 2, False, trace_file.MAX_ROWS, lambda *a: None)
    assert np.array_equal(chunked.kl.view(np.uint32), by_row[0].astype(np.float32).view(np.uint32))
    assert np.array_equal(chunked.target.view(np.uint32), by_row[1].astype(np.float32).view(np.uint32))
    assert len(chunked.kl) == len(kl)
    path.write_text(text.replace("\n5,", "\n,,\n5,", 1).replace(f"\n9,{float(kl[9])!r},", "\n9,nan,", 1))
    sc = from_csv(path, allow_nonfinite=True)
    assert sc.steps == len(kl) and np.isnan(sc.kl[9]) and np.array_equal(sc.kl[:9], kl[:9].astype(np.float32))


def test_trace_reading_says_how_far_it_is_past_a_few_seconds(tmp_path, monkeypatch):
    from repro.runners import trace_file

    path = tmp_path / "t.csv"
    path.write_text("kl\n" + "0.02\n" * 3000)
    said = []
    monkeypatch.setattr(trace_file, "CHUNK_ROWS", 1000)
    trace_file.read(path, target=0.02, progress=said.append)
    assert said == []  # a quick reading says nothing
    monkeypatch.setattr(trace_file, "PROGRESS_AFTER_S", 0.0)
    trace_file.read(path, target=0.02, progress=said.append)
    assert said[0].startswith("read 1,000 rows (") and "% of the file) in " in said[0] and len(said) == 3


@pytest.mark.parametrize("controller", ["fixed", "original", "tf_agents", "ziegler", "geco", "pid_lagrangian"])
def test_range_probes_span_the_targets_and_kl_users_meet(contract, controller):
    """Targets every decade from 1e-8 to 1e3; KL from 0 and the smallest subnormal through FLT_MIN to FLT_MAX at each
    (the band's edges and their neighbours too, for a band rule); λ0 on each documented bound and one float away."""
    entry = contract.controller(controller)
    probes = range_probes(entry)
    assert len({s.name for s in probes}) == len(probes)
    targets = sorted({float(s.target[0]) for s in probes if s.params["start"] == "seed"})
    assert targets[0] == F32(1e-8) and targets[-1] == F32(1e3)
    assert np.allclose(np.diff(np.log10(targets)), 1.0)  # one per decade, none missing
    tiny, huge = np.finfo(F32).smallest_subnormal, np.finfo(F32).max
    for t in targets:
        kls = {int(b) for s in probes if s.target[0] == F32(t) for b in bits(s.kl[:1])}
        wanted = [F32(0), tiny, np.nextafter(np.finfo(F32).tiny, F32(0)), np.finfo(F32).tiny, huge]
        if entry.is_band:
            wanted += list(band_edges(t, Rule.of(entry)).values())
        assert {int(bits(x)) for x in wanted} <= kls, t
        assert F32(1e-40) in {s.kl[0] for s in probes if s.target[0] == F32(t)}
    starts = {int(bits(s.lambda0)) for s in probes}
    for key in ("floor", "ceiling"):
        b = entry.bound(key)
        if b is not None:
            b = F32(b)
            assert {int(bits(x)) for x in (np.nextafter(b, F32(-np.inf)), b, np.nextafter(b, F32(np.inf)))} <= starts, key
    assert int(bits(tiny)) in starts
    assert all(s.steps >= 2 and np.array_equal(bits(s.kl), bits(s.kl[:1]).repeat(s.steps)) for s in probes)
    boundary = [s for s in probes if s.params["start"] != "seed"]
    assert len({(int(bits(s.lambda0)), int(bits(s.kl[0])), int(bits(s.target[0]))) for s in boundary}) == len(boundary)
