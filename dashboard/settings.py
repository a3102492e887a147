"""The dashboard's settings (env prefix ``IOT_DASHBOARD_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from common.settings import LakeSettings, Settings


class DashboardSettings(Settings):
    """What the dashboard reads and how often it refreshes."""

    config_section: ClassVar[str] = "dashboard"
    model_config = SettingsConfigDict(env_prefix="IOT_DASHBOARD_")

    refresh_s: float = Field(5.0, gt=0, description="Seconds between live refreshes")
    lookback_minutes: int = Field(60, ge=1, description="How far back the charts look")
    lake: LakeSettings = Field(default_factory=LakeSettings)
