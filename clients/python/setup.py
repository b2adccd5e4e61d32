"""Build hook: generates the gRPC stubs (tandem/_pb/tandem_pb2.py and
tandem_pb2_grpc.py) from the wire contract, api/tandem.proto, at build time
with grpcio-tools (a build requirement). Nothing generated is committed.

The proto is read from proto/tandem.proto when present (an sdist carries a
copy there), else from the repository: ../../api/tandem.proto.
"""

import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = [
    os.path.join(HERE, "proto", "tandem.proto"),
    os.path.join(HERE, "..", "..", "api", "tandem.proto"),
]


def find_proto():
    for p in CANDIDATES:
        if os.path.isfile(p):
            return p
    raise RuntimeError(
        "tandem: api/tandem.proto not found (looked at %s): build from a checkout "
        "of the Tandem repository, or from an sdist that carries proto/tandem.proto" % ", ".join(CANDIDATES)
    )


def generate(out_root):
    """Runs protoc on the proto placed at tandem/_pb/tandem.proto under a
    temporary include root, so that the generated gRPC module imports
    'from tandem._pb import tandem_pb2' (not a top-level tandem_pb2)."""
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools

    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "tandem", "_pb")
        os.makedirs(pkg)
        shutil.copyfile(find_proto(), os.path.join(pkg, "tandem.proto"))
        out = os.path.join(out_root, "tandem", "_pb")
        os.makedirs(out, exist_ok=True)
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        rc = protoc.main([
            "grpc_tools.protoc",
            "-I" + tmp,
            "-I" + well_known,
            "--python_out=" + out_root,
            "--grpc_python_out=" + out_root,
            os.path.join(pkg, "tandem.proto"),
        ])
        if rc != 0:
            raise RuntimeError("tandem: protoc failed (exit %d) on %s" % (rc, find_proto()))


class BuildPy(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


class SDist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        os.makedirs(os.path.join(base_dir, "proto"), exist_ok=True)
        shutil.copyfile(find_proto(), os.path.join(base_dir, "proto", "tandem.proto"))


setup(cmdclass={"build_py": BuildPy, "sdist": SDist})
