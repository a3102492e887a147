"""The MQTT client's set-up (common.mqtt.make_client)."""

from __future__ import annotations

import pytest

from common.mqtt import MqttConnectionError, make_client
from common.mqtt_settings import MqttSettings


def test_a_ca_file_with_no_certificate_is_one_line_naming_its_setting(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    settings = MqttSettings(_env_file=None, host="broker.example", port=8883, tls_ca_file=ca)
    with pytest.raises(MqttConnectionError) as caught:
        make_client(settings, "c1")
    assert str(caught.value) == (
        f"cannot use the CA file {ca} (NO_CERTIFICATE_OR_CRL_FOUND): set IOT_MQTT_TLS_CA_FILE "
        "to the PEM file of the CA that signed the broker's certificate"
    )
