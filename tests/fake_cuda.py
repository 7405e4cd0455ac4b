"""Test doubles for the CUDA driver bindings (the GPU is the only thing faked): a driver that
finds no device, and one that finds an H100, so what the GPU worker reads from the driver can be
checked on machines without a GPU. Run as a module it is the GPU worker on the fake H100:

    python -m tests.fake_cuda PARENT_PID
"""
import enum
import sys
import types

from autosched.measure import gpu_worker

H100 = "NVIDIA H100 80GB HBM3"


class NoDeviceDriver:
    """A driver that is installed but finds no device, as on a machine whose GPU is missing or hidden."""

    class CUresult(enum.Enum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_NO_DEVICE = 100

    def cuInit(self, flags):
        return (self.CUresult.CUDA_ERROR_NO_DEVICE,)

    def cuGetErrorName(self, err):
        return (self.CUresult.CUDA_SUCCESS, err.name.encode())


class H100Driver(NoDeviceDriver):
    """A driver holding one sm_90 GPU named like an H100: enough for the worker to start and say
    which GPU it holds (nothing is launched on it)."""

    class CUdevice_attribute(enum.Enum):
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    def _ok(self, *values):
        return (self.CUresult.CUDA_SUCCESS, *values)

    def cuInit(self, flags):
        return self._ok()

    def cuDeviceGet(self, ordinal):
        return self._ok(ordinal)

    def cuDeviceGetName(self, length, device):
        return self._ok(H100.encode().ljust(length, b"\0"))

    def cuDeviceGetAttribute(self, attribute, device):
        major = attribute is self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return self._ok(9 if major else 0)

    def cuDevicePrimaryCtxRetain(self, device):
        return self._ok("context")

    def cuCtxSetCurrent(self, context):
        return self._ok()

    def cuStreamCreate(self, flags):
        return self._ok("stream")


def driver_modules(driver) -> dict[str, types.ModuleType]:
    """The sys.modules entries that make `from cuda.bindings import driver` find `driver`,
    whether cuda-bindings is installed or not."""
    package = types.ModuleType("cuda.bindings")
    package.driver = driver
    return {"cuda": types.ModuleType("cuda"), "cuda.bindings": package}


if __name__ == "__main__":
    sys.modules.update(driver_modules(H100Driver()))
    gpu_worker.main()
