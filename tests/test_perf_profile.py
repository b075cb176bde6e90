"""ProfilePerfModel: measured operator profiles (long format and Vidur layout), interpolation,
and its contract with PerfModel (shapes, vectorization, errors)."""
import csv
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from common.errors import HarnessError
from engines.perf import LINEAR_PARTS, Deployment, PerfModel
from engines.perf.curves import Curve, CurveFamily
from engines.perf.factory import build_perf_model
from engines.perf.measured import LONG_COLUMNS, OperatorProfile, ProfilePerfModel, load_profile

ROOT = Path(__file__).resolve().parent.parent
VIDUR = ROOT / "tests" / "fixtures" / "profiles" / "vidur_llama2_7b_a100"

# Grid the test profiles are sampled on (profile_format.md, "Recommended grid").
TOKENS = sorted({1, 2, 4, 8, 16, 32, 48, 64, 96} | {128 * k for k in range(1, 97)} | {128 * k + 1 for k in range(1, 96)})
CHUNKS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
CONTEXTS = list(range(0, 16385, 512))


def _one(perf: PerfModel, n, c, key: str) -> float:
    comp = perf._components(np.asarray([n], dtype=np.float64), np.asarray([c], dtype=np.float64))
    return float(comp[key][0])


def write_grid_profile(perf: PerfModel, path: Path) -> Path:
    """A long-format profile sampled FROM the analytical model: what a profiler would measure if
    the GPU behaved exactly like PerfModel."""
    rows = []
    for t in TOKENS:
        rows.append(["linear", t, "", "", perf.tp, repr(_one(perf, [t], [0], "linear"))])
        rows.append(["elementwise", t, "", "", perf.tp, repr(_one(perf, [t], [0], "elementwise"))])
    for n in CHUNKS:
        for c in CONTEXTS:
            rows.append(["attention_prefill", n, c, "", perf.tp, repr(_one(perf, [n], [c], "attention"))])
    for b in DECODE_BATCHES:
        for c in CONTEXTS:
            rows.append(["attention_decode", "", c, b, perf.tp, repr(_one(perf, [1] * b, [c] * b, "attention"))])
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(LONG_COLUMNS)
        w.writerows(rows)
    return path


def random_mixed_batches(rng, rows=300, width=64, max_context=12000):
    """Decodes at random contexts plus 0-2 prefill chunks per row, zero-padded."""
    n = np.zeros((rows, width), dtype=np.int64)
    c = np.zeros((rows, width), dtype=np.int64)
    for r in range(rows):
        k = int(rng.integers(0, width - 2))
        n[r, :k] = 1
        c[r, :k] = rng.integers(1, max_context, k)
        for j in range(int(rng.integers(0 if k else 1, 3))):
            n[r, k + j] = rng.integers(2, 2049)
            c[r, k + j] = rng.integers(0, 8000)
        perm = rng.permutation(width)
        n[r], c[r] = n[r, perm], c[r, perm]
    return n, c


DEPLOYMENTS = {
    "mistral7b": dict(model="mistral-7b", gpu="a100-80g-sxm"),  # sliding window
    "yi34b_tp2": dict(model="yi-34b", gpu="a100-80g-sxm", tp=2),
    "yi34b_pp2": dict(model="yi-34b", gpu="a100-80g-sxm", tp=1, pp=2),
    "llama70b_tp4pp2_a40": dict(model="llama2-70b", gpu="a40", tp=4, pp=2, topology="paper_a40"),
}


@pytest.fixture(scope="module", params=list(DEPLOYMENTS))
def pair(request, tmp_path_factory):
    # The profile path prices a mixed decode batch as the mean of its per-context times: exact for a
    # decode cost linear in each context (the FA2-paper kernel). The default stack's split-KV decode
    # (engines/perf/split_kv.py) costs a mixed batch its longest sequence's CTAs, which no grid of
    # equal-length batches holds: test_split_kv_mixed_batches_are_what_a_grid_cannot_hold.
    d = Deployment.create(**DEPLOYMENTS[request.param], attention_kernel="fa2-ideal")
    analytical = PerfModel(d)
    path = write_grid_profile(analytical, tmp_path_factory.mktemp("prof") / f"{request.param}.csv")
    return analytical, ProfilePerfModel(d, path)


# ------------------------------------------------------------ reproduces the analytical model
def test_split_kv_mixed_batches_are_what_a_grid_cannot_hold(tmp_path):
    # the default stack: equal-length decode batches come back as profiled, a mixed one does not
    d = Deployment.create(model="yi-34b", gpu="a100-80g-sxm", tp=2)
    analytical = PerfModel(d)
    profiled = ProfilePerfModel(d, write_grid_profile(analytical, tmp_path / "yi.csv"))
    equal = (np.ones((1, 32)), np.full((1, 32), 2048))
    assert profiled.batch_times(*equal)[0] == pytest.approx(analytical.batch_times(*equal)[0], rel=0.02)
    mixed = (np.ones((1, 48)), np.array([[8000] + [200] * 47]))  # one long sequence among short ones
    assert analytical.batch_times(*mixed)[0] > 1.05 * profiled.batch_times(*mixed)[0]


def test_grid_profile_reproduces_analytical_on_mixed_batches(pair):
    analytical, profiled = pair
    n, c = random_mixed_batches(np.random.default_rng(1))
    want, got = analytical.batch_times(n, c), profiled.batch_times(n, c)
    assert np.all(want > 0)
    assert np.max(np.abs(got / want - 1)) < 0.02
    ws, gs = analytical.stage_times(n, c), profiled.stage_times(n, c)
    assert ws.shape == gs.shape == (n.shape[0], analytical.pp)
    assert np.max(np.abs(gs / ws - 1)) < 0.02
    wl, gl = analytical.pipeline_latency(n, c), profiled.pipeline_latency(n, c)
    assert np.max(np.abs(gl / wl - 1)) < 0.02


@pytest.mark.parametrize("batch", [
    ([4096], [0]), ([512], [3584]), ([257], [0]), ([256], [0]), ([1] * 32, [4096] * 32),
    ([1] * 200, list(range(100, 20100, 100))), ([512] + [1] * 100, [1024] + [3000] * 100),
])
def test_grid_profile_reproduces_paper_shapes(pair, batch):
    analytical, profiled = pair
    want, got = analytical.iteration_time(*batch), profiled.iteration_time(*batch)
    assert got == pytest.approx(want, rel=0.02)


def test_breakdown_parts_sum_and_keep_analytical_extras(pair):
    analytical, profiled = pair
    b = profiled.breakdown([512, 1, 1], [0, 1000, 3000])
    a = analytical.breakdown([512, 1, 1], [0, 1000, 3000])
    parts = ("linear", "attention", "elementwise", "tp_comm", "embedding", "lm_head", "cpu_overhead")
    assert sum(b[k] for k in parts) == pytest.approx(b["total"], rel=1e-12)
    assert sum(b[k] for k in LINEAR_PARTS) == pytest.approx(b["linear"], rel=1e-12)
    for k in ("tp_comm", "embedding", "lm_head", "cpu_overhead", "pp_send", "stage", "layers"):
        assert b[k] == a[k]
    assert profiled.kv_capacity_tokens() == analytical.kv_capacity_tokens()


# ------------------------------------------------------------ vectorization contract
def test_vectorized_equals_row_by_row(pair):
    _, profiled = pair
    n, c = random_mixed_batches(np.random.default_rng(2), rows=40)
    whole = profiled.batch_times(n, c)
    rows = np.array([profiled.batch_times(n[i:i + 1], c[i:i + 1])[0] for i in range(len(n))])
    assert np.array_equal(whole, rows)
    single = np.array([profiled.iteration_time(n[i], c[i]) for i in range(len(n))])
    assert np.array_equal(whole, single)
    stages = profiled.stage_times(n, c)
    assert np.array_equal(stages, np.stack([profiled.stage_times(n[i], c[i]) for i in range(len(n))]))


def test_shapes_padding_and_empty_rows(pair):
    _, profiled = pair
    n, c = random_mixed_batches(np.random.default_rng(3), rows=12, width=16)
    flat = profiled.batch_times(n, c)
    cube = profiled.batch_times(n.reshape(3, 4, 16), c.reshape(3, 4, 16))
    assert cube.shape == (3, 4) and np.array_equal(cube.ravel(), flat)
    padded = profiled.batch_times(np.pad(n, ((0, 0), (0, 5))), np.pad(c, ((0, 0), (0, 5))))
    assert np.array_equal(padded, flat)
    assert profiled.batch_times(np.zeros((2, 3), int), np.zeros((2, 3), int)).tolist() == [0.0, 0.0]


# ------------------------------------------------------------ Vidur layout
@pytest.fixture(scope="module")
def vidur():
    d = Deployment.create(model="llama2-7b", gpu="a100-80g-sxm")
    return PerfModel(d), ProfilePerfModel(d, VIDUR)


def test_vidur_fixture_loads_per_gemm_and_in_seconds(vidur):
    _, p = vidur
    prof = p.profile
    assert prof.layout == "vidur" and prof.tp == 1
    assert set(prof.linear_parts) == set(LINEAR_PARTS)
    # mlp.csv at 4096 tokens: pre 1.911 + post 0.611 + up 3.366 + down 1.604 ms (medians, not means)
    assert float(prof.linear(np.array([4096.0]))[0]) == pytest.approx(7.492e-3)
    # attention.csv: 32 decodes at 1024 cached tokens took 0.300 ms
    assert float(prof.decode_batch(np.array([32.0]), np.array([1024.0]))[0]) == pytest.approx(0.3e-3)
    # prefill chunk 512 over 1024 cached tokens took 0.100 ms: per query token
    assert float(prof.prefill_per_token(np.array([512.0]), np.array([1024.0]))[0]) == pytest.approx(0.1e-3 / 512)
    assert len(prof.elementwise) == 2  # mlp.csv ops + attn_kv_cache_save
    b = p.breakdown([4096], [0])
    assert b["linear.mlp_up"] == pytest.approx(32 * 3.366e-3)


def test_vidur_fixture_times_are_sane_and_monotone(vidur):
    analytical, p = vidur
    prompts = [16, 64, 128, 256, 512, 1024, 2048, 4096]
    prefill = [p.iteration_time([L], [0]) for L in prompts]
    assert np.all(np.diff(prefill) > 0)
    decode_b = [p.iteration_time([1] * b, [1024] * b) for b in (1, 2, 8, 16, 32, 64, 128)]
    assert np.all(np.diff(decode_b) > 0)
    decode_c = [p.iteration_time([1] * 16, [c] * 16) for c in (64, 512, 1024, 2048, 4000)]
    assert np.all(np.diff(decode_c) > 0)
    chunk_c = [p.iteration_time([512], [c]) for c in (0, 512, 1024, 2048, 3072)]
    assert np.all(np.diff(chunk_c) > 0)
    # Hand-made numbers of the right magnitude: within 2x of the analytical model.
    for batch in [([4096], [0]), ([512], [0]), ([1] * 32, [1024] * 32), ([512] + [1] * 16, [0] + [2000] * 16)]:
        ratio = p.iteration_time(*batch) / analytical.iteration_time(*batch)
        assert 0.5 < ratio < 2.0, (batch, ratio)


def test_vidur_tp2_rows_and_shape_filter():
    d2 = Deployment.create(model="llama2-7b", gpu="a100-80g-sxm", tp=2)
    p2 = ProfilePerfModel(d2, VIDUR)
    assert float(p2.profile.linear(np.array([4096.0]))[0]) == pytest.approx(7.492e-3 / 2)
    # The fixture's Llama-2-13B-shaped rows are ignored for Llama-2-7B...
    p1 = ProfilePerfModel(Deployment.create(model="llama2-7b", gpu="a100-80g-sxm"), VIDUR)
    assert float(p1.profile.linear(np.array([128.0]))[0]) == pytest.approx((0.070 + 0.025 + 0.125 + 0.064) * 1e-3)
    # ...and a model with no rows of its shape is refused.
    with pytest.raises(HarnessError, match=r"mlp\.csv: no rows for yi-34b's shape"):
        ProfilePerfModel(Deployment.create(model="yi-34b", gpu="a100-80g-sxm"), VIDUR)


# ------------------------------------------------------------ interpolation
def test_curve_interpolates_and_extrapolates_linearly():
    curve = Curve(np.array([1.0, 3.0, 7.0]), np.array([10.0, 20.0, 28.0]))
    q = np.array([0.0, 1.0, 2.0, 3.0, 5.0, 7.0, 9.0])
    assert curve(q).tolist() == [5.0, 10.0, 15.0, 20.0, 24.0, 28.0, 32.0]
    assert Curve(np.array([4.0]), np.array([2.0]))(np.array([1.0, 9.0])).tolist() == [2.0, 2.0]


def test_curve_family_is_exact_for_bilinear_functions_on_any_grid():
    f = lambda u, x: 3.0 + 2.0 * u + 0.5 * x + 0.25 * u * x  # noqa: E731
    u = np.array([1, 1, 1, 4, 4, 4, 8, 8, 8], dtype=float)
    x = np.array([0, 100, 300, 0, 100, 300, 0, 100, 300], dtype=float)
    full = CurveFamily(u, x, f(u, x))
    keep = ~((u == 8) & (x == 300))  # a triangle-ish grid: the fast path does not apply
    partial = CurveFamily(u[keep], x[keep], f(u[keep], x[keep]))
    assert full._grid is not None and partial._grid is None
    qu = np.array([1, 2, 5, 8, 10, 0.5, 3], dtype=float)
    qx = np.array([50, 0, 250, 300, 400, 600, 20], dtype=float)
    np.testing.assert_allclose(full(qu, qx), f(qu, qx), rtol=1e-12)
    np.testing.assert_allclose(partial(qu, qx), f(qu, qx), rtol=1e-12)


# ------------------------------------------------------------ bad files
def _long(tmp_path, rows, header=LONG_COLUMNS, name="p.csv"):
    path = tmp_path / name
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


GOOD_ROWS = [
    ["linear", 1, "", "", 1, 1e-4], ["linear", 4096, "", "", 1, 5e-3],
    ["elementwise", 1, "", "", 1, 1e-6], ["elementwise", 4096, "", "", 1, 1e-4],
    ["attention_prefill", 512, 0, "", 1, 5e-5], ["attention_decode", "", 1024, 8, 1, 4e-5],
]
TINY = Deployment.create(model="llama2-7b", gpu="a100-80g-sxm")


def test_minimal_long_profile_loads(tmp_path):
    p = ProfilePerfModel(TINY, _long(tmp_path, GOOD_ROWS))
    assert p.profile.layout == "long" and len(p.profile.digest) == 64
    assert p.iteration_time([512], [0]) > 0


@pytest.mark.parametrize("mutate, message", [
    (lambda rows: rows, None),
    (lambda rows: [r for r in rows if r[0] != "attention_decode"], r"no 'attention_decode' rows for tp=1"),
    (lambda rows: [r for r in rows if r[:2] != ["linear", 1]], r"'linear' needs at least 2 distinct num_tokens"),
    (lambda rows: rows + [["linear", 64, "", "", 1, 0.0]], r"line 8: column 'time_s' must be > 0, got 0\.0"),
    (lambda rows: rows + [["linear", 64, "", "", 1, -1e-3]], r"line 8: column 'time_s' must be > 0"),
    (lambda rows: rows + [["linear", 64, "", "", 1, "fast"]], r"line 8: column 'time_s' is not a number"),
    (lambda rows: rows + [["linear", "", "", "", 1, 1e-3]], r"line 8: column 'num_tokens' is empty"),
    (lambda rows: rows + [["attention_decode", "", 10, 0, 1, 1e-3]], r"line 8: column 'batch_size' must be >= 1"),
    (lambda rows: rows + [["matmul", 64, "", "", 1, 1e-3]], r"line 8: column 'op' is 'matmul'"),
    (lambda rows: [r[:4] + [2] + r[5:] for r in rows], r"no rows for tp=1 \(column 'tp' has: 2\)"),
])
def test_bad_long_profiles_name_file_and_column(tmp_path, mutate, message):
    path = _long(tmp_path, mutate([list(r) for r in GOOD_ROWS]))
    if message is None:
        ProfilePerfModel(TINY, path)
        return
    with pytest.raises(HarnessError, match=message) as e:
        ProfilePerfModel(TINY, path)
    assert str(path) in str(e.value)


def test_missing_column_and_missing_file(tmp_path):
    header = [h for h in LONG_COLUMNS if h != "context_len"]
    path = _long(tmp_path, [[r[0], r[1], r[3], r[4], r[5]] for r in GOOD_ROWS], header=header)
    with pytest.raises(HarnessError, match=r"p\.csv: missing column 'context_len'"):
        ProfilePerfModel(TINY, path)
    with pytest.raises(HarnessError, match=r"nope\.csv: no such file"):
        ProfilePerfModel(TINY, tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(HarnessError, match=r"empty\.csv: empty file"):
        ProfilePerfModel(TINY, empty)


def _vidur_copy(tmp_path, edit_mlp=None, edit_attn=None):
    d = tmp_path / "vidur"
    d.mkdir()
    for name, edit in (("mlp.csv", edit_mlp), ("attention.csv", edit_attn)):
        text = (VIDUR / name).read_text()
        (d / name).write_text(edit(text) if edit else text)
    return d


def test_bad_vidur_profiles(tmp_path):
    d = tmp_path / "only_mlp"
    d.mkdir()
    (d / "mlp.csv").write_text((VIDUR / "mlp.csv").read_text())
    with pytest.raises(HarnessError, match=r"only_mlp: missing file attention\.csv"):
        ProfilePerfModel(TINY, d)
    d = _vidur_copy(tmp_path, edit_mlp=lambda t: t.replace("time_stats.mlp_up_proj.median", "up_median"))
    with pytest.raises(HarnessError, match=r"mlp\.csv: missing column 'time_stats\.mlp_up_proj\.median'"):
        ProfilePerfModel(TINY, d)
    with pytest.raises(HarnessError, match=r"mlp\.csv: no rows for tp=4 \(column 'num_tensor_parallel_workers' has: 1, 2\)"):
        ProfilePerfModel(Deployment.create(model="llama2-7b", gpu="a100-80g-sxm", tp=4), VIDUR)
    lines = (VIDUR / "attention.csv").read_text().splitlines()
    bad = lines[:1] + [lines[1].replace(",0.02,", ",-0.02,", 1)] + lines[2:]
    d2 = tmp_path / "neg"
    d2.mkdir()
    (d2 / "mlp.csv").write_text((VIDUR / "mlp.csv").read_text())
    (d2 / "attention.csv").write_text("\n".join(bad) + "\n")
    with pytest.raises(HarnessError, match=r"attention\.csv line 2: column 'time_stats\.attn_prefill\.median' must be > 0"):
        ProfilePerfModel(TINY, d2)


def test_profile_tp_must_match_deployment(tmp_path):
    prof = load_profile(VIDUR, 2, TINY.model)
    assert isinstance(prof, OperatorProfile)
    with pytest.raises(HarnessError, match="measured at tp=2, deployment has tp=1"):
        ProfilePerfModel(TINY, prof)


# ------------------------------------------------------------ the perf config group
def test_perf_config_group(tmp_path):
    conf = ROOT / "experiments" / "perf"
    analytical = OmegaConf.load(conf / "analytical.yaml")
    profile = OmegaConf.load(conf / "profile.yaml")
    assert type(build_perf_model(TINY, analytical)) is PerfModel
    assert type(build_perf_model(TINY, None)) is PerfModel
    assert OmegaConf.is_missing(profile, "path")
    with pytest.raises(HarnessError, match="perf=profile needs perf.path"):
        build_perf_model(TINY, profile)
    profile.path = str(VIDUR)
    assert isinstance(build_perf_model(TINY, profile), ProfilePerfModel)
    with pytest.raises(HarnessError, match="perf.kind must be"):
        build_perf_model(TINY, {"kind": "magic"})
