"""An open control plane for an emulated wafer-scale training cluster in appliance mode."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wafer-appliance")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
