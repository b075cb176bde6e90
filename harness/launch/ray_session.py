"""Ray for the harness (docs/clusters.md): connect to a cluster by address (or start a local Ray
for the run), check that every job fits before any is submitted (a TCP connect first, so an
address nothing answers at is one line, not a minute of Ray's retries), submit each with its own
resource request, collect results as they finish. Used by the Ray launcher, by `figure=all` and
`nightly` with `launcher=ray`, and by the Ray probe executor (`search.executor=ray`)."""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence

from common.errors import HarnessError
from harness.launch.outcome import first_line
from harness.launch.resources import JobResources, RayRequest, check_room, ray_request

# A local Ray started for one run: no dashboard, a small object store (results are small), as the
# official hydra-ray-launcher does for CI (ray-project/ray#11966).
LOCAL_DEFAULTS = {"include_dashboard": False, "object_store_memory": 78643200}
CONNECT_TIMEOUT_S = 5.0
GCS_WAIT_S = "10"  # Ray's own connect loop (1 s per try, 20 by default), for a cluster by address


def check_reachable(address: str) -> None:
    """One TCP connect to a HOST:PORT address (ray://HOST:PORT too): a clear line at once instead
    of Ray's own minute of retries."""
    host, sep, port = address.removeprefix("ray://").removeprefix("http://").removeprefix("https://").rpartition(":")
    if not sep or not port.isdigit():
        if address not in ("auto", "local"):
            raise HarnessError(f"Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise HarnessError(f"Ray cluster at {address} is unreachable ({e.strerror or e}); nothing was submitted") from None


def connect(init: Mapping | None = None) -> bool:
    """Connect this process to Ray (`init`: ray.init's arguments; address None starts a local Ray,
    `auto` joins the one started on this machine, HOST:PORT a cluster). True when this call
    connected (the caller then shuts it down); False when this process already was (a job
    running inside a Ray task, a test's cluster)."""
    import ray

    if ray.is_initialized():
        return False
    kwargs = {k: v for k, v in dict(init or {}).items() if v is not None}
    address = kwargs.get("address") or os.environ.get("RAY_ADDRESS")
    if address:
        check_reachable(str(address))
    else:  # "local", not None: Ray would join the last `ray start` cluster recorded in /tmp/ray, even a dead one
        kwargs = {**LOCAL_DEFAULTS, **kwargs, "address": "local"}
    kwargs.setdefault("logging_level", logging.WARNING)
    wait = {"RAY_gcs_server_port_wait_time_s": GCS_WAIT_S} if address else {}
    with _environ(wait), _stderr_kept_on_success() as failed:
        try:
            ray.init(**kwargs)
        except (ConnectionError, TimeoutError, ValueError, RuntimeError) as e:
            failed.append(True)  # Ray's own retries logged to fd 2 are dropped: the line below says it
            first = first_line(e)
            if "InvalidAuthToken" in str(e.__cause__ or ""):
                first += (" (the cluster wants its token: export RAY_AUTH_MODE=token, with the token in "
                          "~/.ray/auth_token or $RAY_AUTH_TOKEN)")
            raise HarnessError(f"cannot connect to Ray{f' at {address}' if address else ''}: {first}; "
                               "nothing was submitted") from None
    return True


@contextlib.contextmanager
def _environ(values: Mapping[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if old[k] is None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)


@contextlib.contextmanager
def _stderr_kept_on_success():
    """File descriptor 2 into a file while Ray connects (its C++ core logs each retry there): put
    back on stderr if it connected, dropped if it did not (the caller says why in one line)."""
    failed: list[bool] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield failed
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode(errors="replace"))
                sys.stderr.flush()


def disconnect(connected: bool) -> None:
    if connected:
        import ray

        ray.shutdown()


def check_fits(jobs: Sequence[tuple[str, JobResources]], cluster: Sequence[Mapping] | None = None) -> None:
    """Every job fits on the Ray cluster (resources.check_room); `cluster`: its nodes' resources."""
    if cluster is None:  # the alive nodes' resources ({'CPU': 2.0, 'GPU': 4.0, ...})
        import ray

        cluster = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
    check_room(jobs, "the Ray cluster", "a node of the Ray cluster", [int(n.get("GPU", 0)) for n in cluster],
               max((int(n.get("CPU", 0)) for n in cluster), default=0))


def submit(fn: Callable, args: Sequence, res: JobResources, extra: Mapping | None = None):
    """One job as a Ray task with its resource request (`extra`: the launcher's own ray.remote
    options, which win); returns (object ref, placement group or None)."""
    import ray

    request: RayRequest = ray_request(res)
    options = {"max_retries": 0, **request.options, **dict(extra or {})}
    group = None
    if request.bundles:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group(list(request.bundles), strategy=request.strategy)
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
    return ray.remote(fn).options(**options).remote(*args), group


def as_completed(refs: Sequence) -> Iterator[tuple[int, object, BaseException | None]]:
    """(index, result, None) or (index, None, the error) for each ref, as each finishes: a job
    that raised or whose worker died is reported, never lets the others' results go."""
    import ray

    index = {ref: i for i, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                yield index[ref], ray.get(ref), None
            except Exception as e:  # RayTaskError (the job raised), WorkerCrashedError, ...
                yield index[ref], None, getattr(e, "cause", None) or e


def remove_groups(groups: Sequence) -> None:
    from ray.util.placement_group import remove_placement_group

    for g in groups:
        if g is not None:
            remove_placement_group(g)
