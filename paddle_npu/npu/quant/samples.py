"""A model's inputs sample by sample, as calibration and the accuracy reports read them.

    open_samples(proto, data, limit, preprocess)   an .npz, a folder of images or a
                                                   {input: array} dict, as `Samples`
    run_batches(session, samples)                  onnxruntime on them, in the batches the
                                                   model accepts

Nothing holds more than one batch: an .npz's arrays are read a slice at a time from the file
(np.load would read an array whole), images are decoded a batch at a time. A model whose
inputs fix their leading size d (a program exported for batch 1) runs d samples at a time;
one with an open batch runs BATCH at a time, so memory does not grow with the sample count.
"""
import os
import tempfile
import zipfile

import numpy as np

from ...compare import check_finite, read_npz
from ...errors import ConversionError
from ...preprocess import image_files, read_images
from ...progress import progress_bar

BATCH = 8           # samples per run of a model with an open batch


class Samples:
    """`count` samples of the inputs `names`; `read(start, stop)` gives {name: array} of
    samples [start, stop) (a leading sample axis)."""

    def __init__(self, names, count, read, where, whole=False):
        self.names, self.count, self.read, self.where = list(names), count, read, where
        self.whole = whole          # one batch as it is: run once, never split

    def batches(self, size):
        for start in range(0, self.count, size):
            yield self.read(start, min(start + size, self.count))

    def arrays(self):
        """All samples at once, {name: array} (the reports that keep every output)."""
        parts = list(self.batches(max(self.count, 1)))
        return parts[0] if parts else {name: np.zeros((0,)) for name in self.names}

    def check_finite(self):
        check_finite(self.batches(BATCH), self.where)
        return self


class SampleFiles:
    """Tensors of a model run sample by sample, each sample's kept in files of a temporary
    folder (removed with the object): a decoder's scores of every step over its vocabulary
    reach hundreds of MB a sample, and a search judging the samples one at a time needs
    only one sample's at once. `append({name: array})` adds the next sample's; `files[i]`
    reads sample i's back."""

    def __init__(self):
        self._folder = tempfile.TemporaryDirectory(prefix="paddle_npu_samples_")
        self._names = []

    def _path(self, i, j):
        return os.path.join(self._folder.name, f"{i}_{j}.npy")

    def append(self, tensors):
        for j, value in enumerate(tensors.values()):
            np.save(self._path(len(self._names), j), value)
        self._names.append(list(tensors))

    def __len__(self):
        return len(self._names)

    @property
    def names(self):
        """The tensors' names (every sample has the same)."""
        return self._names[0] if self._names else []

    def __getitem__(self, i):
        return {name: np.load(self._path(i, j)) for j, name in enumerate(self._names[i])}


def from_arrays(feeds, where="the data"):
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    counts = {len(v) for v in feeds.values()}
    if len(counts) > 1:
        raise ConversionError(f"{where}: the inputs have different sample counts "
                              f"{sorted(counts)}")
    count = counts.pop() if counts else 0
    return Samples(feeds, count, lambda a, b: {k: v[a:b] for k, v in feeds.items()}, where)


def one_batch(feeds, where="the data"):
    """Arrays that are one batch as they are, not samples along a common leading axis (an
    RNN's time-major input beside its [directions, batch, hidden] initial states)."""
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    return Samples(feeds, 1, lambda a, b: feeds, where, whole=True)


def as_samples(data, where="the data"):
    return data if isinstance(data, Samples) else from_arrays(data, where)


def open_samples(proto, data, limit=None, preprocess=None):
    """The model's inputs from `data`: an .npz keyed by input name (or in_<name>, as
    reference_io.npz files are), a folder of images turned into the model's image input by
    `preprocess` (a PreprocessSpec: the model's normalisation, see preprocess.read_images),
    or a {input: array} dict; checked for NaN / infinite values (images as they are read)."""
    inits = {i.name for i in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    if isinstance(data, Samples):
        return data
    images = not isinstance(data, dict) and os.path.isdir(data)
    if isinstance(data, dict):
        samples = from_arrays(data) if len({len(np.asarray(v)) for v in data.values()}) <= 1 \
            else one_batch(data)
    elif images:
        samples = _image_samples(proto, names, data, preprocess)
    else:
        if preprocess is not None:
            raise ConversionError(f"{data}: preprocessing settings apply to a folder of "
                                  "images, not to an .npz of model inputs")
        samples = _npz_samples(data, names)
    if limit and limit < samples.count:
        samples = Samples(samples.names, limit, samples.read, samples.where)
    return samples if images else samples.check_finite()     # (images: as they are read)


class _NpzRows:
    """Rows [start, stop) of one array stored in an .npz, read from the file."""

    def __init__(self, path, archive, member):
        self.path, self.archive, self.member = path, archive, member
        self.file = None
        with archive.open(member) as f:
            self.dtype, self.shape, fortran, self.offset = _npy_header(f)
        if self.dtype.hasobject:
            raise ConversionError(f"{path}: array {member[:-4]!r} holds Python objects; "
                                  "save the inputs as numeric arrays")
        if not self.shape:
            raise ConversionError(f"{path}: array {member[:-4]!r} is a scalar; inputs need "
                                  "a leading sample axis")
        self.whole = None
        if fortran:                 # rows are not contiguous in the file: read it whole
            with archive.open(member) as f:
                self.whole = np.lib.format.read_array(f)
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, rows):
        start, stop, _ = rows.indices(self.shape[0])
        stop = max(start, stop)
        if self.whole is not None:
            return self.whole[start:stop]
        at = self.offset + start * self.row_bytes
        if self.file is None or self.file.tell() > at:    # (a deflated member reads forward)
            self.file = self.archive.open(self.member)
        self.file.seek(at)
        raw = self.file.read((stop - start) * self.row_bytes)
        return np.frombuffer(raw, self.dtype).reshape((stop - start,) + self.shape[1:]).copy()


def _npy_header(f):
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
        np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return np.dtype(dtype), tuple(shape), fortran, f.tell()


def _npz_samples(path, names):
    keys = read_npz(path).files
    archive = zipfile.ZipFile(path)
    feeds = {}
    for name in names:
        for key in (name, f"in_{name}"):
            if key in keys:
                feeds[name] = _NpzRows(path, archive, key + ".npy")
                break
        else:
            raise ConversionError(f"{path}: no array for input {name!r} (keys: "
                                  f"{', '.join(keys)})")
    counts = {len(v) for v in feeds.values()}
    if len(counts) > 1:
        raise ConversionError(f"{path}: the inputs have different sample counts "
                              f"{sorted(counts)}")
    return Samples(names, counts.pop() if counts else 0,
                   lambda a, b: {k: v[a:b] for k, v in feeds.items()}, path)


def _image_samples(proto, names, folder, spec):
    if spec is None:
        raise ConversionError(f"{folder}: a folder of images needs the model's "
                              "normalisation, which `paddle-npu calibrate` takes (--mean / "
                              "--std ..., or preprocess= a PreprocessSpec in Python); "
                              "elsewhere give an .npz of model inputs")
    inputs = {i.name: i for i in proto.graph.input if i.name in names}
    name = spec.input or (next(iter(inputs)) if len(inputs) == 1 else None)
    if name not in inputs:
        raise ConversionError(f"{folder}: the model has no input {name!r} (inputs: "
                              f"{', '.join(inputs)})" if name else
                              f"{folder}: images feed one image input but the model has "
                              f"{len(inputs)} ({', '.join(inputs)}); calibrate on an .npz "
                              "holding all of them")
    if len(inputs) != 1:
        raise ConversionError(f"{folder}: the model has other inputs besides {name!r} "
                              f"({', '.join(n for n in inputs if n != name)}); calibrate "
                              "on an .npz holding all of them")
    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in inputs[name].type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ConversionError(f"{folder}: input {name!r} is not a 4-D image input "
                              f"(shape {dims})")
    paths = image_files(folder)

    def read(start, stop):
        batch = {name: read_images(paths[start:stop], spec, dims)}
        check_finite([batch], f"{folder} (images {start}..{stop - 1})")
        return batch
    return Samples([name], len(paths), read, folder)


def accepted_batch(session, where):
    """How many samples one run of the session takes: the leading size its inputs fix (the
    same for all of them), or None when it is open (then up to BATCH)."""
    fixed = {}
    for i in session.get_inputs():
        if i.shape and isinstance(i.shape[0], int) and i.shape[0] > 0:
            fixed.setdefault(i.shape[0], i.name)
    if len(fixed) > 1:
        raise ConversionError(f"{where}: the model's inputs fix different batch sizes ("
                              + ", ".join(f"{n} {d}" for d, n in fixed.items()) +
                              "); give them one (--input-shape)")
    return next(iter(fixed), None)


def run_batches(session, samples, where=None, progress=None):
    """Yield (inputs, {output name: array}) per batch the model accepts (`accepted_batch`).
    A model fixing its batch to d > 1 needs a multiple of d samples. progress: a label for
    a progress line on a terminal (stderr)."""
    samples = as_samples(samples)
    where = where or samples.where or "the data"
    size = 1 if samples.whole else accepted_batch(session, where)
    if size is None:
        size = BATCH
    elif samples.count % size:
        raise ConversionError(f"{where}: {samples.count} samples, but the model runs "
                              f"batches of exactly {size}: give a multiple of {size} "
                              "(--limit) or open the batch size (--input-shape NAME:-1,...)")
    names = [o.name for o in session.get_outputs()]
    batches = samples.batches(size)
    if progress:
        batches = progress_bar(batches, progress, total=-(-samples.count // size))
    for feeds in batches:
        yield feeds, dict(zip(names, session.run(None, feeds)))
