"""harness.analysis.perf_model.perf_figures: every figure is labelled and has data; save_all writes the PNGs."""
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from engines.perf import Deployment
from engines.perf.measured import ProfilePerfModel
from harness.analysis.perf_model import perf_figures as pf
from harness.analysis import style

VIDUR = Path(__file__).resolve().parent / "fixtures" / "profiles" / "vidur_llama2_7b_a100"


def _check(fig: Figure) -> None:
    assert isinstance(fig, Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert axes
    for ax in axes:
        shared = ax.get_shared_x_axes().get_siblings(ax)  # a shared x axis is labelled once, at the bottom
        assert any(a.get_xlabel().strip() for a in shared), "x axis without label"
        assert ax.get_ylabel().strip(), "y axis without label"
        assert ax.get_title().strip() or (fig._suptitle is not None and fig._suptitle.get_text().strip())
        data = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
        data = [d for d in data if d.size > 1]  # axhline has 2 points; curves have many
        assert data, "axes without curves"
        assert all(np.all(np.isfinite(d)) for d in data)
        assert any(np.ptp(d) > 0 for d in data), "only flat lines"
    labelled = [ax for ax in axes if ax.get_legend() is not None]
    assert labelled or len(axes[0].get_lines()) == 1


@pytest.mark.parametrize("name, build", pf.FIGURES, ids=[n for n, _ in pf.FIGURES])
def test_figure_is_labelled_and_has_lines(name, build):
    fig = build()
    try:
        _check(fig)
        units = " ".join(ax.get_ylabel() for ax in fig.axes)
        assert any(u in units for u in ("(ms)", "(µs)", "(%)")), units
    finally:
        style.close(fig)


def test_figures_accept_profile_models():
    d = Deployment.create(model="llama2-7b", gpu="a100-80g-sxm")
    prof = ProfilePerfModel(d, VIDUR)
    for fig in (pf.fig_per_token_times({"Llama-2-7B (Vidur-layout fixture)": prof}),
                pf.fig_piggyback_cost(prof, decode_batches=(8, 32)),
                pf.fig_tile_quantization(prof, max_tokens=512),
                pf.fig_chunking_overhead(prof, prompts=(2048, 4096), chunks=(256, 512, 1024))):
        try:
            _check(fig)
        finally:
            style.close(fig)


def test_chunking_overhead_numbers_match_the_model():
    perf = pf.default_models()["Yi-34B TP-2 · 2× A100-80GB PCIe"]
    whole = pf.chunked_prefill_time(perf, 4096, 4096)
    assert whole == pytest.approx(perf.iteration_time([4096], [0]))
    chunked = pf.chunked_prefill_time(perf, 4096, 512)
    assert chunked == pytest.approx(sum(perf.iteration_time([512], [s]) for s in range(0, 4096, 512)))
    assert 1.0 < chunked / whole < 1.35  # README: +5.8…6.7 % at chunk 512


def test_save_all_writes_pngs(tmp_path):
    paths = pf.save_all(tmp_path / "figs")
    assert [p.name for p in paths] == [f"{n}.png" for n, _ in pf.FIGURES]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_cli_usage(capsys, tmp_path):
    assert pf.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "usage" in out and "out_dir=" in out
    assert pf.main(["out_dir_typo=x"]) == 2
    assert "did you mean 'out_dir'" in capsys.readouterr().err
    assert pf.main([f"out_dir={tmp_path}"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{name}.png" for name, _ in pf.FIGURES)
