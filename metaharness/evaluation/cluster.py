"""Evaluations on a cluster: the context in which the evaluator's joblib jobs go to a Dask scheduler or a Ray
cluster, shared by ``metaharness optimize`` and by each cell of ``metaharness bench harness``.

The evaluator runs its examples through joblib (``metaharness.evaluation.evaluator``); inside ``cluster``
joblib's backend is the cluster's, so the examples' sandboxes run on its workers while every model call comes back
to this process (through the evaluator's proxy), where the spend is journaled and the caps hold.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from joblib import parallel_config

from metaharness.errors import InputError

CLUSTER_TIMEOUT = 10  # seconds to reach a cluster's scheduler before giving up


@contextmanager
def cluster(dask_scheduler: str | None, ray_address: str | None) -> Iterator[None]:
    """Evaluations on a cluster while inside: joblib's ``dask`` backend on the scheduler at ``dask_scheduler``, or
    its ``ray`` backend on the Ray cluster at ``ray_address`` (the evaluator's jobs go where joblib sends them; model
    calls come back to this process). Nothing changes when neither is given. The command line enters it inside its
    Ctrl-C handler (``StopOnCtrlC``), since the clients start threads. InputError when a cluster cannot be reached
    or its package is missing."""
    if dask_scheduler and ray_address:
        raise InputError("--dask-scheduler and --ray-address each name a cluster: give one of them.")
    if dask_scheduler:
        try:
            # Optional (the cluster extra): loaded only for a Dask cluster.
            from distributed import Client
        except ImportError:
            raise InputError(
                "--dask-scheduler needs dask.distributed here and on every worker: pip install 'metaharness[cluster]'."
            ) from None
        try:
            client = Client(dask_scheduler, timeout=CLUSTER_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(
                f"Cannot reach the Dask scheduler at {dask_scheduler} ({str(exc).splitlines()[0]}); check the address "
                "(tcp://HOST:8786) and that the scheduler is running."
            ) from None
        try:
            with parallel_config(backend="dask"):
                yield
        finally:
            client.close()
    elif ray_address:
        try:  # by name: Ray is an optional extra, absent where the types are checked
            ray = importlib.import_module("ray")
            register_ray = importlib.import_module("ray.util.joblib").register_ray
        except ImportError:
            raise InputError(
                "--ray-address needs Ray here and on every node: pip install 'metaharness[ray]'."
            ) from None
        register_ray()
        try:
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(
                f"Cannot reach the Ray cluster at {ray_address} ({str(exc).splitlines()[0]}); check the address "
                "(ray://HOST:10001, or auto on a node of the cluster)."
            ) from None
        try:
            with parallel_config(backend="ray"):
                yield
        finally:
            ray.shutdown()
    else:
        yield
