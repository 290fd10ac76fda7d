"""A job's data set as its input workers read it: `open_data_set(section, params)` opens the
section's data_dir with its data processor (the model's first one when none is named) and
checks it against the model; `DataSet.read(indices)` gives those samples as one Batch, in the
kinds, shapes and dtypes the model's own synthetic batches have. Which indices make which batch
is order.py's.

Processors (params.DATA_PROCESSORS):
- fc_mnist: MNISTDataProcessor (mnist.py), NumpyDataProcessor (numpy_files.py);
- gpt2: GptHDF5DataProcessor (gpt_hdf5.py).
Every failure to read is a DataError naming the file and what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from appliance.domain.params import DATA_PROCESSORS, FcMnistModel, InputSection, Params
from appliance.workers.data import mnist, numpy_files
from appliance.workers.data.errors import DataError as DataError
from appliance.workers.data.gpt_hdf5 import GptHdf5Set
from appliance.workers.models.model import Batch


class DataSet(Protocol):
    """Samples 0..len-1 of a data set, read by index."""

    name: str

    def __len__(self) -> int:
        """How many samples the data set holds."""

    def read(self, indices: npt.NDArray[np.int64]) -> Batch:
        """The samples `indices` (each in 0..len-1), in that order, as one batch."""


def open_data_set(
    section: InputSection, params: Params, *, training: bool | None = None
) -> DataSet:
    """`section`'s data set, checked against `params.model`; DataError if it cannot be read.

    `training` says which section this is (None: training unless `section` is
    params.eval_input): MNISTDataProcessor reads the `train` files for training and the `t10k`
    files for evaluation. A gpt2 data set's sequences have the job's sequence length
    (train_input.max_sequence_length, else model.max_position_embeddings), as the model's.
    """
    if section.data_dir is None:
        raise DataError("the section has no data_dir; its batches are synthetic")
    if training is None:
        training = section is not params.eval_input
    data_dir = Path(section.data_dir)
    model = params.model
    processor = section.data_processor or DATA_PROCESSORS[model.name][0]
    if isinstance(model, FcMnistModel):
        if processor == "NumpyDataProcessor":
            return numpy_files.open_numpy_set(data_dir, model)
        if processor == "MNISTDataProcessor":
            return mnist.open_mnist_set(data_dir, model, training)
    elif processor == "GptHDF5DataProcessor":
        length = params.train_input.max_sequence_length or model.max_position_embeddings
        return GptHdf5Set(data_dir, model, length)
    raise DataError(f"data_processor {processor} does not read data for {model.name}")
