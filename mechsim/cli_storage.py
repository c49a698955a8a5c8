"""`mechsim estimate --storage TIER`: data loading and checkpoint I/O of the estimated step.

Registered by cli.py's estimate parser (add_args) and printed after the step table (print_storage).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("storage (train): data loading and checkpoints on a storage tier")
    g.add_argument("--storage", default=None, metavar="TIER",
                   help="storage tier (`mechsim.hwdb.storage.list_storage()`: dgx_h100_local_nvme, "
                        "superpod_parallel_fs, meta_tectonic, deepseek_3fs, aws_s3, h200_vm_disk); printed under "
                        "the step table, not in --json (API: mechsim.estimate_storage)")
    g.add_argument("--storage-write-GBps", type=float, default=None, help="measured write GB/s per node (replaces the tier's)")
    g.add_argument("--storage-read-GBps", type=float, default=None, help="measured read GB/s per node (replaces the tier's)")
    g.add_argument("--checkpoint", default="sync", choices=("sync", "async", "in_memory"),
                   help="sync (torch.save / DCP save), async (DCP async_save, Megatron async save), "
                        "in_memory (a peer node's host memory)")
    g.add_argument("--checkpoint-every-min", type=float, default=30.0, help="interval priced beside the Daly optimum")
    g.add_argument("--loader", default="pretokenized", choices=("pretokenized", "text"),
                   help="dataset format: pre-tokenised uint16/uint32 shards, or raw text tokenised by the loader")
    g.add_argument("--loader-workers", type=int, default=4, help="loader processes (CPU cores) per GPU; 0 = in the step")
    g.add_argument("--loader-sharing", default="file_descriptor", choices=("file_descriptor", "file_system"),
                   help="torch.multiprocessing sharing strategy of the workers' batches (file_descriptor: torch's "
                        "Linux default, each batch's fd fetched from its worker; file_system: by file name)")
    g.add_argument("--loader-persistent-workers", action="store_true",
                   help="DataLoader(persistent_workers=True): no worker start-up after the first epoch")
    g.add_argument("--loader-steps-per-epoch", type=int, default=None, metavar="N",
                   help="steps in one epoch: spreads the loader's per-epoch start-up over them (default: not counted)")


def wanted(a: argparse.Namespace) -> bool:
    return any(getattr(a, k, None) is not None for k in ("storage", "storage_write_GBps", "storage_read_GBps"))


def print_storage(a: argparse.Namespace, workload: Any, hw: Any, est: Any) -> None:
    """The storage section under the step table."""
    from .sim.storage import LoaderSpec, estimate_storage
    if a.checkpoint_every_min <= 0:
        raise ValueError(f"--checkpoint-every-min must be > 0, got {a.checkpoint_every_min}")
    spec = LoaderSpec(format=a.loader, workers=a.loader_workers, vocab=workload.model.vocab, sharing=a.loader_sharing,
                      persistent_workers=a.loader_persistent_workers, steps_per_epoch=a.loader_steps_per_epoch)
    r = estimate_storage(workload, hw, a.storage, storage_write_GBps=a.storage_write_GBps,
                         storage_read_GBps=a.storage_read_GBps, loader=spec, checkpoint=a.checkpoint, est=est)
    every = a.checkpoint_every_min * 60.0
    ck, rel = r.checkpoint, r.reliability
    ld = r.loader
    print(f"\nstorage {ck.storage}: data loading {ld.load_s * 1e3:.2f} ms/step ({ld.bound}-bound; main process "
          f"{ld.handover_s * 1e3:.2f} ms per batch, {spec.sharing}), exposed {ld.exposed_s * 1e3:.2f} ms -> step "
          f"{r.step_time_s * 1e3:.2f} ms; start-up {ld.startup_s * 1e3:.0f} ms per epoch")
    print(f"checkpoint {ck.bytes / 1e9:.1f} GB ({ck.mode}, {ck.writers} writers): blocks {ck.blocking_s:.1f} s, "
          f"safe after {ck.persist_s:.1f} s, restore {ck.restore_s:.1f} s")
    print(f"every {a.checkpoint_every_min:g} min: saves cost {rel.save_share(every):.2%} of wall time, goodput "
          f"{rel.goodput_at(every):.2%}; Daly optimum {rel.interval_s / 60:.1f} min: saves {rel.save_share():.2%}, "
          f"failures + restarts {rel.failure_share():.2%}, goodput {rel.goodput:.2%} (job MTBF {rel.job_mtbf_s / 3600:.1f} h)")
