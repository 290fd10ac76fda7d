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
from appliance.workers.data import numpy_files
from appliance.workers.data.errors import DataError as DataError
from appliance.workers.models.model import Batch


class DataSet(Protocol):
    """Samples 0..len-1 of a data set, read by index."""

    name: str

    def __len__(self) -> int:
        """How many samples the data set holds."""

    def read(self, indices: npt.NDArray[np.int64]) -> Batch:
        """The samples `indices` (each in 0..len-1), in that order, as one batch."""


def open_data_set(section: InputSection, params: Params) -> DataSet:
    """`section`'s data set, checked against `params.model`; DataError if it cannot be read."""
    if section.data_dir is None:
        raise DataError("the section has no data_dir; its batches are synthetic")
    data_dir = Path(section.data_dir)
    model = params.model
    processor = section.data_processor or DATA_PROCESSORS[model.name][0]
    if isinstance(model, FcMnistModel) and processor == "NumpyDataProcessor":
        return numpy_files.open_numpy_set(data_dir, model)
    raise DataError(f"data_processor {processor} does not read data for {model.name}")
