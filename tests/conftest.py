"""Fixtures shared by the test modules."""
import pytest

from isa import RUN_TARGETS


@pytest.fixture(params=RUN_TARGETS, ids=lambda t: t.isa if t.option("mcpu") is None else t.option("mcpu"))
def cpu_target(request):
    """Each CPU target the op tests run default schedules for: AVX2 and the host's ISA."""
    return request.param
