"""How every output file is written: the one place that decides it.

- A regular file is written to a temp file beside it and renamed over it, so a failure leaves
  the old file (or none) and never a half-written one. A new file gets the mode the umask
  allows (as `open` would); an existing file keeps its mode (and, as root, its owner).
- A symlink is written through: its target is the file written.
- A character device or FIFO (/dev/null, /dev/stdout, a pipe) is written through, not
  replaced; any other special file (block device, socket) is refused.
- A file the command reads (model, params, data, ...) is never written.

`check_output` decides all that before the first byte is written; the CLI checks every output
a command names at once, before it starts.
"""
import os
import stat
import tempfile

from .errors import OutputError

_TMP_PREFIX = ".paddle_npu."


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Destination:
    """A checked output path: `target` is where the bytes go, `mode` its permissions (None
    for a device), `existing` whether a file is replaced."""

    def __init__(self, path, target, device, mode, existing):
        self.path, self.target, self.device, self.mode, self.existing = \
            path, target, device, mode, existing

    def __repr__(self):
        return f"Destination({self.path!r} -> {self.target!r})"


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(path, inputs=(), what="output"):
    """Decide how `path` is written, or raise OutputError saying why it cannot be.

    inputs: files the command reads, never to be overwritten.
    """
    if path is None or not os.fspath(path):
        raise OutputError(f"the {what} file name is empty")
    path = os.fspath(path)
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise OutputError(f"{path}: names a directory; give a file name for the {what}")
    target = os.path.realpath(path)
    for source in inputs:
        if source and os.path.exists(source) and _same_file(target, source):
            raise OutputError(f"{path}: the {what} would overwrite {source}, which this command "
                              "reads; choose another output name")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the {what} ({exc.strerror})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path}: is a directory; give a file name for the {what}")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            if not os.access(target, os.W_OK):
                raise OutputError(f"{path}: no permission to write to this device")
            return Destination(path, target, True, None, True)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: is a special file (not a regular file, character "
                              f"device or pipe); give a file name for the {what}")
        if not os.access(target, os.W_OK):
            raise OutputError(f"{path}: the file is read-only; make it writable or choose "
                              "another name")
        mode = stat.S_IMODE(st.st_mode)
    else:
        mode = 0o666 & ~_umask()
    _check_folder(path, os.path.dirname(target), what)
    return Destination(path, target, False, mode, st is not None)


def _check_folder(path, folder, what):
    """The folder `path` goes into (made at write time when missing) can take a new file."""
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputError(f"{path}: {existing} is not a directory; cannot write the {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: no permission to create files in {existing}")


def check_output_dir(path, inputs=(), what="output directory"):
    """A directory a command fills with files (made when missing); its files are written
    with `write_with`, which checks each."""
    path = os.fspath(path)
    if not path:
        raise OutputError(f"the {what} name is empty")
    target = os.path.realpath(path)
    if os.path.exists(target):
        if not os.path.isdir(target):
            raise OutputError(f"{path}: exists and is not a directory; give a directory for "
                              f"the {what}")
        if not os.access(target, os.W_OK | os.X_OK):
            raise OutputError(f"{path}: no permission to create files in this directory")
    else:
        _check_folder(path, os.path.dirname(target), what)
    for source in inputs:
        if source and os.path.exists(source) and _same_file(target, source):
            raise OutputError(f"{path}: the {what} would replace {source}, which this command "
                              "reads; choose another name")
    return target


def _failed(dest, exc):
    return OutputError(f"{dest.path}: cannot write ({exc.strerror or exc})")


def write_with(path, write, inputs=(), what="output"):
    """Write `path` with write(file_path): `file_path` is a temp file renamed over `path` when
    complete, or the device itself. Returns the path written."""
    dest = check_output(path, inputs, what)
    if dest.device:
        try:
            write(dest.target)
        except OSError as exc:
            raise _failed(dest, exc) from None
        return dest.path
    folder = os.path.dirname(dest.target)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        # The temp file keeps the extension: writers that pick a format by it still can.
        suffix = os.path.splitext(dest.target)[1][:16]
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=suffix, dir=folder)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, dest.mode)
        if dest.existing and hasattr(os, "geteuid") and os.geteuid() == 0:
            st = os.stat(dest.target)
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, dest.target)
    except OSError as exc:
        raise _failed(dest, exc) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
    return dest.path


def write_bytes(path, data, inputs=(), what="output"):
    def write(file_path):
        with open(file_path, "wb") as f:
            f.write(data)
    return write_with(path, write, inputs, what)


def write_text(path, text, inputs=(), what="output"):
    return write_bytes(path, text.encode("utf-8"), inputs, what)
