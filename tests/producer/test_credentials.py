"""Entra ID credentials by name: aliases, azure-identity class names, module:factory."""

from __future__ import annotations

import os
import threading

import azure.identity
import pytest

from common.kafka import KafkaConnectionError
from producer.credentials import check_token, make_credential


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("default", azure.identity.DefaultAzureCredential),
        ("Default", azure.identity.DefaultAzureCredential),
        ("managed_identity", azure.identity.ManagedIdentityCredential),
        ("azure_cli", azure.identity.AzureCliCredential),
        ("AzureCliCredential", azure.identity.AzureCliCredential),
    ],
)
def test_names_build_the_azure_identity_credential(spec, cls):
    assert type(make_credential(spec)) is cls


def test_unknown_names_and_non_credentials_are_refused_with_what_to_use():
    with pytest.raises(
        ValueError, match="unknown Entra ID credential 'kerberos': use one of default"
    ):
        make_credential("kerberos")
    with pytest.raises(
        ValueError, match="unknown Entra ID credential 'TokenCachePersistenceOptions'"
    ):
        make_credential("TokenCachePersistenceOptions")  # in azure.identity, not a credential
    with pytest.raises(ValueError, match="'os:sep' is not a credential"):
        make_credential("os:sep")
    with pytest.raises(ValueError, match="cannot load the credential 'no_such_module:x'"):
        make_credential("no_such_module:x")


class _Refusing:
    def get_token(self, *scopes: str) -> object:
        secret = os.environ["AZURE_CLIENT_SECRET"]
        raise RuntimeError(f"AADSTS7000215: invalid client secret {secret} provided\nmore")


class _Silent:
    def __init__(self) -> None:
        self.release = threading.Event()

    def get_token(self, *scopes: str) -> object:
        self.release.wait(5)
        raise RuntimeError("late")


def test_a_refused_token_is_one_line_without_the_client_secret(monkeypatch):
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "s3cr3t~Value.0123456789")
    with pytest.raises(KafkaConnectionError) as exc:
        check_token(_Refusing(), "https://ns.servicebus.windows.net/.default")
    assert str(exc.value) == (
        "no Entra ID token for https://ns.servicebus.windows.net/.default from _Refusing "
        "(RuntimeError: AADSTS7000215: invalid client secret *** provided): sign in (az login), "
        "set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET or a managed identity, or "
        "choose another credential with IOT_PRODUCER_ENTRA_CREDENTIAL"
    )


def test_no_token_in_time_names_the_setting_that_chooses_the_credential():
    silent = _Silent()
    with pytest.raises(KafkaConnectionError) as exc:
        check_token(silent, "https://ns.servicebus.windows.net/.default", timeout_s=1.0)
    silent.release.set()
    assert str(exc.value) == (
        "no Entra ID token for https://ns.servicebus.windows.net/.default from _Silent within "
        "1 s: check that this machine can reach Entra ID, or choose a credential with "
        "IOT_PRODUCER_ENTRA_CREDENTIAL"
    )
