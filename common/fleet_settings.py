"""The simulated fleet's size and seed, shared by every service that builds the fleet."""

from __future__ import annotations

from pydantic import Field

from common.settings import Settings


class FleetSettings(Settings):
    """The simulated fleet, one definition for every service that builds it.

    The producer simulates this fleet, the processor writes it as the device
    dimension, and the load test hands it to both: each service's settings class
    derives from this one, so the fields keep that class's prefix and flags
    (``IOT_PRODUCER_FLEET_SIZE``, ``IOT_PROCESSOR_SEED``, ``--fleet-size`` ...).
    """

    fleet_size: int = Field(
        100, ge=1, description="Simulated devices (the producer's and the processor's must match)"
    )
    seed: int = Field(
        42,
        ge=0,
        description="Seed of the fleet and of the producer's event stream (the producer's "
        "and the processor's must match)",
    )

    def fleet(self) -> dict[str, int]:
        """The fleet settings' values, e.g. ``ProcessorSettings.env_vars(**s.fleet())``."""
        return {name: getattr(self, name) for name in FleetSettings.model_fields}
