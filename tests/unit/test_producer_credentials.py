"""Entra ID credentials by name: aliases, azure-identity class names, module:factory."""

from __future__ import annotations

import azure.identity
import pytest

from producer.credentials import make_credential


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
