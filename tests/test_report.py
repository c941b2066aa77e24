"""The report job, run into a temporary folder on the host backend (as CI does)."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pandas as pd
import pytest

# Each test here reads a whole report built on the CPU (about 25 s); the suite's fast run leaves them to the slow job.
pytestmark = pytest.mark.slow

MIN_DPI = 150
MIN_SIZE = (900, 500)  # pixels: every figure is at least this large
QUICK = {"closed_loop_seeds": 2, "grid": {"actor_lr": (0.5,), "kl_ema_rate": (0.01,), "kl_target": (1.0,)}}


@pytest.fixture(scope="module")
def report():
    """The report's command line, imported by the tests that use it: it loads matplotlib (1-2 s), which the
    fast run would otherwise pay at collection only to deselect this module."""
    from analysis.cli import report

    return report


def in_repo_sources(report, contract):
    return {n: contract.source(n) for n in report.CONTROLLERS}


@pytest.fixture(scope="module")
def made(tmp_path_factory, contract, host, report):
    out = tmp_path_factory.mktemp("report")
    rep = report.measure(host, in_repo_sources(report, contract), contract, progress=lambda *_: None, **QUICK)
    report.write(rep, out, progress=lambda *_: None)
    return out, rep


def png_info(path):
    """(width, height, dpi) from the PNG's IHDR and pHYs chunks."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    at = data.find(b"pHYs")
    ppm = struct.unpack(">I", data[at + 4 : at + 8])[0] if at > 0 else 0
    return width, height, round(ppm * 0.0254)


def test_every_promised_figure_is_a_valid_png_of_the_promised_size(made, report):
    out, _ = made
    for name in report.summary.captions():
        width, height, dpi = png_info(out / name)
        assert width >= MIN_SIZE[0] and height >= MIN_SIZE[1], f"{name}: {width}×{height}"
        assert dpi >= MIN_DPI, f"{name}: {dpi} dpi"


def test_summary_links_every_figure_and_names_its_sources(made, report):
    out, rep = made
    text = (out / "summary.md").read_text()
    for name in report.summary.captions():
        assert f"]({name})" in text
    for n in report.CONTROLLERS:
        assert rep.header["kernels"][n]["sha256"] in text
    assert f"`{rep.header['backend']}`" in text and "suite commit" in text


def _table_cell(text: str, prop: str, column: int) -> str:
    row = next(line for line in text.splitlines() if line.startswith(f"| {prop} |"))
    return [c.strip() for c in row.strip("|").split("|")][column]


def test_in_brief_reads_its_numbers_from_the_data(made):
    """The answer-first section: the floor steps recomputed from the trajectories, the toy's fractions from
    ablation.csv, and the learning loop's cell counts recounted from study2.json (p < 0.05, by discordant runs)."""
    out, _ = made
    text = (out / "summary.md").read_text()
    brief = text.split("## In brief", 1)[1].split("\n## ", 1)[0]
    traj = pd.read_csv(out / "data" / "trajectories.csv")
    for name in ("original", "fixed"):
        aligned = traj[(traj.controller == name) & (traj.scenario == "aligned")].sort_values("step")
        lam = aligned["lambda"].to_numpy(np.float32)
        first = int(aligned.step.to_numpy()[np.argmax(lam == lam.min())])
        assert re.search(rf"by step {first}[;.]", brief), (name, first)
    ab = pd.read_csv(out / "data" / "ablation.csv")
    parts = ab[["floor", "asymmetric", "tolerance", "seed"]].sum(axis=1)
    assert f"{ab.collapse_fraction[parts == 0].iloc[0]:.1%} of the original's runs" in brief
    assert f"{ab.collapse_fraction[parts == 4].iloc[0]:.1%} of the fixed kernel's" in brief
    best = ab[(parts > 0) & (parts < 4)].sort_values("collapse_fraction", kind="stable").iloc[0]
    assert f"{best.variant} gives the fewest, {best.collapse_fraction:.1%}" in brief
    study2 = json.loads((out / "data" / "study2.json").read_text())
    # the learning loop's line leads with the primary criterion's headline; the secondary count comes after it
    from analysis.present import study_section

    loop = next(line for line in brief.splitlines() if line.startswith("- **In the learning loop**"))
    assert loop.startswith(f"- **In the learning loop**: {study_section.headline2(study2)}")
    tests = [p["minimum"]["per_regime"][j] for b in study2["envs"].values() for p in b["pairs"]
             if (p["a"], p["b"]) == ("original", "fixed") for j in range(len(b["regimes"]))]
    more = sum(t["p"] < 0.05 and t["only_a"] > t["only_b"] for t in tests)
    fewer = sum(t["p"] < 0.05 and t["only_b"] > t["only_a"] for t in tests)
    assert f"significantly more often in {more} of {len(tests)} task × regime cells, the fixed kernel's in {fewer}" in loop


def test_every_data_file_is_strict_json(made):
    """NaN and ±inf (a peer's absent floor, an empty minimum) are null: jq and JavaScript read every file."""
    out, _ = made
    for path in sorted((out / "data").glob("*.json")):
        json.loads(path.read_text(), parse_constant=lambda c, p=path: pytest.fail(f"{p.name}: {c} is not JSON"))


def test_summary_numbers_recompute_from_data(made):
    """Recompute the halving and floor steps from data/trajectories.csv; the summary must agree."""
    out, _ = made
    text = (out / "summary.md").read_text()
    traj = pd.read_csv(out / "data" / "trajectories.csv")
    props = json.loads((out / "data" / "properties.json").read_text())
    for name, col in (("fixed", 3), ("original", 7)):
        run = traj[(traj.controller == name) & (traj.scenario == "decay_from_ceiling")].sort_values("step")
        lam = run["lambda"].to_numpy(np.float32)
        halved = int(run.step.to_numpy()[np.argmax(lam <= np.float32(run.lambda0.iloc[0]) / 2)])
        assert re.match(rf"^{halved} from λ0 1\b", _table_cell(text, "steps_to_halve", col))
        floor = np.float32(lam.min())
        aligned = traj[(traj.controller == name) & (traj.scenario == "aligned")]
        first = int(aligned.step[aligned["lambda"].astype(np.float32) == floor].min())
        assert f"held from step {first} (aligned)" in _table_cell(text, "floor", col)
        recorded = {p["key"]: p for p in props["verdicts"][name]["properties"]}
        assert recorded["steps_to_halve"]["measured"] == halved


def test_noise_table_matches_data(made):
    out, _ = made
    text = (out / "summary.md").read_text()
    noise = pd.read_csv(out / "data" / "noise_tolerance.csv")
    fixed = noise[(noise.controller == "fixed") & np.isclose(noise.sigma, 1.0)].changed_fraction.iloc[0]
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert f"{fixed:.3f} /" in row


def test_second_study_section_reads_its_data(made):
    """The summary's second-study section: its headline and its per-regime rows recompute from data/study2.json."""
    from analysis.present import study_section

    out, _ = made
    text = (out / "summary.md").read_text()
    study2 = json.loads((out / "data" / "study2.json").read_text())
    assert f"**{study_section.headline2(study2)}**" in text
    for env, block in study2["envs"].items():
        for j, r in enumerate(block["regimes"]):
            e = block["controllers"]["original"]["minimum"]["per_regime"][j]
            row = next(line for line in text.splitlines()
                       if line.startswith(f"| {env} | {study_section._regime_name(r)} | minimum (secondary) | "))
            assert row.split(" | ")[3] == f"{e['fraction']:.1%} [{e['ci_low']:.1%}, {e['ci_high']:.1%}]"
    assert "- second learning-loop study: run here (backend host, reduced)" in text


def test_report_reads_committed_studies(contract, host, tmp_path, monkeypatch, report):
    """--studies: the committed H200 studies in the report, its header naming them (the rest measured here)."""
    from repro.core.paths import ROOT

    results = ROOT / "studies" / "results"
    studies = {"first": results / "preregistered_cupy.json", "second": results / "preregistered_2_cupy.json"}
    rep = report.measure(host, in_repo_sources(report, contract), contract, progress=lambda *_: None, studies=studies, **QUICK)
    assert rep.study2 == json.loads(studies["second"].read_text()) and rep.study2["as_preregistered"]
    assert rep.header["studies"]["second"] == "studies/results/preregistered_2_cupy.json (backend cupy, as pre-registered)"
    from repro.learning.study2 import EXPLORATORY_RESULTS

    assert rep.study2_exploratory == {k: json.loads(path.read_text()) for k, (path, _) in EXPLORATORY_RESULTS.items()}


def test_report_cli_bad_kernel_exits_2(tmp_path, capsys, report):
    assert report.main(["--out", str(tmp_path), "--backend", "host", "--kernel", str(tmp_path / "nope.cu")]) == 2
    assert "kernel file not found" in capsys.readouterr().err


def test_closed_loop_table_matches_data(made):
    out, _ = made
    text = (out / "summary.md").read_text()
    loops = json.loads((out / "data" / "closed_loop.json").read_text())
    lines = text.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| controller | λ min |")):]  # figure 8's
    for name, r in loops.items():
        row = next(line for line in table if line.startswith(f"| {name} | "))
        assert f"10^{r['log10_q_pi_agree_min']:.1f}" in row and f"{r['q_pi_agree_final']:.3f}" in row
    ablation = pd.read_csv(out / "data" / "ablation.csv")
    original = ablation[ablation.variant == "original"].collapse_fraction.iloc[0]
    assert f"| original | {original:.1%} |" in text


def test_a_candidate_travels_to_every_section(contract, host, tmp_path, report):
    """A floor raised to 0.2 (never at the documented 0.05) and a decay of 0.997: the whole report is the
    candidate's, shows both properties failing, and says so."""
    raised = 0.2
    path = tmp_path / "floor_raised.cu"
    path.write_text(contract.source("fixed").with_defines(MIN_LAMBDA=raised, LAMBDA_DECAY_RATE=0.997).text)
    sources = in_repo_sources(report, contract) | {"fixed": contract.source("fixed", path)}
    out = tmp_path / "out"
    report.write(report.measure(host, sources, contract, progress=lambda *_: None, **QUICK), out, lambda *_: None)
    loops = json.loads((out / "data" / "closed_loop.json").read_text())
    # the closed loop ran the candidate: its λ never goes below the raised floor, which it settles at
    assert loops["fixed"]["kernel"] == str(path)
    assert loops["fixed"]["lambda_min"] >= np.float32(raised) and loops["fixed"]["settled_floor"] == np.float32(raised)
    ablation = pd.read_csv(out / "data" / "ablation.csv")
    assert ablation.variant.str.startswith("candidate (").sum() == 1
    robust = pd.read_csv(out / "data" / "robustness.csv")
    assert set(robust.controller) == {"fixed", "original"}
    study = json.loads((out / "data" / "study.json").read_text())
    assert study["kernels"] == {"fixed": str(path)}
    text = (out / "summary.md").read_text()
    assert _table_cell(text, "floor", 4) == "**FAIL**" and _table_cell(text, "steps_to_halve", 4) == "**FAIL**"
    assert "**fixed: steps_to_halve fails**" in text and str(path) in text


def test_generated_files_carry_no_absolute_path_of_this_machine(made):
    """Provenance: kernels are named relative to the repository in every text file the report writes."""
    from repro.core.paths import ROOT

    out, _ = made
    texts = [p for p in out.rglob("*") if p.suffix in (".md", ".json", ".csv")]
    assert texts
    for path in texts:
        assert str(ROOT) not in path.read_text(), path.name
    header = json.loads((out / "data" / "properties.json").read_text())["header"]
    assert header["kernels"]["fixed"]["path"] == "kernels/rl_q_distill_lambda_controller.cu"


def test_cold_start_and_design_tables_read_their_data(made, contract):
    """Issue 35's section: a row per contract entry (the stateful peers too) in both tables, each cell it states
    read from data/."""
    out, _ = made
    text = (out / "summary.md").read_text()
    warm = pd.read_csv(out / "data" / "warm_up.csv")
    design = pd.read_csv(out / "data" / "design_measures.csv")
    assert list(design.controller) == ["fixed", "original", *contract.peers(), *contract.stateful_peers()]
    for r in warm.itertuples():
        row = next(line for line in text.splitlines() if line.startswith(f"| {r.controller} | {r.scenario} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3].startswith(f"{r.lambda_after:.4g} (") and cells[4] == f"{r.lowest:.4g} ({r.lowest_step})"
    header = next(line for line in text.splitlines() if line.startswith("| controller | rise |"))
    loss_at = [c.strip() for c in header.strip("|").split("|")].index("warm-up loss")
    for r in design.itertuples():
        row = next(line for line in text.splitlines() if line.startswith(f"| {r.controller} | ")
                   and line.count("|") == header.count("|"))
        assert [c.strip() for c in row.strip("|").split("|")][loss_at] == f"{r.warm_up_loss:.1%}"
    assert "![" in text and "](fig15_warm_up.png)" in text and "](fig16_design_measures.png)" in text

