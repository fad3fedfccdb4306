"""``mini.device``: the type of every backend, so that ``mini.device("cpu")`` works as in
PyTorch and ``isinstance(t.device, mini.device)`` is true.

A device *is* its backend object: ``mini.device("numpy")`` returns the numpy backend, and
``t.device`` is the backend that owns ``t``'s buffer.  It prints, compares and hashes like
``torch.device`` (``device(type='cpu')``, ``.type``, ``.index``); unlike torch it also
compares equal to its name (``t.device == "cpu"``).
"""
from __future__ import annotations


class _DeviceType(type):
    def __call__(cls, *args, **kwargs):
        if cls is device:  # mini.device("cpu"): look the backend up
            return _lookup(*args, **kwargs)
        return super().__call__(*args, **kwargs)  # a backend class being instantiated


def _lookup(type=None, index=None):
    if type is None:
        raise TypeError("mini.device() needs a device type, e.g. mini.device('cpu')")
    from mini.backends import get_backend
    return get_backend(type if index is None else f"{type}:{index}")


class device(metaclass=_DeviceType):
    """``mini.device(type, index=None)``: the backend for a device name ("cpu", "numpy",
    "cpu:0"); a device object passes through."""

    name = "?"
    index = None

    @property
    def type(self) -> str:
        return self.name

    def __repr__(self):
        return f"device(type='{self.name}')"

    def __str__(self):
        return self.name

    def __eq__(self, other):
        if isinstance(other, str):
            return other.split(":")[0] == self.name
        return getattr(other, "name", None) == self.name

    def __hash__(self):
        return hash(self.name)

    # A backend is a per-process singleton: copies and pickles refer to it by name.
    def __reduce__(self):
        from mini.backends import get_backend
        return (get_backend, (self.name,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self
