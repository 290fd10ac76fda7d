"""What the data plane's numbers promise, and the two rules that keep the promise.

The promise: on one machine (one CPU, one NumPy and BLAS install, the same environment for
NumPy's and OpenBLAS's CPU dispatch), the same spec gives the same bits in every process that
trains it, whatever the allocator, wherever in memory (at a multiple of its item size) it puts
an array, and whatever BLAS thread count the process was started with. So a job on one CS-2
ends with the weights of the single-process reference (appliance.workers.models.reference) bit for
bit, and a run resumed from a checkpoint on the same topology (CS-2s and SwarmX, which fix the
order of the gradient sums) ends where the uninterrupted run does. On N CS-2s the shards'
gradients are summed in another order, so the weights match 1 CS-2 up to rounding (the worker
tests hold them to a relative 1e-5). Across machines or installs no bits are promised: BLAS
picks its kernels by CPU, and kernels round differently.

The rules, each closing a way two processes of one machine used to disagree:
1. **Every array the model computes on is aligned to its item size**
   (appliance.workers.transport.tensors.decode_layer). A tensor received over the wire is a view of
   the message, wherever the message put its bytes: mostly not at a multiple of 4, and where
   depends on the length of the step number's varint. NumPy copies such an operand before a matrix
   product, in C order, so `grad @ weight.T` reached BLAS as a plain product instead of a
   transposed one, which OpenBLAS's AVX-512 (SkylakeX) kernels round differently; reductions over a
   misaligned array are buffered in blocks and summed in another grouping. Alignment beyond the
   item size (16 or 64 bytes: the allocator's choice) is not something NumPy or OpenBLAS promise to
   ignore; they do today, and the worker tests train at every aligned place in a cache line so that
   a release that starts to care is caught.
2. **BLAS runs on one thread for the model** (`pin_blas_threads`, `limit_loaded_blas`,
   `one_blas_thread`). OpenBLAS splits a large product between threads in a way that changes
   its rounding (on this machine's kernel a 600x1024 layer differs between 1 and 2 threads).
   Replicas are many per host anyway, one thread apiece.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, MutableMapping

import threadpoolctl

# Read by OpenBLAS, OpenMP and MKL when they load: set before NumPy is imported.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pin_blas_threads(environ: MutableMapping[str, str]) -> None:
    """Make the BLAS a process loads use one thread, whatever `environ` asked for.

    Call it on os.environ before NumPy is first imported (a replica's first act).
    """
    for variable in BLAS_THREAD_VARIABLES:
        environ[variable] = "1"


def limit_loaded_blas() -> None:
    """Limit every BLAS already loaded to one thread for the rest of the process: a replica's
    second line of defence, should something have loaded NumPy before `pin_blas_threads`."""
    threadpoolctl.threadpool_limits(limits=1, user_api="blas")


@functools.cache
def _controller() -> threadpoolctl.ThreadpoolController:
    # Inspecting the loaded libraries costs ~0.15 ms; a limit on a known controller ~10 us. It
    # knows the libraries loaded when first used: NumPy's BLAS, the only one the model calls.
    return threadpoolctl.ThreadpoolController()


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS on one thread, in a process already running (the reference
    trainer's, a test's, a benchmark's); restores the previous thread count after."""
    with _controller().limit(limits=1, user_api="blas"):
        yield
