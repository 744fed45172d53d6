"""Data-parallel training: one process per device, started by torchrun (torch.distributed).

torchrun (or any launcher that sets the same variables) tells each process its place: WORLD_SIZE
processes in all, this one's RANK among them and its LOCAL_RANK on its machine, and where they meet
(MASTER_ADDR:MASTER_PORT). Without these variables nothing here touches torch.distributed, and
training is one ordinary process.

A launched process trains on cuda:LOCAL_RANK with NCCL, or on the CPU with gloo. Its model is
wrapped in DistributedDataParallel, which sums the processes' gradients during the backward pass.
Every process computes the same batch order; an update takes world × accum_steps consecutive
batches, and each process works on its share of them (see `step.optimizer_update`). Rank 0 alone validates,
prints and writes files; the others wait for it, then take its verdict (`Group.broadcast`).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .errors import MhatrainError

LAUNCH_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
MEETING_VARS = ("MASTER_ADDR", "MASTER_PORT")
# How long a process waits for the others: long, since they all wait while rank 0 validates
# (decoding the validation set) and writes checkpoints.
TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class Launch:
    """What the launcher says about this process."""

    world: int
    rank: int
    local_rank: int


def read_launch(env=os.environ) -> Launch | None:
    """The launcher's variables, checked; None when no launcher started this process."""
    present = [name for name in LAUNCH_VARS if name in env]
    if not present:
        return None
    missing = [name for name in (*LAUNCH_VARS, *MEETING_VARS) if not env.get(name)]
    if missing:
        raise MhatrainError(
            f"{', '.join(present)} set but not {', '.join(missing)}: start several processes with "
            f"torchrun (see docs/distributed.md), or unset {', '.join(present)} to train in one process"
        )
    values = {}
    for name in (*LAUNCH_VARS, "MASTER_PORT", *(["LOCAL_WORLD_SIZE"] if env.get("LOCAL_WORLD_SIZE") else [])):
        try:
            values[name] = int(env[name])
        except ValueError:
            raise MhatrainError(f"{name}={env[name]!r} is not an integer") from None
    world, rank, local_rank = values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"]
    if world < 1:
        raise MhatrainError(f"WORLD_SIZE={world}: there must be at least one process")
    if not 0 <= rank < world:
        raise MhatrainError(f"RANK={rank} with WORLD_SIZE={world}: ranks go from 0 to {world - 1}")
    local_world = values.get("LOCAL_WORLD_SIZE", world)
    if not 0 <= local_rank < local_world:
        raise MhatrainError(
            f"LOCAL_RANK={local_rank} with LOCAL_WORLD_SIZE={local_world}: local ranks go from 0 to {local_world - 1}"
        )
    return Launch(world, rank, local_rank)


def is_main_process(env=os.environ) -> bool:
    """True unless a launcher made this process a rank other than 0 (for printing only)."""
    return env.get("RANK", "0") == "0"


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """The device that train.device names; a launched process on CUDA takes the GPU of its LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise MhatrainError(f"train.device={name} but CUDA is not available on this machine")
    if local_rank is None or device.type != "cuda":
        return device
    if device.index is not None:
        raise MhatrainError(
            f"train.device={name} would put every process on the same GPU: with torchrun use "
            f"train.device=cuda (or auto), and each process takes cuda:LOCAL_RANK"
        )
    count = torch.cuda.device_count()
    if local_rank >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise MhatrainError(
            f"LOCAL_RANK={local_rank} but this machine shows {count} CUDA device(s){shown}: "
            f"start at most {count} processes per machine (--nproc_per_node={count})"
        )
    return torch.device("cuda", local_rank)


def pick_backend(requested: str, device: torch.device) -> str:
    """train.dist_backend: auto is NCCL for CUDA devices and gloo for the CPU."""
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise MhatrainError(
            "train.dist_backend=nccl needs CUDA devices, but training runs on the CPU "
            "(train.device): use train.dist_backend=gloo or auto"
        )
    if requested == "nccl" and not dist.is_nccl_available():
        raise MhatrainError("train.dist_backend=nccl but this PyTorch build has no NCCL: use gloo or auto")
    return requested


@dataclass(frozen=True)
class Group:
    """This process's place among the training processes, and the few collectives training needs.

    For a process that no launcher started (world 1), every collective returns its own input and
    torch.distributed is never touched.
    """

    device: torch.device
    rank: int = 0
    world: int = 1
    backend: str = ""  # "" when not launched

    @property
    def launched(self) -> bool:
        return bool(self.backend)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model in DistributedDataParallel (which also copies rank 0's weights to every rank)."""
        if not self.launched:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        # No copying of buffers before each forward: the only buffer is the fixed sinusoidal table.
        # (newer torch calls the option forward_sync_buffers and deprecates broadcast_buffers)
        option = "forward_sync_buffers"
        if option not in inspect.signature(DistributedDataParallel).parameters:
            option = "broadcast_buffers"
        return DistributedDataParallel(model, device_ids=ids, **{option: False})

    @staticmethod
    def accumulating(wrapped: torch.nn.Module, final: bool):
        """Context for one micro-batch: DDP exchanges gradients only in the final one of an update."""
        if isinstance(wrapped, DistributedDataParallel) and not final:
            return wrapped.no_sync()
        return contextlib.nullcontext()

    def sum(self, *values: float) -> tuple:
        """Each value summed over all processes."""
        if not self.launched:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self._comm_device)
        dist.all_reduce(tensor)
        return tuple(tensor.tolist())

    def sum_tensors(self, *tensors: torch.Tensor) -> tuple:
        """Each 0-d tensor summed over all processes, as tensors on their device (NCCL: nothing waits)."""
        if not self.launched:
            return tensors
        stacked = torch.stack([t.double() for t in tensors]).to(self._comm_device)
        dist.all_reduce(stacked)
        stacked = stacked.to(tensors[0].device)
        return tuple(stacked[i].to(t.dtype) for i, t in enumerate(tensors))

    def max(self, value: int) -> int:
        """The largest of the processes' values."""
        if not self.launched:
            return value
        tensor = torch.tensor([value], dtype=torch.int64, device=self._comm_device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def broadcast(self, obj):
        """Rank 0's `obj`, on every process (the others' `obj` is ignored)."""
        if not self.launched:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj) -> list | None:
        """Every process's `obj`, in rank order, on rank 0; None on the others."""
        if not self.launched:
            return [obj]
        out = [None] * self.world if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        if self.launched:
            dist.barrier()

    @property
    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


@contextlib.contextmanager
def process_group(device_name: str, backend: str = "auto"):
    """Join the launcher's process group for the duration of the block (yields a `Group`).

    Without a launcher the block runs as the only process on `resolve_device(device_name)`.
    """
    launch = read_launch()
    if launch is None:
        yield Group(resolve_device(device_name))
        return
    device = resolve_device(device_name, launch.local_rank)
    backend = pick_backend(backend, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend, timeout=TIMEOUT, **({"device_id": device} if backend == "nccl" else {}))
    except (RuntimeError, ValueError) as exc:  # the rendezvous failed: wrong address, port in use, ...
        where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        raise MhatrainError(
            f"rank {launch.rank} of {launch.world} cannot join the other processes at {where}: "
            f"{str(exc).strip().splitlines()[0][:200]}"
        ) from None
    try:
        yield Group(device, launch.rank, launch.world, backend)
    finally:
        dist.destroy_process_group()
