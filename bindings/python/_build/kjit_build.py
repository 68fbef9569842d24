"""A PEP 517 backend for the kjit package, kept in the tree so that
`pip install ./bindings/python` needs nothing from a package index (GPU
machines often have none): it zips kjit/ into a wheel. A libkjit.so* copied
into kjit/ beforehand is bundled, and the wheel is then tagged for this
platform."""

import base64
import hashlib
import io
import sysconfig
import zipfile
from pathlib import Path

NAME, VERSION = "kjit", "0.1.0"
HERE = Path(__file__).resolve().parents[1]
DIST_INFO = f"{NAME}-{VERSION}.dist-info"
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Bitwise batch-invariant AdaLN ops for diffusion transformers (ctypes over libkjit)
Requires-Python: >=3.9
Description-Content-Type: text/markdown

""" + (HERE / "README.md").read_text()


def _files():
    pkg = HERE / NAME
    for path in sorted(pkg.iterdir()):
        if path.suffix == ".py" or path.name.startswith("libkjit.so"):
            yield path


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = list(_files())
    bundled = any(p.name.startswith("libkjit.so") for p in files)
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_") if bundled else "any"
    entries = [(f"{NAME}/{p.name}", p.read_bytes()) for p in files]
    return _write_wheel(wheel_directory, entries, f"py3-none-{platform}", not bundled)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660 (`pip install -e ./bindings/python`): a wheel whose .pth file
    puts this folder on sys.path, so the package is imported from the tree
    (and finds a libkjit.so copied into kjit/ or KJIT_LIBRARY as usual)."""
    return _write_wheel(wheel_directory, [(f"__editable__.{NAME}.pth", f"{HERE}\n".encode())], "py3-none-any",
                        True)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _write_wheel(wheel_directory, entries, tag, purelib):
    entries = list(entries)
    entries.append((f"{DIST_INFO}/METADATA", METADATA.encode()))
    entries.append((f"{DIST_INFO}/WHEEL", (
        f"Wheel-Version: 1.0\nGenerator: kjit_build\nRoot-Is-Purelib: {str(purelib).lower()}\n"
        f"Tag: {tag}\n").encode()))
    record = [_record_line(name, data) for name, data in entries] + [f"{DIST_INFO}/RECORD,,"]
    entries.append((f"{DIST_INFO}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel_name = f"{NAME}-{VERSION}-{tag}.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            # Keep the library's execute bit; plain files rw-r--r--.
            info.external_attr = (0o755 if name.split("/")[-1].startswith("libkjit") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    Path(wheel_directory, wheel_name).write_bytes(buf.getvalue())
    return wheel_name
