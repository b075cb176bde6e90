"""Hostile input to `python -m harness validate` and `calibrate` (issue 37): every run file, flag and
run the commands cannot use gives one line naming the file, the row and the column (or the flag),
exit 2 and nothing written; never a traceback, and never a number computed from a file read wrong.
The files are built here (a small synthetic run, one request at a time), each command run in-process
(the refusals come before any replay, so no subprocess's start-up is paid per case)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness.commands.main import main
from harness.validate.fit import unidentified
from harness.validate.runfile import read_run

DEPLOYMENT = ["model.name=tiny-llama", "hardware=cpu", "hardware.cpu_flops=1e11", "hardware.cpu_bandwidth=2e10",
              "perf.stack=ideal", "scheduler=sarathi", "scheduler.sarathi.token_budget=256", "max_model_len=512",
              "--kv-tokens", "16384"]


def _rows(n: int = 24, outputs: int | None = None) -> list[dict]:
    """A run of `n` requests 0.3 s apart, each served alone: first token 50 ms after its arrival, then
    one token every 10 ms."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        arrival, out = round(0.3 * i, 6), outputs or int(rng.integers(4, 16))
        times = [round(arrival + 0.05 + 0.01 * k, 6) for k in range(out)]
        rows.append({"request_id": i, "prompt_tokens": int(rng.integers(32, 200)), "output_tokens": out,
                     "arrival_s": arrival, "first_token_s": times[0], "last_token_s": times[-1], "token_times_s": times})
    return rows


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _edit(i: int, **changes) -> str:
    return _jsonl([r | changes if j == i else r for j, r in enumerate(_rows())])


def _csv(rows: list[dict], header_extra: str = "", row_extra: str = "") -> str:
    cols = ("request_id", "prompt_tokens", "output_tokens", "arrival_s", "first_token_s", "last_token_s")
    return ",".join(cols) + header_extra + "\n" + "".join(",".join(str(r[c]) for c in cols) + row_extra + "\n"
                                                         for r in rows)


def _bench(**changes) -> str:
    rows = _rows()
    obj = {"start_times": [r["arrival_s"] for r in rows], "ttfts": [r["first_token_s"] - r["arrival_s"] for r in rows],
           "latencies": [r["last_token_s"] - r["arrival_s"] for r in rows], "input_lens": [r["prompt_tokens"] for r in rows],
           "output_lens": [r["output_tokens"] for r in rows], "errors": [""] * len(rows),
           "itls": [[0.01] * (r["output_tokens"] - 1) for r in rows]}
    return json.dumps(obj | changes)


def _run(capsys, args: list[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _refused(capsys, tmp_path, command: str, run, message: str, *extra: str, out_name: str = "out") -> str:
    out = tmp_path / out_name
    code, _, err = _run(capsys, [command, run, *DEPLOYMENT, "--out", out, *extra])
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    return err


ROW4 = "line 4, column"  # the fourth request of the JSONL file, as every row refusal names it
FILES = {  # name: (file name, contents, what the one line says)
    "bool as a number": ("run.jsonl", _edit(3, prompt_tokens=True), f"{ROW4} prompt_tokens: not a number: True"),
    "scheduled before its arrival": ("run.jsonl", _edit(3, first_scheduled_s=0.1),
                                     f"{ROW4} first_scheduled_s: 0.1 s is not between the arrival"),
    "scheduled after its first token": ("run.jsonl", _edit(3, first_scheduled_s=50.0),
                                        f"{ROW4} first_scheduled_s: 50 s is not between"),
    "duplicate id": ("run.jsonl", _edit(3, request_id=2), f"{ROW4} request_id: 2 again (first at line 3)"),
    "fractional id": ("run.jsonl", _edit(3, request_id=2.5), f"{ROW4} request_id: not a whole number: 2.5"),
    "token times not ending at the last token": ("run.jsonl", _edit(3, last_token_s=60.0),
                                                 f"{ROW4} token_times_s: from 0.95 to"),
    "unknown column": ("run.jsonl", _jsonl([r | {"eror": "boom"} for r in _rows()]),
                       "line 1: unknown column(s) eror (known: prompt_tokens"),
    "unknown CSV column": ("run.csv", _csv(_rows(), ",latency_ms", ",1"), "row 1 (line 2): unknown column(s) latency_ms"),
    "CSV column twice": ("run.csv", _csv(_rows(), ",arrival_s", ",0"), "line 1: column(s) arrival_s given twice"),
    "NaN time": ("run.jsonl", _jsonl(_rows()).replace('"arrival_s": 0.9', '"arrival_s": NaN', 1),
                 f"{ROW4} arrival_s: not a time >= 0: nan"),
    "inf in CSV": ("run.csv", _csv(_rows()).replace(",0.9,", ",inf,", 1), "row 4 (line 5), column arrival_s: not a time"),
    "truncated mid-line": ("run.jsonl", _jsonl(_rows())[:700], "invalid JSON"),
    "empty CSV": ("run.csv", "", "empty file"),
    "no request finished": ("run.jsonl", _jsonl([r | {"error": "timeout"} for r in _rows()]),
                            "no request finished without an error (24 dropped)"),
    "bench key not a list": ("run.json", _bench(ttfts=5), "key ttfts: expected a list (one entry a request), got int"),
    "bench errors null": ("run.json", _bench(errors=None), "key errors: expected a list"),
    "bench itls entry not a list": ("run.json", _bench(itls=[5] * 24), "request 1, key itls: not a list of gaps"),
    "bench negative gap": ("run.json", _bench(itls=[[-0.01] * 3] * 24), "request 1, key itls: a gap that is not a time >= 0"),
    "bench missing key": ("run.json", json.dumps({k: v for k, v in json.loads(_bench()).items() if k != "latencies"}),
                          "missing key(s) latencies"),
}


@pytest.mark.parametrize("name", FILES)
def test_a_bad_run_file_is_one_line_naming_where(name, tmp_path, capsys):
    file_name, text, message = FILES[name]
    run = tmp_path / file_name
    run.write_text(text)
    for command in ("validate", "calibrate"):
        assert str(run) in _refused(capsys, tmp_path, command, run, message)


def test_a_directory_without_the_run_is_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("a: 1\n")
    _refused(capsys, tmp_path, "validate", tmp_path / "run", "not a harness run directory (no requests.parquet)")


@pytest.mark.parametrize("flag, value, message", [
    ("--max-error", "nan", "--max-error must be a fraction >= 0"),
    ("--max-error", "-0.1", "--max-error must be a fraction >= 0"),
    ("--max-error", "inf", "--max-error must be a fraction >= 0"),
    ("--kv-tokens", "0", "--kv-tokens must be a number of tokens >= 1, got 0"),
    ("--probe", "sarathi@nan", "--probe: expected SCHEDULER@QPS (a rate > 0)"),
])
def test_a_flag_value_that_means_nothing_is_refused(flag, value, message, tmp_path, capsys):
    run = tmp_path / "run.jsonl"
    run.write_text(_jsonl(_rows()))
    _refused(capsys, tmp_path, "validate", run, message, flag, value)


def test_out_where_the_command_cannot_write_is_refused_before_any_work(tmp_path, capsys):
    run = tmp_path / "run.jsonl"
    run.write_text(_jsonl(_rows()))
    code, _, err = _run(capsys, ["validate", run, *DEPLOYMENT, "--out", run])
    assert code == 2 and f"--out {run} is a file; validate writes a directory there" in err, err
    code, _, err = _run(capsys, ["calibrate", run, *DEPLOYMENT, "--out", tmp_path])
    assert code == 2 and f"--out {tmp_path} is a directory; calibrate writes a file there" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_a_bom_is_not_part_of_the_first_column(tmp_path):
    run = tmp_path / "run.csv"
    run.write_bytes(("\ufeff" + _csv(_rows())).encode())
    ids = [r.request_id for r in read_run(run).records]
    assert ids == list(range(24))  # read from the request_id column, not numbered in its absence
    (tmp_path / "ids.csv").write_text(_csv([r | {"request_id": 100 + i} for i, r in enumerate(_rows())]))
    run.write_bytes(("\ufeff" + (tmp_path / "ids.csv").read_text()).encode())
    assert [r.request_id for r in read_run(run).records] == [100 + i for i in range(24)]


def test_calibrate_refuses_a_factor_the_run_cannot_identify(tmp_path, capsys):
    """Prefill only (one output token each), one request at a time: every iteration runs one sequence,
    so a second of step_cpu_s and a second of seq_cpu_s cost the same; the fit would split them
    arbitrarily. Without seq_cpu_s the same run calibrates."""
    run = tmp_path / "run.jsonl"
    run.write_text(_jsonl(_rows(outputs=1)))
    _refused(capsys, tmp_path, "calibrate", run, "this run cannot identify seq_cpu_s: it cannot be told from step_cpu_s",
             out_name="cal.json")
    code, _, err = _run(capsys, ["calibrate", run, *DEPLOYMENT, "--factors", "flops_scale,step_cpu_s",
                                 "--out", tmp_path / "cal.json"])
    assert code == 0 and (tmp_path / "cal.json").is_file(), err


def test_a_factor_no_statistic_moves_with_is_unidentified():
    """The flat case, on a stand-in for the simulator: the statistics depend on flops_scale and
    step_cpu_s only (as when no iteration pays bandwidth): bandwidth_scale is refused, they are not."""
    def stats(p: dict[str, float]) -> np.ndarray:
        return np.array([0.1 / p["flops_scale"] + p["step_cpu_s"], 2 * p["step_cpu_s"] + p["seq_cpu_s"]])

    x = {"flops_scale": 0.5, "bandwidth_scale": 1.0, "step_cpu_s": 0.002, "seq_cpu_s": 0.001}
    assert unidentified(stats, x, tuple(x))[0] == ["bandwidth_scale"]
    assert unidentified(stats, x, ("flops_scale", "step_cpu_s", "seq_cpu_s")) == ([], "")
    # every iteration one sequence: step and seq enter alike
    assert unidentified(lambda p: np.array([p["step_cpu_s"] + p["seq_cpu_s"]]), x, ("step_cpu_s", "seq_cpu_s"))[0] == ["seq_cpu_s"]


def test_the_replay_keeps_the_engines_prefix_cache_and_refuses_a_tier_it_cannot_replay(tmp_path, capsys):
    """`engine.prefix_caching=true` turns the replayed engine's cache on, as it does in a run (it was
    read only from a scheduler's own key); a host KV tier, which the replay has not, is refused."""
    from harness.config import compose, experiment_config
    from harness.validate.replay import target_for
    run = tmp_path / "run.jsonl"
    run.write_text(_jsonl(_rows()))
    measured = read_run(run)
    base = [o for o in DEPLOYMENT if not o.startswith("--") and not o.isdigit()]
    assert target_for(measured, experiment_config(compose([*base, "engine.prefix_caching=true"]))).engine.prefix_caching
    assert not target_for(measured, experiment_config(compose(base))).engine.prefix_caching
    _refused(capsys, tmp_path, "validate", run, "validate replays without a host KV tier", "engine.kv_offload_gib=8")
