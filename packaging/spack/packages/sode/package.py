# Spack package for sode: the C library (libsode, libsode_mpi), the header,
# the Fortran module and the CMake package, built by capi/CMakeLists.txt
# (which runs cargo). Use it from a repository of your own:
#   spack repo add packaging/spack && spack install sode
from spack.package import *


class Sode(CMakePackage):
    """The halo exchange of stencil codes: RDMA writes between nodes, a
    one-copy shared-memory channel inside a node, TCP where nodes share no
    RDMA fabric; a Rust library with a C ABI and a Fortran module."""

    homepage = "https://example.invalid/sode"
    git = "https://example.invalid/sode.git"

    license("MIT OR Apache-2.0")

    version("main", branch="main")

    variant("mpi", default=True, description="Build libsode_mpi (sode over an MPI communicator)")
    variant("fortran", default=True, description="Build the Fortran module (needs +mpi)")
    variant("rdma", default=True, description="RDMA between nodes (libibverbs loaded at run time)")

    conflicts("+fortran", when="~mpi", msg="the Fortran module needs libsode_mpi (+mpi)")

    root_cmakelists_dir = "capi"

    depends_on("c", type="build")
    depends_on("fortran", type="build", when="+fortran")
    depends_on("cmake@3.18:", type="build")
    depends_on("rust@1.85:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("hwloc@2:")
    depends_on("mpi", when="+mpi")
    # The verbs bindings are generated at build time.
    depends_on("llvm", type="build", when="+rdma")
    depends_on("rdma-core", type="run", when="+rdma")

    def cmake_args(self):
        args = [
            self.define_from_variant("SODE_WITH_MPI", "mpi"),
            self.define_from_variant("SODE_WITH_FORTRAN", "fortran"),
            self.define_from_variant("SODE_WITH_RDMA", "rdma"),
        ]
        if self.spec.satisfies("+mpi"):
            args.append(self.define("MPI_C_COMPILER", self.spec["mpi"].mpicc))
        if self.spec.satisfies("+fortran"):
            args.append(self.define("MPI_Fortran_COMPILER", self.spec["mpi"].mpifc))
        return args

    def setup_build_environment(self, env):
        # cargo's target directory inside the build stage, not the source.
        env.set("CARGO_TARGET_DIR", join_path(self.stage.path, "cargo-target"))
