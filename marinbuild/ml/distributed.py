"""Starting a training or evaluation process of a multi-host job, the same way on real and simulated hosts.

``start_distributed(distributed)`` starts JAX distributed through levanter's ``DistributedConfig`` and says whether this
process is the lead (process 0). Where levanter's own code cannot run with several processes on the CPU, the fixes are
here, in one place, applied whenever a job has several processes (TPU hosts and simulated ones alike), so both kinds of
host run the same levanter code: ``host_side_eval_tags`` and ``host_side_packing`` (each docstring says what fails
without it)."""

from __future__ import annotations

from typing import Any

from marinbuild.run.resources import local_tpu_chips


def start_distributed(distributed: Any) -> bool:
    """Start JAX distributed as the payload's ``distributed`` says; whether this process is the lead (process 0).

    Every host starts through levanter's ``DistributedConfig.initialize`` here, before training: a TPU host (``True``:
    JAX finds the coordinator), a simulated one (a dict naming coordinator and process id) or a lone process
    (``False``). Hosts without chips use gloo. With several processes the eval tag arrays and lm-eval requests stay on
    the host (``host_side_eval_tags``, ``host_side_packing``)."""
    from levanter.distributed import DistributedConfig

    if distributed:
        cpu_collectives_unless_tpu()
    if isinstance(distributed, dict):
        config = DistributedConfig(
            coordinator_address=distributed["coordinator_address"],
            num_processes=int(distributed["num_processes"]),
            process_id=int(distributed["process_id"]),
        )
    else:
        config = DistributedConfig(initialize_jax_distributed=bool(distributed))
    config.initialize()
    import jax

    if jax.process_count() > 1:
        host_side_eval_tags()
        host_side_packing()
    return int(jax.process_index()) == 0


def host_side_eval_tags() -> None:
    """Keep the tag arrays of levanter's evaluation datasets on the host (numpy), as its loader expects:
    ``DomainTaggedDataset``'s ``jnp.asarray`` under the global mesh spans every process's device with several CPU
    processes, which the host-side batching rejects. Applied to every job of several processes, TPU or not, so both run
    the same levanter code."""
    import numpy as np
    from levanter.eval import DomainTaggedDataset

    def compute_tag_arrays(self: Any) -> list[Any]:
        arrays = []
        for _dataset, tags in self.datasets:
            array = np.zeros(self.num_tags, dtype=np.int32)
            array[[self.tag_to_index[tag] for tag in tags]] = 1
            arrays.append(array)
        return arrays

    DomainTaggedDataset._compute_tag_arrays = compute_tag_arrays


def cpu_collectives_unless_tpu() -> None:
    """Collectives across the processes of a slice run on CPU through gloo when this host has no TPU."""
    if local_tpu_chips() == 0:
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def host_side_packing() -> None:
    """Pack lm-eval's requests into host-side arrays, as levanter's batching of them expects.

    levanter's ``_pack_requests`` uses ``hax.named`` under the trainer's global mesh: with several CPU processes each
    array spans every process's device and ``stack_batches`` rejects it ("incompatible devices"). Packing under
    ``local_cpu_mesh`` keeps the examples on this host; process 0 broadcasts each batch itself. Applied with explicit
    coordinators (no TPU), and in training with several processes."""
    import levanter.eval_harness as harness
    from levanter.utils.jax_utils import local_cpu_mesh

    pack = harness._pack_requests
    if getattr(pack, "host_side", False):
        return

    def pack_requests(*args: Any, **kwargs: Any) -> Any:
        with local_cpu_mesh():
            return pack(*args, **kwargs)

    pack_requests.host_side = True  # type: ignore[attr-defined]
    harness._pack_requests = pack_requests
