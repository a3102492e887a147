"""Entra ID credentials for ``auth=entra``: choose one by name, and check it early.

``IOT_PRODUCER_ENTRA_CREDENTIAL`` names an azure-identity credential (``default`` is
``DefaultAzureCredential``), or ``module:factory`` for any object with
``get_token(scope)`` (a factory is called with no arguments).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, cast

from common.deadline import NoAnswerInTime, within
from common.kafka import KafkaConnectionError, TokenCredential
from producer.settings import ProducerSettings

# Secrets azure-identity's EnvironmentCredential reads: kept out of any message.
SECRET_ENV = ("AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PASSWORD", "AZURE_PASSWORD")

ALIASES = {
    "default": "DefaultAzureCredential",
    "environment": "EnvironmentCredential",
    "managed_identity": "ManagedIdentityCredential",
    "workload_identity": "WorkloadIdentityCredential",
    "azure_cli": "AzureCliCredential",
    "azure_developer_cli": "AzureDeveloperCliCredential",
    "azure_powershell": "AzurePowerShellCredential",
}


def make_credential(spec: str) -> TokenCredential:
    """Build the credential ``spec`` names.

    Args:
        spec: An alias (``default``, ``managed_identity`` ...), an azure-identity class
            name (``ManagedIdentityCredential``), or ``module:attribute`` naming a
            credential object or a zero-argument factory of one.

    Returns:
        The credential.

    Raises:
        ValueError: The name is unknown or the import fails.

    """
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            obj: Any = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load the credential {spec!r}: {exc}") from None
        if not hasattr(obj, "get_token") and callable(obj):
            obj = obj()
        if not hasattr(obj, "get_token"):
            raise ValueError(f"{spec!r} is not a credential: it has no get_token(scope)")
        return cast(TokenCredential, obj)
    import azure.identity

    name = ALIASES.get(spec.lower(), spec)
    cls = getattr(azure.identity, name, None)
    if cls is None or not name.endswith("Credential"):
        raise ValueError(
            f"unknown Entra ID credential {spec!r}: use one of {', '.join(ALIASES)}, an "
            "azure.identity class name, or module:factory"
        )
    return cast(TokenCredential, cls())


def check_token(credential: TokenCredential, scope: str, *, timeout_s: float = 12.0) -> None:
    """Get one token now, so a missing or wrong credential fails fast and clearly.

    Args:
        credential: The credential the producer will use.
        scope: ``https://<namespace>.servicebus.windows.net/.default``.
        timeout_s: Give up after this long.

    Raises:
        KafkaConnectionError: No token within the deadline, or the credential refused.

    """
    name = type(credential).__name__
    choose = ProducerSettings.env_name("entra_credential")
    try:
        within(timeout_s, lambda: credential.get_token(scope), "entra-token")
    except NoAnswerInTime:
        raise KafkaConnectionError(
            f"no Entra ID token for {scope} from {name} within {timeout_s:.0f} s: check that "
            f"this machine can reach Entra ID, or choose a credential with {choose}"
        ) from None
    except Exception as exc:  # any credential failure is reported the same
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise KafkaConnectionError(
            f"no Entra ID token for {scope} from {name} ({type(exc).__name__}: "
            f"{without_secrets(first_line)[:300]}): sign in (az login), set AZURE_CLIENT_ID/"
            "AZURE_TENANT_ID/AZURE_CLIENT_SECRET or a managed identity, or choose another "
            f"credential with {choose}"
        ) from None


def without_secrets(text: str) -> str:
    """``text`` with the value of every variable of ``SECRET_ENV`` that is set cut out."""
    for variable in SECRET_ENV:
        value = os.environ.get(variable, "")
        if len(value) >= 4:  # shorter ones would blank ordinary words
            text = text.replace(value, "***")
    return text
